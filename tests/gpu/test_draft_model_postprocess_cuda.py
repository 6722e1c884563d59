"""draft_model_postprocess's CUDA kernel against the numpy reference (reference/cases/draft_state.py cases,
batch sizes past one block, and the kernel's gap handling where the CPU op raises)."""


import numpy as np
import pytest

from reference.cases import draft_state as dc
from tests.draft_postprocess_case_tests import (  # noqa: F401  written once, also run on the Paddle op
    PAUSED, make_state, test_draft_model_postprocess_full_row_and_width_one, test_draft_model_postprocess_literal,
    test_draft_model_postprocess_matches_reference, test_draft_model_postprocess_paused_slots_get_no_tokens,
)
from tests.gpu.harness import launcher, ptr, require_gpu, stream
from reference.draft_model_postprocess import ref_draft_model_postprocess

cp = require_gpu()
launch = launcher("specworker_draft_model_postprocess_launch")

GUARD = 64
CANARY = -7777
BATCH_SIZES = (1, 3, 17, 256, 1000, 5000)


def run_kernel(state, width=None):
    """Runs the kernel on a numpy state dict; returns the new base_model_seq_lens_this_time and
    checks that nothing else (and nothing past the end) was written."""
    drafts = np.asarray(state["base_model_draft_tokens"])
    lens = np.asarray(state["base_model_seq_lens_this_time"], np.int32)
    enc = np.asarray(state["base_model_seq_lens_encoder"], np.int32)
    stop = np.asarray(state["base_model_stop_flags"], bool)
    paused = state.get("base_model_is_block_step")
    d_drafts = cp.asarray(drafts)
    d_lens = cp.asarray(np.concatenate([lens, np.full(GUARD, CANARY, np.int32)]))
    d_enc, d_stop = cp.asarray(enc), cp.asarray(stop)
    d_paused = None if paused is None else cp.asarray(np.asarray(paused, bool))
    launch(ptr(d_drafts), drafts.shape[1] if width is None else width, ptr(d_lens), ptr(d_enc), ptr(d_stop),
           ptr(d_paused), lens.shape[0], stream())
    out = cp.asnumpy(d_lens)
    assert (out[lens.shape[0]:] == CANARY).all(), "seq_lens_this_time written past bsz"
    np.testing.assert_array_equal(cp.asnumpy(d_drafts), drafts, err_msg="base_model_draft_tokens is read-only")
    return out[: lens.shape[0]]


@pytest.fixture
def run():
    """The backend of the shared tests (tests/draft_postprocess_case_tests.py): the kernel, GUARD and
    read-only drafts checked."""
    return run_kernel


@pytest.fixture(params=dc.postprocess_grid(BATCH_SIZES), ids=lambda p: "-".join(map(str, p)))
def reference_grid(request):
    """(bsz, kind, seed): every GPU batch size x kind."""
    return request.param


def test_draft_model_postprocess_cuda_without_block_step_reads_paused_gap_row():
    """Without is_block_step, PAUSED's slot 3 (row -1 6 -1 2) is fed: the CPU op raises, the kernel
    counts 2 (tests/ops literal of test_draft_model_postprocess_paused_slots_get_no_tokens)."""
    np.testing.assert_array_equal(run_kernel(dict(PAUSED, base_model_is_block_step=None)), [2, 9, 0, 2, 3])


@pytest.mark.parametrize("row, want", [([7, -1, 8, -1], 1), ([7, 8, -1, 9], 2), ([-1, 8, 9, -1], 3)])
def test_draft_model_postprocess_cuda_gap_counts_contiguous_prefix(row, want):
    """The CPU op raises on these rows; the kernel cannot, so it feeds only the drafts before the
    first -1 (never the -1 itself, which FastDeploy's count of non -1 entries did)."""
    state = make_state([[1, 2, -1, -1], row, [3, -1, -1, -1]], [0, 0, 0], [0, 0, 0], [False] * 3)
    with pytest.raises(ValueError):
        ref_draft_model_postprocess(state)
    got = run_kernel(state)
    np.testing.assert_array_equal(got, ref_draft_model_postprocess(state, strict=False)["base_model_seq_lens_this_time"])
    assert got[1] == want


def test_draft_model_postprocess_cuda_rejects_zero_width():
    with pytest.raises(RuntimeError, match="returned cudaError"):
        run_kernel(make_state([[1, 2]], [0], [0], [False]), width=0)
