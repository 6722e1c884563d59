import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import draft_model_postprocess
from reference.cases import draft_state as dc
from tests.draft_postprocess_case_tests import (  # noqa: F401  written once, also run on the CUDA kernel
    LITERAL, LITERAL_EXPECTED, PAUSED, PAUSED_EXPECTED, make_state, test_draft_model_postprocess_full_row_and_width_one,
    test_draft_model_postprocess_literal, test_draft_model_postprocess_matches_reference,
    test_draft_model_postprocess_paused_slots_get_no_tokens,
)
from reference.draft_model_postprocess import ref_draft_model_postprocess


def run_op(state, column=False):
    """Calls the op on a numpy state dict; returns the new base_model_seq_lens_this_time [bsz]."""
    def per_slot(a):
        a = np.asarray(a)
        return paddle.to_tensor(a.reshape(-1, 1) if column else a)

    lens = per_slot(state["base_model_seq_lens_this_time"])
    paused = state.get("base_model_is_block_step")
    draft_model_postprocess(paddle.to_tensor(np.asarray(state["base_model_draft_tokens"])), lens,
                            per_slot(state["base_model_seq_lens_encoder"]), per_slot(state["base_model_stop_flags"]),
                            None if paused is None else per_slot(paused))
    return lens.numpy().reshape(-1)


@pytest.fixture
def run():
    """The backend of the shared tests (tests/draft_postprocess_case_tests.py): the Paddle op."""
    return run_op


@pytest.fixture(params=dc.postprocess_grid(), ids=lambda p: "-".join(map(str, p)))
def reference_grid(request):
    """(bsz, kind, seed): every batch size x kind."""
    return request.param


def test_draft_model_postprocess_accepts_fastdeploy_column_shapes():
    np.testing.assert_array_equal(run_op(LITERAL, column=True), LITERAL_EXPECTED)
    np.testing.assert_array_equal(run_op(PAUSED, column=True), PAUSED_EXPECTED)


@pytest.mark.parametrize(
    "row, match",
    [
        ([7, -1, 8, -1], r"slot 1 has a gap in base_model_draft_tokens: column 1 is -1 but column 2 holds draft 8"),
        ([7, 8, -1, 9], r"slot 1 has a gap in base_model_draft_tokens: column 2 is -1 but column 3 holds draft 9"),
        ([-1, 8, 9, -1], r"decode slot 1 is running but base_model_draft_tokens\[1, 0\] = -1"),
    ],
    ids=["gap_after_column_0", "gap_after_column_1", "no_last_accepted_token"],
)
def test_draft_model_postprocess_gap_raises_and_writes_nothing(row, match):
    """[ours] FastDeploy counted every entry != -1, so a gap made the target feed the -1 as a token."""
    state = make_state([[1, 2, -1, -1], row, [3, -1, -1, -1]], [0, 0, 0], [0, 0, 0], [False] * 3)
    lens = paddle.to_tensor(state["base_model_seq_lens_this_time"])
    with pytest.raises(ValueError, match=match):
        draft_model_postprocess(paddle.to_tensor(state["base_model_draft_tokens"]), lens,
                                paddle.to_tensor(state["base_model_seq_lens_encoder"]),
                                paddle.to_tensor(state["base_model_stop_flags"]))
    np.testing.assert_array_equal(lens.numpy(), [0, 0, 0])
    with pytest.raises(ValueError):
        ref_draft_model_postprocess(state)


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("base_model_draft_tokens", np.array([7, 8, 9], np.int64), r"base_model_draft_tokens has shape \[3\], expected a 2-D"),
        ("base_model_draft_tokens", np.zeros((4, 0), np.int64), r"expected \[N, D\] with 1 <= D"),
        ("base_model_draft_tokens", np.zeros((3, 4), np.int32), "base_model_draft_tokens has dtype int32, expected int64"),
        ("base_model_seq_lens_this_time", np.zeros(4, np.int64), "base_model_seq_lens_this_time has dtype int64"),
        ("base_model_seq_lens_encoder", np.zeros(3, np.int32), r"base_model_seq_lens_encoder has 3 slots .*expected bsz = 4"),
        ("base_model_stop_flags", np.zeros(4, np.int32), "base_model_stop_flags has dtype int32, expected bool"),
        ("base_model_is_block_step", np.zeros(4, np.int32), "base_model_is_block_step has dtype int32, expected bool"),
        ("base_model_is_block_step", np.zeros(5, bool), r"base_model_is_block_step has 5 slots .*expected bsz = 4"),
    ],
    ids=["drafts_rank", "drafts_width_zero", "drafts_dtype", "lens_dtype", "encoder_slots", "stop_flags_dtype",
         "block_step_dtype", "block_step_slots"],
)
def test_draft_model_postprocess_rejects_bad_input(field, value, match):
    state = dict(LITERAL, **{field: value})
    with pytest.raises(ValueError, match=match):
        run_op(state)
