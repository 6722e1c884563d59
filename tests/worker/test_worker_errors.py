"""Bad input to the engine API: each call raises a clear error naming what is wrong, changes nothing, and
the worker then still generates exactly what it would have."""

import pytest

from specworker.sampling_params import SamplingParams
from specworker.worker.worker import Worker
from tests.worker.worker_harness import drive, make_config, random_requests

GOOD = SamplingParams(max_tokens=4, temperature=0.0)

# name -> (call(worker), exception type, message pattern)
BAD_CALLS = {
    "empty_prompt": (lambda w: w.add_request("x", [], GOOD), ValueError, "prompt_token_ids is empty"),
    "prompt_too_long": (lambda w: w.add_request("x", [1] * 96, GOOD), ValueError, "max_model_len = 96"),
    "prompt_plus_max_tokens_too_long": (lambda w: w.add_request("x", [1] * 90, SamplingParams(max_tokens=7)),
                                        ValueError, r"prompt \(90 tokens\) \+ max_tokens \(7\)"),
    "token_id_past_vocab": (lambda w: w.add_request("x", [1, 259], GOOD), ValueError,
                            r"prompt_token_ids\[1\] = 259; allowed: 0..vocab_size - 1 = 258"),
    "negative_token_id": (lambda w: w.add_request("x", [-1], GOOD), ValueError, r"prompt_token_ids\[0\] = -1"),
    "float_token_id": (lambda w: w.add_request("x", [1.5], GOOD), TypeError, r"prompt_token_ids\[0\] = 1.5"),
    "str_prompt": (lambda w: w.add_request("x", "hello", GOOD), TypeError, "prompt_token_ids is a str"),
    "duplicate_id": (lambda w: w.add_request("busy", [1], GOOD), ValueError, "'busy' is already in the worker"),
    "empty_id": (lambda w: w.add_request("", [1], GOOD), ValueError, "request_id = ''"),
    "int_id": (lambda w: w.add_request(7, [1], GOOD), ValueError, "request_id = 7"),
    "params_not_sampling_params": (lambda w: w.add_request("x", [1], {"max_tokens": 3}), TypeError,
                                   "params is a dict"),
    "stop_token_past_vocab": (lambda w: w.add_request("x", [1], SamplingParams(stop_token_ids=[400])),
                              ValueError, "stop_token_ids holds 400"),
    "bad_word_past_vocab": (lambda w: w.add_request("x", [1], SamplingParams(bad_words_token_ids=[300])),
                            ValueError, "bad_words_token_ids holds 300"),
    "abort_unknown": (lambda w: w.abort("nope"), KeyError, "'nope' is not queued or running"),
    "abort_twice": (lambda w: (w.abort("busy"), w.abort("busy")), KeyError, "'busy' is not queued or running"),
}

BAD_PARAMS = {
    "negative_temperature": dict(temperature=-0.1),
    "nan_temperature": dict(temperature=float("nan")),
    "top_p_zero": dict(top_p=0.0),
    "top_p_above_one": dict(top_p=1.5),
    "top_k_below_minus_one": dict(top_k=-2),
    "min_p_above_one": dict(min_p=1.5),
    "max_tokens_zero": dict(max_tokens=0),
    "min_tokens_above_max": dict(max_tokens=3, min_tokens=4),
    "negative_seed": dict(seed=-1),
    "zero_repetition_penalty": dict(repetition_penalty=0.0),
    "bool_max_tokens": dict(max_tokens=True),
}


@pytest.fixture(scope="module")
def reference():
    reqs = random_requests(3, seed=11)
    return reqs, drive(Worker(make_config()), reqs)


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
def test_worker_rejects_bad_call_and_stays_usable(name, reference):
    call, exc, pattern = BAD_CALLS[name]
    w = Worker(make_config())
    w.add_request("busy", [5, 6], SamplingParams(max_tokens=3, temperature=0.0))
    before = (set(w.requests), w.blocks.num_free, len(w.scheduler.waiting))
    with pytest.raises(exc, match=pattern):
        call(w)
    if name != "abort_twice":
        assert (set(w.requests), w.blocks.num_free, len(w.scheduler.waiting)) == before
    reqs, want = reference
    got = drive(w, reqs)
    assert {k: got[k] for k in want} == want


@pytest.mark.parametrize("name", sorted(BAD_PARAMS))
def test_sampling_params_rejects_bad_value(name):
    field = next(iter(BAD_PARAMS[name]))
    with pytest.raises((ValueError, TypeError), match=field):
        SamplingParams(**BAD_PARAMS[name])


def test_worker_rejects_request_needing_more_blocks_than_exist():
    w = Worker(make_config(num_blocks=12, max_model_len=96))  # 12 blocks of 8 = 96 positions, D = 1 more
    with pytest.raises(ValueError, match="need 13 KV blocks; allowed: at most scheduler.num_blocks = 12"):
        w.add_request("x", [1] * 50, SamplingParams(max_tokens=46))
    assert not w.has_unfinished()


def test_worker_rejects_non_config():
    with pytest.raises(TypeError, match="Worker\\(config\\): got a dict"):
        Worker({"model": {}})
