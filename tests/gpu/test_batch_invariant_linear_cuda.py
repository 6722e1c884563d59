"""batch_invariant_linear's standalone CUDA kernel (CuPy + ctypes, no Paddle): values against the
float64 reference (rtol = atol = 1e-5), the documented float32 order bit for bit (so the GPU gives
the CPU op's bits), and batch invariance as exact bit equality: a row alone vs among other rows,
at tile edges, beyond one tile, beyond 65535 row tiles (the grid-stride loop).
"""


import numpy as np
import pytest

from tests.gpu.harness import launcher, ptr, raw_launcher, require_gpu, stream
from tests.linear_cases import (  # noqa: F401  written once, also run on the Paddle op
    assert_same_bits, linear_inputs, test_batch_invariant_linear_follows_documented_fp32_order,
    test_batch_invariant_linear_k_zero_gives_bias_or_zeros, test_batch_invariant_linear_matches_reference,
    test_batch_invariant_linear_row_bits_independent_of_batch,
)
from reference.batch_invariant_linear import ref_batch_invariant_linear_fp32_order

cp = require_gpu()

CUDA_ERROR_INVALID_VALUE = 1
POISON = np.float32(-12345.5)
launch = launcher("specworker_batch_invariant_linear_launch")

# (K, N): K = 1, 7 shorter than one k chunk (32), 129 = 4 chunks + 1, 384 = 12 full chunks;
# N = 1 and 259 (= 4 x 64 + 3) leave partial column tiles, 1000 spans 16 tiles.
SHAPES_KN = [(1, 1), (7, 259), (129, 1), (129, 7), (128, 259), (128, 384), (384, 128), (1000, 1000)]
BATCH_SIZES = [0, 1, 3, 4, 17, 31, 32, 33, 64, 257, 1000, 5000]  # 32 = one row tile


def run_kernel(x, w, b=None) -> np.ndarray:
    M, K = x.shape
    N = w.shape[1]
    d_x, d_w = cp.asarray(x), cp.asarray(w)
    d_b = None if b is None else cp.asarray(b)
    d_out = cp.full((M, N), POISON, dtype=cp.float32)
    launch(ptr(d_x), ptr(d_w), ptr(d_b), ptr(d_out), M, K, N, stream())
    return cp.asnumpy(d_out)


@pytest.fixture
def run():
    """The backend of the shared tests (tests/linear_cases.py): the kernel on a POISON-filled output
    (it takes the weight as [K, N] only)."""
    def run_plain(x, w, b=None, layout="plain"):
        assert layout == "plain"
        return run_kernel(x, w, b)
    return run_plain


@pytest.fixture(params=[(M, K, N, bias) for M in BATCH_SIZES for K, N in SHAPES_KN for bias in (False, True)],
                ids=lambda p: "-".join(map(str, p)))
def reference_grid(request):
    return request.param


@pytest.fixture(params=[(9, M, K, N, bias) for M in (1, 3, 33, 257, 1000) for K, N in SHAPES_KN
                        for bias in (False, True)], ids=lambda p: "-".join(map(str, p[1:])))
def order_grid(request):
    return request.param


@pytest.fixture(params=[(K, N, bias, "plain")
                        for K, N in [(128, 384), (128, 259), (384, 128), (7, 259), (129, 7), (1000, 1000)]
                        for bias in (False, True)], ids=lambda p: "-".join(map(str, p[:3])))
def row_bits_grid(request):
    return request.param


@pytest.fixture
def batch_edges():
    """Among 3 .. 5000 other rows; 30 / 31: the queries straddle the first row-tile edge (rows 31 and 32)."""
    return (3, 4, 17, 64, 257, 5000), (30, 31)


def test_batch_invariant_linear_cuda_beyond_65535_row_tiles():
    """grid.y is capped at 65535 row tiles of 32 rows; more rows go through the grid-stride loop."""
    M, K, N = 65535 * 32 + 45, 3, 5
    rng = np.random.default_rng(1)
    x, w, b = linear_inputs(rng, M, K, N, True)
    out = run_kernel(x, w, b)
    assert_same_bits(out, ref_batch_invariant_linear_fp32_order(x, w, b), "2.1M rows vs documented order")
    for r in (0, 65535 * 32 - 1, 65535 * 32, M - 1):
        assert_same_bits(out[r:r + 1], run_kernel(x[r:r + 1], w, b), f"row {r} alone vs among {M}")


def test_batch_invariant_linear_cuda_nan_rows_do_not_leak():
    rng = np.random.default_rng(3)
    q, w, b = linear_inputs(rng, 1, 128, 259, True)
    alone = run_kernel(q, w, b)
    filler = rng.standard_normal((40, 128)).astype(np.float32)
    filler[1, 5], filler[3, 0], filler[33, 127] = np.nan, np.inf, -np.inf
    for pos in (0, 2, 31, 32, 40):
        out = run_kernel(np.concatenate([filler[:pos], q, filler[pos:]]), w, b)
        assert_same_bits(out[pos:pos + 1], alone, f"query at row {pos} beside NaN / Inf rows")


def test_batch_invariant_linear_cuda_k_zero_with_null_inputs_gives_bias():
    """K = 0 with NULL x and weight pointers: the bias (or zeros, test_batch_invariant_linear_k_zero_gives_bias_or_zeros)."""
    b = np.array([1, -2, 3, 0.5], dtype=np.float32)
    d_out = cp.full((3, 4), POISON, dtype=cp.float32)
    launch(None, None, ptr(cp.asarray(b)), ptr(d_out), 3, 0, 4, stream())
    np.testing.assert_array_equal(cp.asnumpy(d_out), np.tile(b, (3, 1)))


def test_batch_invariant_linear_cuda_empty_launches_nothing():
    d_out = cp.full((2, 3), POISON, dtype=cp.float32)
    d_x, d_w = cp.ones((2, 4), cp.float32), cp.ones((4, 3), cp.float32)
    launch(ptr(d_x), ptr(d_w), None, ptr(d_out), 0, 4, 3, stream())  # M = 0
    launch(ptr(d_x), ptr(d_w), None, ptr(d_out), 2, 4, 0, stream())  # N = 0
    assert (cp.asnumpy(d_out) == POISON).all(), "nothing may be written when M == 0 or N == 0"


@pytest.mark.parametrize("M,K,N,null", [(-1, 4, 3, None), (2, -1, 3, None), (2, 4, -1, None),
                                        (2, 4, 3, "x"), (2, 4, 3, "weight"), (2, 4, 3, "out")])
def test_batch_invariant_linear_cuda_rejects_bad_sizes(M, K, N, null):
    raw = raw_launcher("specworker_batch_invariant_linear_launch")
    d = {name: cp.ones(12, cp.float32) for name in ("x", "weight", "out")}
    args = [None if null == name else ptr(d[name]) for name in ("x", "weight")] + [None]
    args.append(None if null == "out" else ptr(d["out"]))
    assert raw(*args, M, K, N, stream()) == CUDA_ERROR_INVALID_VALUE
