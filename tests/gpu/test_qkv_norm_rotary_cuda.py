"""qkv_norm_rotary's standalone CUDA kernel against ref_qkv_norm_rotary (CuPy + ctypes, no Paddle): the shared
cases of tests/qkv_norm_rotary_cases.py bit for bit, so the GPU gives the CPU op's bits; outputs start as a
poison pattern, so an element the kernel forgets to write shows up; the launcher's argument checks.
"""


import numpy as np
import pytest

from tests.gpu.harness import ptr, raw_launcher, require_gpu, stream
from tests.qkv_norm_rotary_cases import (  # noqa: F401  written once, also run on the Paddle op
    BAD_LAUNCH_ARGUMENTS, qkv_inputs, test_qkv_norm_rotary_literal_norms, test_qkv_norm_rotary_literal_rotation,
    test_qkv_norm_rotary_matches_reference, test_qkv_norm_rotary_rows_are_batch_invariant,
)

cp = require_gpu()

CUDA_ERROR_INVALID_VALUE = 1
POISON = np.float32(-12345.5)


def _launcher():
    return raw_launcher("specworker_qkv_norm_rotary_launch")


def _dev(a):
    return None if a is None else cp.asarray(np.ascontiguousarray(a, np.float32))


def launch(qkv, cos_full, sin_signed, q_norm_weight, k_norm_weight, nh, nkv, d, eps):
    """Runs the launcher on numpy inputs. Returns (rc, q, k, v) as numpy arrays."""
    t_num = np.asarray(qkv).shape[0]
    d_q = cp.full((t_num, nh, d), POISON, dtype=cp.float32)
    d_k = cp.full((t_num, nkv, d), POISON, dtype=cp.float32)
    d_v = cp.full((t_num, nkv, d), POISON, dtype=cp.float32)
    inputs = [_dev(a) for a in (qkv, cos_full, sin_signed, q_norm_weight, k_norm_weight)]
    rc = _launcher()(*map(ptr, inputs), ptr(d_q), ptr(d_k), ptr(d_v), t_num, nh, nkv, d, float(eps), stream())
    cp.cuda.get_current_stream().synchronize()
    return rc, cp.asnumpy(d_q), cp.asnumpy(d_k), cp.asnumpy(d_v)


def run_kernel(qkv, cos_full, sin_signed, q_norm_weight, k_norm_weight, nh, nkv, d, eps):
    rc, q, k, v = launch(qkv, cos_full, sin_signed, q_norm_weight, k_norm_weight, nh, nkv, d, eps)
    if rc != 0:
        raise RuntimeError(f"specworker_qkv_norm_rotary_launch returned cudaError {rc}")
    return q, k, v


@pytest.fixture
def run():
    """The backend of the shared tests (tests/qkv_norm_rotary_cases.py): the kernel on POISON-filled outputs."""
    return run_kernel


@pytest.mark.parametrize("nh, nkv, d, eps, norms", BAD_LAUNCH_ARGUMENTS)
def test_qkv_norm_rotary_launcher_rejects_bad_arguments(nh, nkv, d, eps, norms):
    weight = np.ones(d, np.float32) if norms else None
    factors = np.zeros((2, d), np.float32)
    rc, q, _, _ = launch(np.zeros((2, (nh + 2 * nkv) * d), np.float32), factors, factors, weight, weight,
                         nh, nkv, d, eps)
    assert rc == CUDA_ERROR_INVALID_VALUE
    assert (q == POISON).all(), "a refused launch wrote q"


def test_qkv_norm_rotary_launcher_rejects_unpaired_norm_weights():
    qkv, cos_full, sin_signed, qw, _ = qkv_inputs(np.random.default_rng(0), 2, 2, 1, 4, norms=True)
    rc, _, _, _ = launch(qkv, cos_full, sin_signed, qw, None, 2, 1, 4, 1e-6)
    assert rc == CUDA_ERROR_INVALID_VALUE


def test_qkv_norm_rotary_launcher_writes_nothing_for_zero_tokens():
    rc, q, k, v = launch(np.zeros((0, 16), np.float32), np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32),
                         None, None, 2, 1, 4, 1e-6)
    assert rc == 0 and q.shape == (0, 2, 4) and k.shape == v.shape == (0, 1, 4)
