import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import reasoning_phase_token_constraint
from reference.cases.step_batch import all_cases, pack_output_index
from tests.reasoning_cases import (  # noqa: F401  written once, also run on the CUDA kernels
    LF, MASKED, THINK_END, test_reasoning_phase_token_constraint_literal_three_slots,
    test_reasoning_phase_token_constraint_matches_reference, test_reasoning_phase_token_constraint_walk_thinking_to_done,
    walk,
)


def _call(logits, pre_ids, stop_flags, seq_lens_this_time, seq_lens_encoder, step_idx, allowed_tokens,
          reasoning_status, batch_id_per_token_output, cu_seqlens_q_output, enable_thinking, think_end_id=THINK_END,
          line_break_id=LF):
    """Runs the op on CPU tensors built from numpy; returns (logits, reasoning_status) after it."""
    allowed, batch_ids, cu = allowed_tokens, batch_id_per_token_output, cu_seqlens_q_output
    t_logits = paddle.to_tensor(np.asarray(logits, np.float32))
    t_status = paddle.to_tensor(np.asarray(reasoning_status, np.int32))
    ret = reasoning_phase_token_constraint(
        t_logits, paddle.to_tensor(np.asarray(pre_ids, np.int64)), paddle.to_tensor(np.asarray(stop_flags, bool)),
        paddle.to_tensor(np.asarray(seq_lens_this_time, np.int32)),
        paddle.to_tensor(np.asarray(seq_lens_encoder, np.int32)), paddle.to_tensor(np.asarray(step_idx, np.int64)),
        paddle.to_tensor(np.asarray(allowed, np.int64)), t_status, paddle.to_tensor(np.asarray(batch_ids, np.int32)),
        paddle.to_tensor(np.asarray(cu, np.int32)), paddle.to_tensor(np.asarray(enable_thinking, bool)),
        think_end_id, line_break_id)
    assert ret is None
    return t_logits.numpy(), t_status.numpy()


@pytest.fixture
def run():
    """The backend of the shared tests (tests/reasoning_cases.py): the Paddle op."""
    return _call


@pytest.fixture(params=all_cases(), ids=lambda p: "-".join(map(str, p)))
def reference_grid(request):
    """(bsz, kind, seed): every batch size x kind."""
    return request.param


def test_reasoning_phase_token_constraint_walk_non_thinking_request():
    """enable_thinking False: the first token (prefill step, step_idx 0) is constrained at once
    (0 -> 2), the next step releases it (2 -> 3)."""
    pre_ids = np.full((1, 8), -1, np.int64)
    batch_ids, cu = pack_output_index([1], capacity=3)
    logits = np.arange(18, dtype=np.float32).reshape(3, 6)
    got, status = _call(logits, pre_ids, [False], [5], [5], [0], [2], [0], batch_ids, cu, [False])
    np.testing.assert_array_equal(status, [2])
    np.testing.assert_array_equal(got[0], [MASKED, MASKED, 2.0, MASKED, MASKED, MASKED])
    np.testing.assert_array_equal(got[1:], logits[1:])
    pre_ids[0, 1] = 2
    batch_ids, cu = pack_output_index([3])
    got, status = _call(logits, pre_ids, [False], [3], [0], [1], [2], status, batch_ids, cu, [False])
    np.testing.assert_array_equal(status, [3])
    np.testing.assert_array_equal(got, logits)
    # The same prefill step with thinking enabled stays in the thinking phase.
    _, status = _call(logits, pre_ids, [False], [5], [5], [0], [2], [0], *pack_output_index([1], capacity=3), [True])
    np.testing.assert_array_equal(status, [0])


def test_reasoning_phase_token_constraint_walk_abandoned_pattern():
    """A </think> that is not followed by "\\n\\n": 0 -> 1, then 1 -> 3 once </think> has left the
    last four tokens; nothing is ever constrained."""
    statuses, logits = walk(_call, [5, THINK_END, 5, 5, 5, 5, 5])
    assert statuses == [0, 1, 1, 1, 1, 3, 3]
    for got in logits:
        np.testing.assert_array_equal(got, np.arange(24, dtype=np.float32).reshape(3, 8))


def test_reasoning_phase_token_constraint_pattern_completed_within_one_step():
    """Several tokens accepted at once: 0 -> 1 -> 2 in a single call (status 1 set in this call is
    checked against the pattern too)."""
    pre_ids = np.array([[-1, 5, LF, THINK_END, LF, LF, -1, -1]], np.int64)
    batch_ids, cu = pack_output_index([2])
    logits = np.zeros((2, 5), np.float32)
    got, status = _call(logits, pre_ids, [False], [2], [0], [5], [1], [0], batch_ids, cu, [True])
    np.testing.assert_array_equal(status, [2])
    np.testing.assert_array_equal(got, [[MASKED, 0, MASKED, MASKED, MASKED], [0, 0, 0, 0, 0]])


def test_reasoning_phase_token_constraint_stopped_slots_untouched():
    """Stopped slots keep their status even when their history would move it."""
    pre_ids = np.array([[-1, LF, THINK_END, LF, LF]] * 3, np.int64)
    batch_ids, cu = pack_output_index([0, 0, 0], capacity=2)
    logits = np.ones((2, 4), np.float32)
    got, status = _call(logits, pre_ids, [True] * 3, [0] * 3, [0] * 3, [4] * 3, [1], [0, 1, 2], batch_ids, cu,
                        [True] * 3)
    np.testing.assert_array_equal(status, [0, 1, 2])
    np.testing.assert_array_equal(got, logits)


def test_reasoning_phase_token_constraint_empty_allowed_set_masks_nothing():
    pre_ids = np.array([[-1, 5, LF, THINK_END, LF, LF]], np.int64)
    logits = np.arange(10, dtype=np.float32).reshape(2, 5)
    got, status = _call(logits, pre_ids, [False], [2], [0], [5], np.zeros(0, np.int64), [1], *pack_output_index([2]),
                        [True])
    np.testing.assert_array_equal(status, [2])  # the status still advances
    np.testing.assert_array_equal(got, logits)


def test_reasoning_phase_token_constraint_ignores_allowed_ids_outside_vocab():
    logits = np.arange(5, dtype=np.float32).reshape(1, 5)
    got, _ = _call(logits, np.full((1, 4), -1, np.int64), [False], [1], [3], [0], [-1, 2, 5, 2, 99], [0],
                   *pack_output_index([1]), [False])
    np.testing.assert_array_equal(got, [[MASKED, MASKED, 2.0, MASKED, MASKED]])


def test_reasoning_phase_token_constraint_non_thinking_first_token_wins_over_think_end():
    """FastDeploy checks the non-thinking first token before </think>: 0 -> 2, not 0 -> 1."""
    pre_ids = np.array([[THINK_END, -1, -1]], np.int64)
    _, status = _call(np.zeros((1, 3), np.float32), pre_ids, [False], [4], [4], [0], [1], [0],
                      *pack_output_index([1]), [False])
    np.testing.assert_array_equal(status, [2])


def test_reasoning_phase_token_constraint_history_past_the_row_reads_minus_one():
    """[ours] step_idx beyond pre_ids' width reads -1 (FastDeploy reads past the row). S = 4:
    step 5 still sees </think> at position 3 (stays 1); step 7 sees nothing (1 -> 3)."""
    pre_ids = np.array([[-1, -1, LF, THINK_END]] * 2, np.int64)
    _, status = _call(np.zeros((0, 3), np.float32), pre_ids, [False, False], [1, 1], [0, 0], [5, 7], [1], [1, 1],
                      np.zeros(0, np.int32), [0, 0, 0], [True, True])
    np.testing.assert_array_equal(status, [1, 3])


def test_reasoning_phase_token_constraint_slots_past_bsz_untouched():
    """N = 3 per-slot rows, bsz = 1: slots 1 and 2 are not this op's and keep their status."""
    pre_ids = np.array([[-1, 5, LF, THINK_END, LF, LF]] * 3, np.int64)
    _, status = _call(np.zeros((1, 3), np.float32), pre_ids, [False] * 3, [1], [0], [5, 5, 5], [1], [1, 1, 2],
                      *pack_output_index([1]), [True] * 3)
    np.testing.assert_array_equal(status, [2, 1, 2])


def test_reasoning_phase_token_constraint_accepts_fastdeploy_column_shapes():
    pre_ids = np.array([[-1, 5, LF, THINK_END, LF, LF]], np.int64)
    t_status = paddle.to_tensor([[1]], dtype="int32")
    t_logits = paddle.to_tensor(np.zeros((1, 3), np.float32))
    reasoning_phase_token_constraint(
        t_logits, paddle.to_tensor(pre_ids), paddle.to_tensor([[False]]), paddle.to_tensor([[1]], dtype="int32"),
        paddle.to_tensor([[0]], dtype="int32"), paddle.to_tensor([[5]], dtype="int64"),
        paddle.to_tensor([1], dtype="int64"), t_status, paddle.to_tensor([0], dtype="int32"),
        paddle.to_tensor([0, 1], dtype="int32"), paddle.to_tensor([[True]]), THINK_END, LF)
    np.testing.assert_array_equal(t_status.numpy(), [[2]])
    np.testing.assert_array_equal(t_logits.numpy(), [[MASKED, 0, MASKED]])


def _good_inputs():
    batch_ids, cu = pack_output_index([2, 1], capacity=4)
    return dict(logits=paddle.zeros([4, 5], dtype="float32"), pre_ids=paddle.full([2, 6], -1, dtype="int64"),
                stop_flags=paddle.to_tensor([False, False]), seq_lens_this_time=paddle.to_tensor([2, 1], dtype="int32"),
                seq_lens_encoder=paddle.to_tensor([0, 0], dtype="int32"),
                step_idx=paddle.to_tensor([3, 3], dtype="int64"), allowed_tokens=paddle.to_tensor([1], dtype="int64"),
                reasoning_status=paddle.to_tensor([0, 0], dtype="int32"),
                batch_id_per_token_output=paddle.to_tensor(batch_ids), cu_seqlens_q_output=paddle.to_tensor(cu),
                enable_thinking=paddle.to_tensor([True, True]), think_end_id=THINK_END, line_break_id=LF)


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("logits", paddle.zeros([4, 5], dtype="float64"), "logits has dtype float64, expected float32"),
        ("logits", paddle.zeros([20], dtype="float32"), r"logits has shape \[20\], expected a 2-D tensor"),
        ("pre_ids", paddle.full([2, 6], -1, dtype="int32"), "pre_ids has dtype int32, expected int64"),
        ("stop_flags", paddle.to_tensor([0, 0], dtype="int32"), "stop_flags has dtype int32, expected bool"),
        ("stop_flags", paddle.to_tensor([False, False, False]), r"stop_flags has 3 slots .*expected bsz = 2"),
        ("seq_lens_encoder", paddle.to_tensor([0, 0, 0], dtype="int32"), r"seq_lens_encoder has 3 slots"),
        ("step_idx", paddle.to_tensor([3, 3], dtype="int32"), "step_idx has dtype int32, expected int64"),
        ("allowed_tokens", paddle.to_tensor([[1]], dtype="int64"), r"allowed_tokens has shape \[1, 1\], expected a 1-D"),
        ("reasoning_status", paddle.to_tensor([0, 0], dtype="int64"), "reasoning_status has dtype int64, expected int32"),
        ("enable_thinking", paddle.to_tensor([True]), r"enable_thinking has 1 slots .*expected bsz = 2"),
        ("batch_id_per_token_output", paddle.to_tensor([0, 0, 1], dtype="int32"),
         r"batch_id_per_token_output has 3 entries, expected at least one per logits row \(4\)"),
        ("batch_id_per_token_output", paddle.to_tensor([0, 0, 2, -1], dtype="int32"),
         r"batch_id_per_token_output\[2\] = 2, expected -1 \(no slot\) or a slot in \[0, bsz = 2\)"),
        ("cu_seqlens_q_output", paddle.to_tensor([0], dtype="int32"),
         r"cu_seqlens_q_output has shape \[1\], expected \[bsz \+ 1\] = \[3\]"),
        ("cu_seqlens_q_output", paddle.to_tensor([[0], [2], [3]], dtype="int32"),
         r"cu_seqlens_q_output has shape \[3, 1\], expected \[bsz \+ 1\] = \[3\]"),
        ("seq_lens_this_time", paddle.to_tensor([1, 1, 1], dtype="int32"), r"seq_lens_encoder has 2 slots"),
    ],
)
def test_reasoning_phase_token_constraint_rejects_bad_input(field, value, match):
    args = _good_inputs()
    args[field] = value
    with pytest.raises(ValueError, match=match):
        reasoning_phase_token_constraint(**args)


@pytest.mark.parametrize(
    "logits_rows, cu, batch_ids, match",
    [
        # slot 1's first row is row 2, which a 2-row logits tensor does not have
        (2, [0, 2, 3], [0, 0], r"cu_seqlens_q_output\[bsz = 2\] = 3 output rows but logits has 2 rows"),
        (4, [0, 3, 2], [0, 0, 0, -1], r"cu_seqlens_q_output\[2\] = 2 < cu_seqlens_q_output\[1\] = 3"),
        (4, [1, 2, 3], [-1, 0, 1, -1], r"cu_seqlens_q_output\[0\] = 1, expected 0"),
    ],
)
def test_reasoning_phase_token_constraint_rejects_output_index_inconsistent_with_rows(logits_rows, cu, batch_ids,
                                                                                        match):
    """Regression (issue 16): with T_out = cu[bsz] > rows a slot entering status 2 could have its
    first row outside logits and silently stay unconstrained. The CPU op checks the prefix sum
    against the rows before anything (status included) is written."""
    args = _good_inputs()
    args["logits"] = paddle.zeros([logits_rows, 5], dtype="float32")
    args["cu_seqlens_q_output"] = paddle.to_tensor(cu, dtype="int32")
    args["batch_id_per_token_output"] = paddle.to_tensor(batch_ids, dtype="int32")
    args["reasoning_status"] = paddle.to_tensor([2, 2], dtype="int32")  # 2 -> 3 if the op ran
    with pytest.raises(ValueError, match=match):
        reasoning_phase_token_constraint(**args)
    np.testing.assert_array_equal(args["reasoning_status"].numpy(), [2, 2])


def test_reasoning_phase_token_constraint_rejects_bsz_above_n():
    args = _good_inputs()
    for name in ("seq_lens_this_time", "seq_lens_encoder"):
        args[name] = paddle.to_tensor([0, 0, 0], dtype="int32")
    args["cu_seqlens_q_output"] = paddle.to_tensor([0, 2, 3, 3], dtype="int32")
    with pytest.raises(ValueError, match=r"seq_lens_this_time has 3 slots but pre_ids has shape \[2, 6\]"):
        reasoning_phase_token_constraint(**args)


def test_reasoning_phase_token_constraint_rejects_non_int_token_id():
    args = _good_inputs()
    args["think_end_id"] = 9.0
    with pytest.raises(TypeError, match="think_end_id must be a host int, got float"):
        reasoning_phase_token_constraint(**args)
