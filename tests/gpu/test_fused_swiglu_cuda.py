"""fused_swiglu's standalone CUDA kernel (CuPy + ctypes, no Paddle): the shared cases bit for bit against
ref_fused_swiglu (so the GPU gives the CPU op's bits), calls spanning many grid-stride rounds, and the launcher's
refusals. Outputs start as POISON and carry guard rows, so an output the kernel forgets or a row it overruns shows up.
"""

import numpy as np
import pytest

from reference.fused_swiglu import ref_fused_swiglu
from tests.gpu.harness import CANARY, guarded, ptr, raw_launcher, require_gpu, stream, unguarded
from tests.fused_swiglu_cases import (  # noqa: F401  written once, also run on the Paddle op
    assert_same_values, fused_swiglu_inputs, test_fused_swiglu_literal_row, test_fused_swiglu_matches_reference,
    test_fused_swiglu_row_bits_independent_of_batch, test_fused_swiglu_silu_within_ulps_of_float64,
    test_fused_swiglu_special_values,
)

cp = require_gpu()

CUDA_ERROR_INVALID_VALUE = 1
POISON = np.float32(-12345.5)


def launch(gate_up, *, rows=None, inter=None):
    """Runs the launcher on numpy gate_up [R, 2I]; returns (rc, out [R, I] or None)."""
    gate_up = np.asarray(gate_up, np.float32)
    r, width = gate_up.shape
    d_out = guarded(cp, np.full((r, width // 2), POISON, np.float32))
    rc = raw_launcher("specworker_fused_swiglu_launch")(
        ptr(cp.asarray(gate_up)), ptr(d_out), r if rows is None else rows, width // 2 if inter is None else inter,
        stream())
    cp.cuda.get_current_stream().synchronize()
    if rc != 0:
        assert (cp.asnumpy(d_out)[:r] == POISON).all(), "a refused launch wrote out"
        return rc, None
    return rc, unguarded(cp, d_out, "out")


@pytest.fixture
def run():
    """The backend of the shared tests (tests/fused_swiglu_cases.py): the kernel."""
    def run_kernel(gate_up):
        rc, out = launch(gate_up)
        assert rc == 0, f"specworker_fused_swiglu_launch returned cudaError {rc}"
        return out
    return run_kernel


@pytest.mark.parametrize("rows, inter", [(4099, 4096), (1, 1 << 20), (70000, 3)])
def test_fused_swiglu_cuda_grid_stride_rounds(rows, inter):
    """More outputs than the 65536 blocks x 256 threads of one round (16.8M, 1M in one row, 210k outputs over 70000
    short rows: row starts inside a thread's stride)."""
    gate_up = fused_swiglu_inputs(np.random.default_rng(rows), rows, inter)
    rc, out = launch(gate_up)
    assert rc == 0
    assert_same_values(out, ref_fused_swiglu(gate_up), "out")


BAD_LAUNCHES = {"negative rows": dict(rows=-1), "zero inter": dict(inter=0), "negative inter": dict(inter=-2)}


@pytest.mark.parametrize("case", sorted(BAD_LAUNCHES))
def test_fused_swiglu_cuda_rejects_bad_launch_arguments(case):
    rc, _ = launch(fused_swiglu_inputs(np.random.default_rng(0), 2, 8), **BAD_LAUNCHES[case])
    assert rc == CUDA_ERROR_INVALID_VALUE, case


def test_fused_swiglu_cuda_rejects_null_pointers_with_rows():
    d_out = cp.zeros((2, 4), cp.float32)
    d_in = cp.zeros((2, 8), cp.float32)
    fn = raw_launcher("specworker_fused_swiglu_launch")
    assert fn(ptr(None), ptr(d_out), 2, 4, stream()) == CUDA_ERROR_INVALID_VALUE
    assert fn(ptr(d_in), ptr(None), 2, 4, stream()) == CUDA_ERROR_INVALID_VALUE


def test_fused_swiglu_cuda_zero_rows_writes_nothing():
    d_out = cp.full((1, 4), CANARY, dtype=cp.float32)
    rc = raw_launcher("specworker_fused_swiglu_launch")(ptr(None), ptr(d_out), 0, 4, stream())
    cp.cuda.get_current_stream().synchronize()
    assert rc == 0 and (cp.asnumpy(d_out) == CANARY).all()
