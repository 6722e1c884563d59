import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import speculate_set_value_by_flags_and_idx
from reference.speculate_set_value_by_flags_and_idx import ref_speculate_set_value_by_flags_and_idx
from reference.speculate_update import ref_speculate_update
from tests.set_value_case_tests import (  # noqa: F401  written once, also run on the CUDA kernel
    WRITES, assert_state_equal, test_speculate_set_value_by_flags_and_idx_literal,
    test_speculate_set_value_by_flags_and_idx_matches_reference,
)
from reference.cases.post_verify_state import all_cases, make_post_verify_state
from tests.update_literals import SET_VALUE_CASES

# State keys in the op's argument order ("pre_ids" is the op's pre_ids_all).
ARGS = ("pre_ids", "accept_tokens", "accept_num", "stop_flags", "seq_lens_this_time", "seq_lens_encoder",
        "seq_lens_decoder", "step_idx")


def run_op(state: dict) -> dict:
    """Runs the op on a numpy state; returns the new state."""
    t = {k: paddle.to_tensor(state[k]) for k in ARGS}
    assert speculate_set_value_by_flags_and_idx(*(t[k] for k in ARGS)) is None
    return {**state, **{k: t[k].numpy() for k in WRITES}}


@pytest.fixture
def run():
    """The backend of the shared tests (tests/set_value_case_tests.py): the Paddle op."""
    return run_op


@pytest.fixture(params=[(bsz, kind, seed, seed % 3, 3, False, column) for bsz, kind, seed in all_cases()
                        for column in (False, True)], ids=lambda p: f"{p[0]}-{p[1]}-{p[2]}-{'column' if p[6] else '1d'}")
def reference_grid(request):
    """(bsz, kind, seed, extra_rows, num_draft, after_update, column): every batch size x kind, 1-D and
    FastDeploy's column (after the update: test_speculate_set_value_by_flags_and_idx_matches_reference_after_update)."""
    return request.param


def test_speculate_set_value_by_flags_and_idx_updates_tensors_in_place():
    _, state, expected = SET_VALUE_CASES[1]
    t = {k: paddle.to_tensor(state[k]) for k in ARGS}
    ptrs = {k: t[k].data_ptr() for k in ARGS}
    speculate_set_value_by_flags_and_idx(*(t[k] for k in ARGS))
    for k in ARGS:
        assert t[k].data_ptr() == ptrs[k], f"{k} was replaced, not updated in place"
    np.testing.assert_array_equal(t["pre_ids"].numpy(), expected["pre_ids"])
    np.testing.assert_array_equal(t["accept_num"].numpy(), expected["accept_num"])


def test_speculate_set_value_by_flags_and_idx_leaves_rows_past_bsz():
    """FastDeploy passes [max_num_seqs, *] buffers; only the first bsz = len(seq_lens_this_time)
    rows are live (row 2 here would otherwise be written and cleared)."""
    _, state, expected = SET_VALUE_CASES[1]
    got = run_op({**state, "seq_lens_this_time": np.array([1, 1], np.int32)})
    np.testing.assert_array_equal(got["pre_ids"][:2], np.asarray(expected["pre_ids"])[:2])
    np.testing.assert_array_equal(got["pre_ids"][2], state["pre_ids"][2])
    np.testing.assert_array_equal(got["accept_num"], [0, 0, 1])
    np.testing.assert_array_equal(got["seq_lens_decoder"], [0, 0, 3])


@pytest.mark.parametrize("bsz, kind, seed", all_cases())
def test_speculate_set_value_by_flags_and_idx_matches_reference_after_update(bsz, kind, seed):
    """The state it sees in a step: speculate_update has run (prefill E moved into Dec)."""
    state = ref_speculate_update(make_post_verify_state(np.random.default_rng(seed + 7), bsz, kind))
    assert_state_equal(run_op(state), ref_speculate_set_value_by_flags_and_idx(state))


def test_speculate_set_value_by_flags_and_idx_zero_live_slots():
    """bsz = 0 with 3 buffer rows: nothing is written (stopped rows would otherwise be cleared)."""
    state = make_post_verify_state(np.random.default_rng(3), 0, "mixed", extra_rows=3)
    state["stop_flags"][:] = True
    state["accept_num"][:] = 1
    got = run_op(state)
    for k in WRITES:
        np.testing.assert_array_equal(got[k], state[k], err_msg=k)


def _with(**changes):
    _, state, _ = SET_VALUE_CASES[0]
    return {**{k: np.copy(v) for k, v in state.items()}, **changes}


BAD = [
    ("pre_ids_int32", _with(pre_ids=np.zeros((3, 8), np.int32)), r"pre_ids_all has dtype int32, expected int64"),
    ("pre_ids_1d", _with(pre_ids=np.zeros(8, np.int64)), r"pre_ids_all has shape \[8\], expected a 2-D tensor"),
    ("pre_ids_too_few_rows", _with(pre_ids=np.zeros((2, 8), np.int64)),
     r"pre_ids_all has shape \[2, 8\], expected at least bsz = 3 rows"),
    ("accept_tokens_int32", _with(accept_tokens=np.zeros((3, 3), np.int32)),
     r"accept_tokens has dtype int32, expected int64"),
    ("accept_num_int64", _with(accept_num=np.zeros(3, np.int64)), r"accept_num has dtype int64, expected int32"),
    ("stop_flags_int", _with(stop_flags=np.zeros(3, np.int32)), r"stop_flags has dtype int32, expected bool"),
    ("lens_int64", _with(seq_lens_this_time=np.zeros(3, np.int64)),
     r"seq_lens_this_time has dtype int64, expected int32"),
    ("enc_too_few", _with(seq_lens_encoder=np.zeros(2, np.int32)),
     r"seq_lens_encoder has 2 slots \(shape \[2\]\), expected at least bsz = 3"),
    ("dec_2d", _with(seq_lens_decoder=np.zeros((3, 2), np.int32)),
     r"seq_lens_decoder has shape \[3, 2\], expected a per-slot tensor"),
    ("step_idx_int32", _with(step_idx=np.zeros(3, np.int32)), r"step_idx has dtype int32, expected int64"),
    ("accept_num_above_d", _with(accept_num=np.array([2, 4, 0], np.int32)),
     r"accept_num\[1\] = 4, expected 0 <= accept_num <= D = 3"),
    ("accept_num_negative", _with(accept_num=np.array([2, 1, -2], np.int32)),
     r"accept_num\[2\] = -2, expected 0 <= accept_num <= D = 3"),
]


@pytest.mark.parametrize("state, match", [pytest.param(s, m, id=i) for i, s, m in BAD])
def test_speculate_set_value_by_flags_and_idx_rejects_bad_input(state, match):
    t = {k: paddle.to_tensor(state[k]) for k in ARGS}
    with pytest.raises(ValueError, match=match):
        speculate_set_value_by_flags_and_idx(*(t[k] for k in ARGS))
    for k in WRITES:  # a rejected call writes nothing
        np.testing.assert_array_equal(t[k].numpy(), state[k], err_msg=k)
