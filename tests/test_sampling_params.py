"""SamplingParams: every bad value raises naming its field; the mapping onto SlotRequest."""

from __future__ import annotations

import re

import numpy as np
import pytest

from specworker.config import MAX_BAD_WORDS
from specworker.sampling_params import SamplingParams

BAD = {
    "temperature_negative": (dict(temperature=-0.5), ValueError, "temperature = -0.5; allowed: a finite float >= 0"),
    "temperature_nan": (dict(temperature=float("nan")), ValueError, "temperature = nan"),
    "temperature_str": (dict(temperature="1"), TypeError, "temperature = '1' is a str"),
    "top_p_zero": (dict(top_p=0.0), ValueError, "top_p = 0.0; allowed: a float with 0 < top_p <= 1"),
    "top_p_above_one": (dict(top_p=1.01), ValueError, "top_p = 1.01"),
    "top_p_bool": (dict(top_p=True), TypeError, "top_p = True is a bool"),
    "top_k_minus_two": (dict(top_k=-2), ValueError, "top_k = -2; allowed: -1 or 0 \\(off\\), or an int >= 1"),
    "top_k_float": (dict(top_k=5.0), TypeError, "top_k = 5.0 is a float; allowed: an int"),
    "top_k_bool": (dict(top_k=True), TypeError, "top_k = True is a bool"),
    "min_p_negative": (dict(min_p=-0.1), ValueError, "min_p = -0.1; allowed: a float in \\[0, 1\\]"),
    "min_p_above_one": (dict(min_p=1.5), ValueError, "min_p = 1.5"),
    "repetition_penalty_zero": (dict(repetition_penalty=0.0), ValueError,
                                "repetition_penalty = 0.0; allowed: a finite float > 0"),
    "repetition_penalty_inf": (dict(repetition_penalty=float("inf")), ValueError, "repetition_penalty = inf"),
    "frequency_penalty_high": (dict(frequency_penalty=2.5), ValueError,
                               "frequency_penalty = 2.5; allowed: a float in \\[-2, 2\\]"),
    "presence_penalty_nan": (dict(presence_penalty=float("nan")), ValueError, "presence_penalty = nan"),
    "presence_penalty_low": (dict(presence_penalty=-3), ValueError, "presence_penalty = -3"),
    "seed_negative": (dict(seed=-1), ValueError, "seed = -1; allowed: None or an int in 0..4294967295"),
    "seed_too_big": (dict(seed=2**32), ValueError, "seed = 4294967296"),
    "seed_bool": (dict(seed=False), ValueError, "seed = False"),
    "max_tokens_zero": (dict(max_tokens=0), ValueError, "max_tokens = 0; allowed: an int >= 1"),
    "max_tokens_float": (dict(max_tokens=8.0), TypeError, "max_tokens = 8.0 is a float"),
    "min_tokens_above_max": (dict(max_tokens=4, min_tokens=5), ValueError,
                             "min_tokens = 5; allowed: an int in 0..max_tokens = 4"),
    "min_tokens_negative": (dict(min_tokens=-1), ValueError, "min_tokens = -1"),
    "stop_token_negative": (dict(stop_token_ids=[3, -1]), ValueError,
                            "stop_token_ids\\[1\\] = -1; allowed: an int >= 0"),
    "stop_token_float": (dict(stop_token_ids=[3.0]), TypeError, "stop_token_ids\\[0\\] = 3.0 is a float"),
    "stop_tokens_str": (dict(stop_token_ids="12"), TypeError, "stop_token_ids = '12' is a str"),
    "bad_word_bool": (dict(bad_words_token_ids=[True]), TypeError, "bad_words_token_ids\\[0\\] = True is a bool"),
    "too_many_bad_words": (dict(bad_words_token_ids=list(range(MAX_BAD_WORDS + 1))), ValueError,
                           f"bad_words_token_ids = '<{MAX_BAD_WORDS + 1} ids>'; allowed: at most MAX_BAD_WORDS"),
    "ignore_eos_int": (dict(ignore_eos=1), TypeError, "ignore_eos = 1; allowed: a bool"),
}


@pytest.mark.parametrize("case", BAD)
def test_sampling_params_rejects_bad_value(case):
    overrides, error, message = BAD[case]
    with pytest.raises(error, match="SamplingParams." + message) as info:
        SamplingParams(**overrides)
    field = next(iter(overrides)) if len(overrides) == 1 else "min_tokens"
    assert re.search(rf"\b{field}\b", str(info.value))


def test_sampling_params_defaults_are_vllm_like():
    p = SamplingParams()
    assert (p.temperature, p.top_p, p.top_k, p.min_p, p.repetition_penalty) == (1.0, 1.0, -1, 0.0, 1.0)
    assert (p.frequency_penalty, p.presence_penalty, p.seed, p.max_tokens, p.min_tokens) == (0.0, 0.0, None, 16, 0)
    assert (p.stop_token_ids, p.bad_words_token_ids, p.ignore_eos) == ((), (), False)


def test_sampling_params_is_frozen_and_normalises_types():
    p = SamplingParams(temperature=1, top_k=np.int64(5), stop_token_ids=[np.int32(7)], bad_words_token_ids=(3,))
    assert type(p.temperature) is float and type(p.top_k) is int
    assert p.stop_token_ids == (7,) and type(p.stop_token_ids[0]) is int
    with pytest.raises(AttributeError):
        p.temperature = 0.5  # type: ignore[misc]
    assert SamplingParams(min_p=1.0, top_p=1.0, seed=2**32 - 1, temperature=0.0).seed == 2**32 - 1


def test_sampling_params_to_slot_request_maps_every_field():
    p = SamplingParams(temperature=0.7, top_p=0.9, top_k=-1, min_p=0.05, repetition_penalty=1.2,
                       frequency_penalty=0.3, presence_penalty=-0.4, seed=11, max_tokens=32, min_tokens=4,
                       stop_token_ids=[9], bad_words_token_ids=[5, 6])
    r = p.to_slot_request("req-1", [1, 2, 3], block_ids=[4])
    assert (r.req_id, r.prompt_token_ids, r.block_ids) == ("req-1", (1, 2, 3), (4,))
    assert (r.max_tokens, r.min_tokens, r.temperature, r.top_p, r.top_k, r.min_p) == (32, 4, 0.7, 0.9, 0, 0.05)
    assert (r.repetition_penalty, r.frequency_penalty, r.presence_penalty, r.seed) == (1.2, 0.3, -0.4, 11)
    assert r.bad_words_token_ids == (5, 6)
    assert SamplingParams(top_k=40).to_slot_request("b", [1]).top_k == 40
    # ignore_eos masks eos for the whole request: min_dec_len = max_tokens
    assert SamplingParams(max_tokens=7, min_tokens=2, ignore_eos=True).to_slot_request("d", [1]).min_tokens == 7
    assert SamplingParams(top_k=0).to_slot_request("c", [1]).top_k == 0
