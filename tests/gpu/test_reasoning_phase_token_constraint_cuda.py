"""CUDA reasoning_phase_token_constraint kernels vs the numpy reference (CuPy + ctypes, no Paddle)."""


import numpy as np
import pytest

from reference.cases.step_batch import all_cases, make_step_batch, pack_output_index
from tests.gpu.harness import launcher, ptr, require_gpu, stream
from tests.reasoning_cases import (  # noqa: F401  written once, also run on the Paddle op
    LF, MASKED, THINK_END, check_against_reference, test_reasoning_phase_token_constraint_literal_three_slots,
    test_reasoning_phase_token_constraint_matches_reference, test_reasoning_phase_token_constraint_walk_thinking_to_done,
    walk,
)
from tests.sampling_fixtures import output_index, random_reasoning_inputs

cp = require_gpu()
launch = launcher("specworker_reasoning_phase_token_constraint_launch")


def run_kernel(logits, pre_ids, stop_flags, seq_lens_this_time, seq_lens_encoder, step_idx, allowed_tokens,
               reasoning_status, batch_id_per_token_output, cu_seqlens_q_output, enable_thinking,
               think_end_id=THINK_END, line_break_id=LF):
    """Launches on device copies; returns (logits, reasoning_status) after the kernels."""
    d_logits = cp.asarray(np.asarray(logits, np.float32))
    d_pre_ids = cp.asarray(np.asarray(pre_ids, np.int64))
    d_stop = cp.asarray(np.asarray(stop_flags, bool).reshape(-1))
    d_encoder = cp.asarray(np.asarray(seq_lens_encoder, np.int32).reshape(-1))
    d_step = cp.asarray(np.asarray(step_idx, np.int64).reshape(-1))
    allowed = np.asarray(allowed_tokens, np.int64).reshape(-1)
    d_allowed = cp.asarray(allowed) if allowed.size else None
    d_status = cp.asarray(np.asarray(reasoning_status, np.int32).reshape(-1))
    d_bid = cp.asarray(np.asarray(batch_id_per_token_output, np.int32))
    d_cu = cp.asarray(np.asarray(cu_seqlens_q_output, np.int32))
    d_thinking = cp.asarray(np.asarray(enable_thinking, bool).reshape(-1))
    bsz = np.asarray(seq_lens_this_time).reshape(-1).shape[0]
    rows, vocab = d_logits.shape
    launch(ptr(d_logits), ptr(d_pre_ids), ptr(d_stop), ptr(d_encoder), ptr(d_step), ptr(d_allowed), ptr(d_status),
           ptr(d_bid), ptr(d_cu), ptr(d_thinking), rows, vocab, bsz, d_pre_ids.shape[1], allowed.size, think_end_id,
           line_break_id, stream())
    return cp.asnumpy(d_logits), cp.asnumpy(d_status)


@pytest.fixture
def run():
    """The backend of the shared tests (tests/reasoning_cases.py): the kernels on device copies."""
    return run_kernel


@pytest.fixture(params=all_cases() + [(1000, "mixed", 91), (5000, "mixed", 92), (5000, "all_decode", 93)],
                ids=lambda p: "-".join(map(str, p)))
def reference_grid(request):
    """(bsz, kind, seed): every batch size (and 1000, 5000) x kind."""
    return request.param


def test_reasoning_phase_token_constraint_cuda_walk_non_thinking_and_abandoned():
    pre_ids = np.full((1, 8), -1, np.int64)
    logits = np.arange(18, dtype=np.float32).reshape(3, 6)
    got, status = run_kernel(logits, pre_ids, [False], [5], [5], [0], [2], [0], *pack_output_index([1], capacity=3),
                             [False])
    np.testing.assert_array_equal(status, [2])
    np.testing.assert_array_equal(got[0], [MASKED, MASKED, 2.0, MASKED, MASKED, MASKED])
    np.testing.assert_array_equal(got[1:], logits[1:])
    pre_ids[0, 1] = 2
    got, status = run_kernel(logits, pre_ids, [False], [3], [0], [1], [2], status, *pack_output_index([3]), [False])
    np.testing.assert_array_equal(status, [3])
    np.testing.assert_array_equal(got, logits)
    statuses, _ = walk(run_kernel, [5, THINK_END, 5, 5, 5, 5, 5])
    assert statuses == [0, 1, 1, 1, 1, 3, 3]


def test_reasoning_phase_token_constraint_cuda_history_past_the_row_and_slots_past_bsz():
    """S = 4: step 5 still sees </think> (stays 1), step 7 sees only -1 (-> 3), read without
    touching memory past the row; slot 2 is past bsz = 2 and keeps its status."""
    pre_ids = np.array([[-1, -1, LF, THINK_END]] * 3, np.int64)
    _, status = run_kernel(np.zeros((1, 3), np.float32), pre_ids, [False] * 3, [1, 1], [0, 0], [5, 7, 5], [1],
                           [1, 1, 1], np.array([-1], np.int32), [0, 0, 0], [True] * 3)
    np.testing.assert_array_equal(status, [1, 3, 1])


@pytest.mark.parametrize("num_allowed", [0, 1, 2, 5, 3000])
def test_reasoning_phase_token_constraint_cuda_qwen_vocab_tiles(num_allowed):
    """V = 151936 spans five 32768-id bitmap tiles; allowed ids sit on tile edges, repeat, and
    fall outside [0, V)."""
    rng = np.random.default_rng(num_allowed)
    batch = make_step_batch(rng, 17, "mixed")
    _, batch_ids, cu = output_index(batch)
    inputs = random_reasoning_inputs(rng, batch, batch_ids, cu, vocab=151936, think_end_id=THINK_END,
                                     line_break_id=LF)
    edges = np.array([0, 32767, 32768, 65535, 65536, 131071, 131072, 151935, 151936, -1, 32768], np.int64)
    extra = rng.integers(-5, 151936 + 5, size=max(num_allowed - edges.size, 0))
    inputs["allowed_tokens"] = np.concatenate([edges, extra])[:num_allowed].astype(np.int64)
    check_against_reference(run_kernel, inputs)


def test_reasoning_phase_token_constraint_cuda_out_of_range_batch_id_is_skipped():
    """GPU divergence (documented): the CPU op raises on a batch id outside [-1, bsz); the kernel
    cannot raise without a host sync, so such a row is left untouched."""
    pre_ids = np.full((1, 4), -1, np.int64)
    logits = np.ones((3, 4), np.float32)
    got, status = run_kernel(logits, pre_ids, [False], [1], [2], [0], [1], [0], np.array([0, 1, -3], np.int32),
                             [0, 1], [False])
    np.testing.assert_array_equal(status, [2])
    np.testing.assert_array_equal(got, [[MASKED, 1, MASKED, MASKED], [1] * 4, [1] * 4])


def test_reasoning_phase_token_constraint_cuda_first_row_past_the_logits_is_not_touched():
    """GPU divergence (documented, issue 16): the CPU op raises when cu_seqlens_q_output[bsz] >
    logits rows. The kernel runs one block per logits row, so slot 1 (status 2, first row 2 of
    a 2-row tensor) has no row to constrain and nothing past the tensor is written; slot 0's
    first row is masked as usual and both statuses still advance."""
    pre_ids = np.full((2, 4), -1, np.int64)
    logits = np.ones((2, 4), np.float32)
    got, status = run_kernel(logits, pre_ids, [False, False], [2, 1], [2, 1], [0, 0], [1], [0, 0],
                             np.array([0, 0], np.int32), [0, 2, 3], [False, False])
    np.testing.assert_array_equal(status, [2, 2])
    np.testing.assert_array_equal(got, [[MASKED, 1, MASKED, MASKED], [1] * 4])


@pytest.mark.parametrize("sizes", [(-1, 4, 1, 4, 1), (1, -1, 1, 4, 1), (1, 4, -1, 4, 1), (1, 4, 1, -1, 1),
                                   (1, 4, 1, 4, -1)])
def test_reasoning_phase_token_constraint_cuda_launcher_rejects_negative_sizes(sizes):
    d = cp.zeros(16, dtype=cp.int64)
    with pytest.raises(RuntimeError, match="returned cudaError 1"):
        launch(*([ptr(d)] * 10), *sizes, THINK_END, LF, stream())
