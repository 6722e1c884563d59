import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import speculate_update
from reference.speculate_update import ref_speculate_update
from tests.speculate_update_case_tests import (  # noqa: F401  written once, also run on the CUDA kernel
    assert_state_equal, test_speculate_update_literal, test_speculate_update_matches_reference,
    test_speculate_update_not_need_stop_boundary, test_speculate_update_without_mask_rollback,
)
from reference.cases.post_verify_state import all_cases, make_post_verify_state
from tests.update_literals import UPDATE_CASES

ARGS = ("seq_lens_encoder", "seq_lens_decoder", "not_need_stop", "draft_tokens", "actual_draft_token_nums",
        "accept_tokens", "accept_num", "stop_flags", "seq_lens_this_time", "is_block_step", "stop_nums",
        "mask_rollback")
WRITES = ("seq_lens_encoder", "seq_lens_decoder", "not_need_stop", "draft_tokens", "actual_draft_token_nums",
          "mask_rollback")


def run_op(state: dict) -> dict:
    """Runs the op on a numpy state (mask_rollback optional); returns the new state."""
    t = {k: None if state.get(k) is None else paddle.to_tensor(state[k]) for k in ARGS}
    assert speculate_update(*(t[k] for k in ARGS)) is None
    out = dict(state)
    for k in WRITES:
        if t[k] is not None:
            out[k] = t[k].numpy()
    return out


@pytest.fixture
def run():
    """The backend of the shared tests (tests/speculate_update_case_tests.py): the Paddle op."""
    return run_op


@pytest.fixture(params=[(bsz, kind, seed, seed % 3, 3, column) for bsz, kind, seed in all_cases()
                        for column in (False, True)], ids=lambda p: f"{p[0]}-{p[1]}-{p[2]}-{'column' if p[5] else '1d'}")
def reference_grid(request):
    """(bsz, kind, seed, extra_rows, num_draft, column): every batch size x kind, 1-D and FastDeploy's column."""
    return request.param


def test_speculate_update_updates_tensors_in_place():
    _, state, expected = UPDATE_CASES[0]
    t = {k: paddle.to_tensor(state[k]) for k in ARGS}
    ptrs = {k: t[k].data_ptr() for k in ARGS}
    speculate_update(*(t[k] for k in ARGS))
    for k in ARGS:
        assert t[k].data_ptr() == ptrs[k], f"{k} was replaced, not updated in place"
    np.testing.assert_array_equal(t["seq_lens_decoder"].numpy(), expected["seq_lens_decoder"])
    np.testing.assert_array_equal(t["not_need_stop"].numpy(), expected["not_need_stop"])


def test_speculate_update_padding_slots_count_as_stopped():
    """The same 3 live slots with 0 or 2 padding rows: only the count changes."""
    _, state, _ = UPDATE_CASES[0]  # 1 stopped of 3
    state = {**state, "stop_nums": np.array([3], np.int64)}
    assert run_op(state)["not_need_stop"][0]
    padded = {k: v for k, v in state.items()}
    padded["stop_flags"] = np.concatenate([state["stop_flags"], [False, False]])  # flags of padding are ignored
    assert not run_op(padded)["not_need_stop"][0]  # 1 + 2 padding = 3, not < 3


def test_speculate_update_reads_accept_num_of_live_slots_only():
    """FastDeploy read accept_num for all 512 threads before the bsz check. Ours accepts per-slot
    buffers that cover only the bsz live slots while stop_flags has N rows."""
    _, state, expected = UPDATE_CASES[0]
    small = {**state, "stop_flags": np.concatenate([state["stop_flags"], [True] * 4]),
             "stop_nums": np.array([8], np.int64)}
    got = run_op(small)
    np.testing.assert_array_equal(got["seq_lens_decoder"], expected["seq_lens_decoder"])
    assert got["not_need_stop"][0]  # 1 + 4 padding = 5 < 8


@pytest.mark.parametrize("num_draft", [0, 1, 5])
def test_speculate_update_matches_reference_other_draft_widths(num_draft):
    for seed, kind in enumerate(("mixed", "all_decode", "stopped")):
        state = make_post_verify_state(np.random.default_rng(seed), 17, kind, num_draft=num_draft, extra_rows=2)
        assert_state_equal(run_op(state), ref_speculate_update(state))


def test_speculate_update_zero_live_slots():
    """bsz = 0 with 3 buffer rows: every row is padding, nothing is written."""
    state = make_post_verify_state(np.random.default_rng(5), 0, "mixed", extra_rows=3)
    state["stop_nums"][0] = 3
    state["not_need_stop"][0] = True
    got = run_op(state)
    assert not got["not_need_stop"][0]
    for k in WRITES[:2] + WRITES[3:]:
        np.testing.assert_array_equal(got[k], state[k], err_msg=k)


def _bad_state():
    _, state, _ = UPDATE_CASES[0]
    return {k: np.copy(v) for k, v in state.items()}


def _with(**changes):
    state = _bad_state()
    state.update(changes)
    return state


BAD = [
    ("enc_int64", _with(seq_lens_encoder=np.zeros(3, np.int64)), r"seq_lens_encoder has dtype int64, expected int32"),
    ("dec_float", _with(seq_lens_decoder=np.zeros(3, np.float32)),
     r"seq_lens_decoder has dtype float32, expected int32"),
    ("not_need_stop_int", _with(not_need_stop=np.zeros(1, np.int32)), r"not_need_stop has dtype int32, expected bool"),
    ("not_need_stop_shape", _with(not_need_stop=np.zeros(2, bool)), r"not_need_stop has shape \[2\], expected \[1\]"),
    ("drafts_int32", _with(draft_tokens=np.zeros((3, 3), np.int32)), r"draft_tokens has dtype int32, expected int64"),
    ("drafts_1d", _with(draft_tokens=np.zeros(3, np.int64)), r"draft_tokens has shape \[3\], expected a 2-D tensor"),
    ("drafts_too_few_rows", _with(draft_tokens=np.zeros((2, 3), np.int64)),
     r"draft_tokens has shape \[2, 3\], expected at least bsz = 3 rows"),
    ("actual_int64", _with(actual_draft_token_nums=np.ones(3, np.int64)),
     r"actual_draft_token_nums has dtype int64, expected int32"),
    ("accept_tokens_width", _with(accept_tokens=np.zeros((3, 4), np.int64)),
     r"accept_tokens has width 4 but draft_tokens has width D = 3"),
    ("accept_num_int64", _with(accept_num=np.zeros(3, np.int64)), r"accept_num has dtype int64, expected int32"),
    ("accept_num_too_few", _with(accept_num=np.zeros(2, np.int32)),
     r"accept_num has 2 slots \(shape \[2\]\), expected at least bsz = 3"),
    ("stop_flags_int", _with(stop_flags=np.zeros(3, np.int32)), r"stop_flags has dtype int32, expected bool"),
    ("lens_2d", _with(seq_lens_this_time=np.zeros((1, 3), np.int32)),
     r"seq_lens_this_time has shape \[1, 3\], expected a per-slot tensor"),
    ("block_step_int", _with(is_block_step=np.zeros(3, np.int32)), r"is_block_step has dtype int32, expected bool"),
    ("stop_nums_int32", _with(stop_nums=np.array([3], np.int32)), r"stop_nums has dtype int32, expected int64"),
    ("stop_nums_shape", _with(stop_nums=np.array([[3]], np.int64)), r"stop_nums has shape \[1, 1\], expected \[1\]"),
    ("mask_rollback_int64", _with(mask_rollback=np.zeros(3, np.int64)),
     r"mask_rollback has dtype int64, expected int32"),
    ("accept_num_above_d", _with(accept_num=np.array([1, 4, 0], np.int32)),
     r"accept_num\[1\] = 4, expected 0 <= accept_num <= D = 3"),
    ("accept_num_negative", _with(accept_num=np.array([1, 2, -1], np.int32)),
     r"accept_num\[2\] = -1, expected 0 <= accept_num <= D = 3"),
]


@pytest.mark.parametrize("state, match", [pytest.param(s, m, id=i) for i, s, m in BAD])
def test_speculate_update_rejects_bad_input(state, match):
    before = {k: np.copy(v) for k, v in state.items()}
    t = {k: None if state.get(k) is None else paddle.to_tensor(state[k]) for k in ARGS}
    with pytest.raises(ValueError, match=match):
        speculate_update(*(t[k] for k in ARGS))
    for k in WRITES:  # a rejected call writes nothing
        np.testing.assert_array_equal(t[k].numpy(), before[k], err_msg=k)


def test_speculate_update_ignores_accept_num_of_paused_slot():
    """A paused slot's accept_num is never read, so a stale out-of-range value is no error."""
    state = _with(accept_num=np.array([1, 2, 99], np.int32), is_block_step=np.array([False, False, True]))
    got = run_op(state)
    np.testing.assert_array_equal(got["seq_lens_decoder"], [4, 12, 0])
