"""SlotRequest: the checks that need no config (InputBatch.insert checks the rest)."""

from __future__ import annotations

import numpy as np
import pytest

from specworker.slot_request import SlotRequest

BAD = {
    "empty_req_id": (dict(req_id=""), ValueError, "SlotRequest.req_id = ''; allowed: a non-empty str"),
    "max_tokens_0": (dict(max_tokens=0), ValueError, "SlotRequest.max_tokens = 0; allowed: an int >= 1"),
    "max_tokens_float": (dict(max_tokens=2.0), TypeError, "SlotRequest.max_tokens = 2.0 is a float"),
    "min_above_max": (dict(min_tokens=5), ValueError, "SlotRequest.min_tokens = 5; allowed: 0..max_tokens = 4"),
    "negative_temperature": (dict(temperature=-0.1), ValueError, "SlotRequest.temperature = -0.1; allowed: >= 0"),
    "nan_temperature": (dict(temperature=float("nan")), ValueError, "SlotRequest.temperature = nan"),
    "top_p_0": (dict(top_p=0.0), ValueError, "SlotRequest.top_p = 0.0; allowed: 0 < top_p <= 1"),
    "top_p_above_1": (dict(top_p=1.5), ValueError, "SlotRequest.top_p = 1.5"),
    "negative_top_k": (dict(top_k=-1), ValueError, "SlotRequest.top_k = -1; allowed: an int >= 0"),
    "penalty_0": (dict(repetition_penalty=0.0), ValueError, "SlotRequest.repetition_penalty = 0.0; allowed: > 0"),
    "inf_frequency": (dict(frequency_penalty=float("inf")), ValueError, "SlotRequest.frequency_penalty = inf"),
    "bool_presence": (dict(presence_penalty=True), ValueError, "SlotRequest.presence_penalty = True"),
    "seed_too_big": (dict(seed=2**32), ValueError,
                     "SlotRequest.seed = 4294967296; allowed: None or an int in 0..4294967295"),
    "negative_seed": (dict(seed=-1), ValueError, "SlotRequest.seed = -1"),
    "float_token": (dict(prompt_token_ids=[1, 2.0]), TypeError, "SlotRequest.prompt_token_ids\\[1\\] = 2.0 is a float"),
    "bool_block_id": (dict(block_ids=[True]), TypeError, "SlotRequest.block_ids\\[0\\] = True is a bool"),
    "thinking_not_bool": (dict(enable_thinking=1), ValueError, "SlotRequest.enable_thinking = 1; allowed: a bool"),
}


def _request(**overrides):
    return SlotRequest(**{**dict(req_id="a", prompt_token_ids=[1, 2, 3], max_tokens=4), **overrides})


@pytest.mark.parametrize("case", BAD)
def test_slot_request_rejects_bad_field(case):
    overrides, error, message = BAD[case]
    with pytest.raises(error, match=message):
        _request(**overrides)


def test_slot_request_normalizes_sequences_to_tuples():
    req = _request(prompt_token_ids=np.array([4, 5], dtype=np.int64), bad_words_token_ids=[7], block_ids=range(2))
    assert (req.prompt_token_ids, req.bad_words_token_ids, req.block_ids) == ((4, 5), (7,), (0, 1))
    assert all(type(t) is int for t in req.prompt_token_ids)
