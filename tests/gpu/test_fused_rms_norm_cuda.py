"""fused_rms_norm's standalone CUDA kernel (CuPy + ctypes, no Paddle): the shared cases bit for bit
against ref_fused_rms_norm (so the GPU gives the CPU op's bits), rows wider than the shared-memory
staging buffer (lane 0 forms the terms itself), the row-per-block edges, and the launcher's refusals.
Outputs start as POISON and carry guard rows, so a row the kernel forgets or overruns shows up.
"""


import numpy as np
import pytest

from reference.fused_rms_norm import ref_fused_rms_norm
from tests.fused_rms_norm_cases import (  # noqa: F401  written once, also run on the Paddle op
    assert_same_bits, norm_inputs, test_fused_rms_norm_eps_is_added_after_the_sum,
    test_fused_rms_norm_literal_rows, test_fused_rms_norm_literal_without_residual,
    test_fused_rms_norm_matches_reference, test_fused_rms_norm_row_bits_independent_of_batch,
)
from tests.gpu.harness import CANARY, guarded, ptr, raw_launcher, require_gpu, stream, unguarded

cp = require_gpu()

CUDA_ERROR_INVALID_VALUE = 1
POISON = np.float32(-12345.5)
EPS = 1e-5


def launch(x, weight, residual, eps, *, with_residual_out=None, rows=None, hidden=None):
    """Runs the launcher on numpy inputs; returns (rc, out, residual_out or x) as numpy."""
    x = np.asarray(x, np.float32)
    r, h = x.shape
    with_residual_out = residual is not None if with_residual_out is None else with_residual_out
    d_x, d_w = cp.asarray(x), cp.asarray(np.asarray(weight, np.float32))
    d_res = None if residual is None else cp.asarray(np.asarray(residual, np.float32))
    d_out = guarded(cp, np.full((r, h), POISON, np.float32))
    d_h = guarded(cp, np.full((r, h), POISON, np.float32)) if with_residual_out else None
    rc = raw_launcher("specworker_fused_rms_norm_launch")(
        ptr(d_x), ptr(d_w), ptr(d_res), ptr(d_out), ptr(d_h), r if rows is None else rows,
        h if hidden is None else hidden, float(eps), stream())
    cp.cuda.get_current_stream().synchronize()
    if rc != 0:
        return rc, None, None
    out = unguarded(cp, d_out, "out")
    return rc, out, x if d_h is None else unguarded(cp, d_h, "residual_out")


@pytest.fixture
def run():
    """The backend of the shared tests (tests/fused_rms_norm_cases.py): the kernel."""
    def run_kernel(x, weight, residual, eps):
        rc, out, h = launch(x, weight, residual, eps)
        assert rc == 0, f"specworker_fused_rms_norm_launch returned cudaError {rc}"
        return out, h
    return run_kernel


@pytest.mark.parametrize("with_residual", [False, True])
@pytest.mark.parametrize("hidden", [3072, 3073, 12288, 12289, 20000])
def test_fused_rms_norm_cuda_wide_rows(hidden, with_residual):
    """3072 / 3073: the last width with 4 rows per block and the first with 1; 12288 / 12289: the last
    staged width and the first unstaged one (lane 0 forms the terms from global memory)."""
    rows = 9
    x, w, res = norm_inputs(np.random.default_rng(hidden), rows, hidden, with_residual)
    rc, out, h = launch(x, w, res, EPS)
    assert rc == 0
    want_out, want_h = ref_fused_rms_norm(x, w, res, EPS)
    assert_same_bits(h, want_h, "residual_out")
    assert_same_bits(out, want_out, "out")


@pytest.mark.parametrize("rows", [4, 5, 4099])
def test_fused_rms_norm_cuda_rows_per_block_edges(rows):
    """4 rows fill one block exactly, 5 leave a block with one live warp, 4099 span many blocks."""
    x, w, res = norm_inputs(np.random.default_rng(rows), rows, 576, True)
    rc, out, h = launch(x, w, res, EPS)
    assert rc == 0
    want_out, want_h = ref_fused_rms_norm(x, w, res, EPS)
    assert_same_bits(h, want_h, "residual_out")
    assert_same_bits(out, want_out, "out")


def test_fused_rms_norm_cuda_rejects_bad_launch_arguments():
    x, w, res = norm_inputs(np.random.default_rng(0), 2, 8, True)
    assert launch(x, w, res, EPS, rows=-1)[0] == CUDA_ERROR_INVALID_VALUE
    assert launch(x, w, res, EPS, hidden=0)[0] == CUDA_ERROR_INVALID_VALUE
    assert launch(x, w, res, -1e-6)[0] == CUDA_ERROR_INVALID_VALUE
    assert launch(x, w, res, float("nan"))[0] == CUDA_ERROR_INVALID_VALUE
    assert launch(x, w, res, EPS, with_residual_out=False)[0] == CUDA_ERROR_INVALID_VALUE
    assert launch(x, w, None, EPS, with_residual_out=True)[0] == CUDA_ERROR_INVALID_VALUE


def test_fused_rms_norm_cuda_zero_rows_writes_nothing():
    d_out = cp.full((1, 4), CANARY, dtype=cp.float32)
    rc = raw_launcher("specworker_fused_rms_norm_launch")(
        ptr(None), ptr(None), ptr(None), ptr(d_out), ptr(None), 0, 4, EPS, stream())
    cp.cuda.get_current_stream().synchronize()
    assert rc == 0 and (cp.asnumpy(d_out) == CANARY).all()
