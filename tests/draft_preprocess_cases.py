"""draft_model_preprocess tests written once for both backends: tests/ops (the Paddle op) and tests/gpu
(the CUDA kernel) import the test_* functions below and define the `run` fixture they take,
run(state, num_model_steps=1, is_splitwise_prefill=False, truncate_first_token=True) -> the new state
(numpy), on a numpy state dict keyed by INPUT_KEYS (target_model_is_block_step may be absent or None)."""

from __future__ import annotations

import numpy as np
import pytest

from reference.cases.mtp_round_state import all_round_cases, make_round_state
from reference.draft_model_preprocess import UPDATED_KEYS, ref_draft_model_preprocess


def assert_states_equal(got, want, keys=UPDATED_KEYS):
    for k in keys:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def literal_state():
    """Slot 0: the target just finished a 4-token prefill (prompt 10 11 12 13) and emitted 21.
    Slot 1: decode; the target verified [30, d1, d2] and emitted 2 tokens (31, 32).
    Slot 2: the target slot is stopped."""
    return {
        "draft_tokens": np.array([[-1, -1, -1], [30, 7, 8], [9, 9, 9]], np.int64),
        "input_ids": np.array([[11, 12, 13, -1, -1], [0] * 5, [0] * 5], np.int64),
        "stop_flags": np.array([False, True, False]),
        "seq_lens_this_time": np.array([4, 3, 1], np.int32),
        "seq_lens_encoder": np.array([4, 0, 0], np.int32),
        "seq_lens_decoder": np.array([2, 40, 6], np.int32),
        "step_idx": np.array([0, 9, 4], np.int64),
        "not_need_stop": np.array([False]),
        "pre_ids": np.full((3, 8), -1, np.int64),
        "accept_tokens": np.array([[21, -1, -1], [31, 32, -1], [41, 42, -1]], np.int64),
        "accept_num": np.array([1, 2, 2], np.int32),
        "target_model_seq_lens_encoder": np.array([0, 0, 0], np.int32),
        "target_model_seq_lens_decoder": np.array([6, 10, 7], np.int32),
        "target_model_step_idx": np.array([1, 5, 3], np.int64),
        "target_model_stop_flags": np.array([False, False, True]),
        "max_dec_len": np.array([100, 100, 100], np.int64),
        "target_model_draft_tokens": np.array([[21, 5, 6], [32, 7, 8], [42, 9, 9]], np.int64),
    }


def one_slot_decode(**target):
    """One running decode slot (the target emitted 31, 32 at step_idx_t 6); keyword arguments replace
    entries, keeping each one's dtype."""
    st = {
        "draft_tokens": np.array([[6, 7]], np.int64),
        "input_ids": np.array([[1, 2, 3]], np.int64),
        "stop_flags": np.array([False]),
        "seq_lens_this_time": np.array([2], np.int32),
        "seq_lens_encoder": np.array([0], np.int32),
        "seq_lens_decoder": np.array([12], np.int32),
        "step_idx": np.array([4], np.int64),
        "not_need_stop": np.array([True]),
        "pre_ids": np.full((1, 8), -1, np.int64),
        "accept_tokens": np.array([[31, 32]], np.int64),
        "accept_num": np.array([2], np.int32),
        "target_model_seq_lens_encoder": np.array([0], np.int32),
        "target_model_seq_lens_decoder": np.array([14], np.int32),
        "target_model_step_idx": np.array([6], np.int64),
        "target_model_stop_flags": np.array([False]),
        "max_dec_len": np.array([100], np.int64),
        "target_model_draft_tokens": np.array([[32, 5]], np.int64),
    }
    st.update({k: np.asarray(v, dtype=st.get(k, np.asarray(v)).dtype) for k, v in target.items()})
    return st


def test_draft_model_preprocess_three_slots_literal(run):
    got = run(literal_state())
    pre_ids = np.full((3, 8), -1, np.int64)
    pre_ids[0, 0] = 21  # the draft history is 0-based: position j holds generated token j + 1
    pre_ids[1, 3:5] = [31, 32]  # step_idx_t - n + i = 5 - 2 + i
    want = {
        "draft_tokens": [[-1, -1, -1], [31, 32, 8], [9, 9, 9]],
        "input_ids": [[11, 12, 13, 21, -1], [0] * 5, [0] * 5],
        "stop_flags": [False, False, True],
        "seq_lens_this_time": [4, 2, 0],
        "seq_lens_encoder": [4, 0, 0],  # draft_model_update clears E after the draft's prefill
        "seq_lens_decoder": [2, 8, 0],  # prefill keeps its prefix start; decode: Dec_t - n
        "step_idx": [0, 3, 0],  # prefill: step_idx_t - 1; decode: step_idx_t - n
        "not_need_stop": [True],
        "pre_ids": pre_ids,
        "target_model_draft_tokens": [[21, -1, -1], [32, -1, -1], [42, -1, -1]],
    }
    assert_states_equal(got, want)


# One decode slot: slot 1 of literal_state (draft width 3) and one_slot_decode (width 2).
BSZ_ONE_DECODE = {
    "literal_slot_1": (
        lambda: {k: (v if k == "not_need_stop" else v[1:2]) for k, v in literal_state().items()},
        {"draft_tokens": [[31, 32, 8]], "pre_ids": [[-1, -1, -1, 31, 32, -1, -1, -1]], "seq_lens_decoder": [8],
         "step_idx": [3], "target_model_draft_tokens": [[32, -1, -1]]}),
    "one_slot_decode": (
        one_slot_decode,
        {"draft_tokens": [[31, 32]], "pre_ids": [[-1, -1, -1, -1, 31, 32, -1, -1]], "seq_lens_decoder": [12],
         "step_idx": [4], "target_model_draft_tokens": [[32, -1]]}),
}


@pytest.mark.parametrize("case", list(BSZ_ONE_DECODE))
def test_draft_model_preprocess_bsz_one_decode_literal(run, case):
    make, want = BSZ_ONE_DECODE[case]
    got = run(make())
    for k, v in want.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
    np.testing.assert_array_equal(got["seq_lens_this_time"], [2])
    np.testing.assert_array_equal(got["stop_flags"], [False])
    np.testing.assert_array_equal(got["not_need_stop"], [True])


def test_draft_model_preprocess_bsz_256_structured(run):
    """256 decode slots with n = 1 + b % 4, step_idx_t = 10 + b, Dec_t = 100 + b; every 5th target
    slot stopped; slot b's tokens are 1000 b + i. Expected values are the spec's formulas."""
    bsz, D, Sp = 256, 4, 300
    b = np.arange(bsz)
    n = (1 + b % 4).astype(np.int32)
    stopped = b % 5 == 0
    st = {
        "draft_tokens": np.full((bsz, D), -1, np.int64),
        "input_ids": np.zeros((bsz, 8), np.int64),
        "stop_flags": np.zeros(bsz, bool),
        "seq_lens_this_time": np.ones(bsz, np.int32),
        "seq_lens_encoder": np.zeros(bsz, np.int32),
        "seq_lens_decoder": np.zeros(bsz, np.int32),
        "step_idx": np.zeros(bsz, np.int64),
        "not_need_stop": np.array([False]),
        "pre_ids": np.full((bsz, Sp), -1, np.int64),
        "accept_tokens": (1000 * b[:, None] + np.arange(D)[None, :]).astype(np.int64),
        "accept_num": n,
        "target_model_seq_lens_encoder": np.zeros(bsz, np.int32),
        "target_model_seq_lens_decoder": (100 + b).astype(np.int32),
        "target_model_step_idx": (10 + b).astype(np.int64),
        "target_model_stop_flags": stopped,
        "max_dec_len": np.full(bsz, 1000, np.int64),
        "target_model_draft_tokens": np.full((bsz, D), 5, np.int64),
    }
    got = run(st)
    np.testing.assert_array_equal(got["seq_lens_this_time"], np.where(stopped, 0, n))
    np.testing.assert_array_equal(got["seq_lens_decoder"], np.where(stopped, 0, 100 + b - n))
    np.testing.assert_array_equal(got["step_idx"], np.where(stopped, 0, 10 + b - n))
    np.testing.assert_array_equal(got["stop_flags"], stopped)
    for s in range(bsz):
        k = 0 if stopped[s] else n[s]
        np.testing.assert_array_equal(got["draft_tokens"][s, :k], 1000 * s + np.arange(k))
        np.testing.assert_array_equal(got["draft_tokens"][s, k:], -1)
        start = 10 + s - k
        np.testing.assert_array_equal(got["pre_ids"][s, start:start + k], 1000 * s + np.arange(k))
        assert (np.delete(got["pre_ids"][s], np.arange(start, start + k)) == -1).all()
    np.testing.assert_array_equal(got["target_model_draft_tokens"][:, 0], 5)
    np.testing.assert_array_equal(got["target_model_draft_tokens"][:, 1:], -1)
    np.testing.assert_array_equal(got["not_need_stop"], [True])


@pytest.mark.parametrize("num_model_steps", [1, 2])
@pytest.mark.parametrize("bsz, kind, seed", all_round_cases())
def test_draft_model_preprocess_matches_reference(run, bsz, kind, seed, num_model_steps):
    st = make_round_state(np.random.default_rng(seed), bsz, kind, num_model_steps=num_model_steps, extra_rows=2)
    assert_states_equal(run(st, num_model_steps), ref_draft_model_preprocess(st, num_model_steps))
    # Appending the first token needs one more input_ids column than the longest prompt.
    st["input_ids"] = np.pad(st["input_ids"], ((0, 0), (0, 1)), constant_values=-1)
    assert_states_equal(run(st, num_model_steps, truncate_first_token=False),
                        ref_draft_model_preprocess(st, num_model_steps, truncate_first_token=False))
