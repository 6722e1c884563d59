"""batch_invariant_linear_bf16's standalone CUDA kernel (CuPy + ctypes, no Paddle): batch invariance
as exact bit equality (a row alone vs the same row at tile edges of batches of 1 .. 4096 rows, every
tile shape forced through the tile launcher, the cp.async vs the element-load path), values against
the float64 reference on the bfloat16 inputs within the bound of docs/spec.md §4.8
(ref_batch_invariant_linear_bf16_error_bound), the edge sizes and the launcher's argument checks.
The output starts as a NaN poison pattern, so an output the kernel forgets to write fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.gpu.harness import launcher, ptr, raw_launcher, require_gpu, stream
from reference.batch_invariant_linear_bf16 import (
    bf16_bits, bf16_from_bits, ref_batch_invariant_linear_bf16, ref_batch_invariant_linear_bf16_error_bound,
    ref_bf16_round,
)

cp = require_gpu()

NAME = "specworker_batch_invariant_linear_bf16_launch"
OUT_FLOAT32, OUT_BFLOAT16 = 0, 2
CUDA_ERROR_INVALID_VALUE = 1
POISON_BYTE = 0xFF  # NaN in float32 and bfloat16
TILE_NAME = "specworker_batch_invariant_linear_bf16_tile_launch"
NUM_TILES = 9  # tile ids 0 .. 8 of the kernel file
launch = launcher(NAME)
tile_launch = launcher(TILE_NAME)

# The launcher's tiles (PickTile in the kernel file): 16-row tiles up to M = 16, beyond that 16- to
# 128-row tiles chosen with N; the awkward sizes straddle every row-tile edge (16, 32, 64, 128).
AWKWARD_M = [1, 2, 3, 15, 16, 17, 63, 64, 65, 127, 257, 1000, 4096]
# (K, N): SmolLM2-135M's q / k / down projections; K = 40 < one 64-wide k tile and 2.5 MMA k steps;
# N = 200 not a multiple of the 32 / 64 / 128 column tiles; (100, 259) neither multiple of 8 (the
# element-load path); 1000 spans many k tiles of both widths.
SHAPES_KN = [(576, 576), (576, 192), (1536, 576), (40, 200), (100, 259), (1000, 1000)]


def bf16_inputs(rng, M: int, K: int, N: int, with_bias: bool):
    """bfloat16 values as float32: x ~ N(0, 1), weight ~ N(0, 1 / K), bias ~ N(0, 1)."""
    x = ref_bf16_round(rng.standard_normal((M, K)).astype(np.float32))
    w = ref_bf16_round((rng.standard_normal((K, N)) / np.sqrt(max(K, 1))).astype(np.float32))
    b = ref_bf16_round(rng.standard_normal(N).astype(np.float32)) if with_bias else None
    return x, w, b


def to_device(a: np.ndarray | None):
    return None if a is None else cp.asarray(bf16_bits(a))


def run_kernel(x, w, b=None, out_dtype=OUT_FLOAT32, *, d_x=None) -> np.ndarray:
    """out [M, N] as float32 numpy (bfloat16 outputs widened exactly); d_x overrides x's device copy."""
    M, K = x.shape
    N = w.shape[1]
    d_x = to_device(x) if d_x is None else d_x
    d_w, d_b = to_device(w), to_device(b)  # held until the launch has finished
    d_out = cp.empty((M, N), dtype=cp.float32 if out_dtype == OUT_FLOAT32 else cp.uint16)
    d_out.view(cp.uint8).fill(POISON_BYTE)
    launch(ptr(d_x), ptr(d_w), ptr(d_b), ptr(d_out), M, K, N, out_dtype, stream())
    out = cp.asnumpy(d_out)
    return out if out_dtype == OUT_FLOAT32 else bf16_from_bits(out)


def assert_same_bits(got: np.ndarray, want: np.ndarray, what: str):
    same = got.view(np.uint32) == want.view(np.uint32)
    if not same.all():
        idx = np.argwhere(~same)
        r, n = idx[0]
        raise AssertionError(f"{what}: {len(idx)} of {same.size} outputs differ in their bits, first at "
                             f"[{r}, {n}]: {got[r, n]!r} vs {want[r, n]!r}")


def assert_within_bound(got, x, w, b, out_dtype, what: str):
    want = ref_batch_invariant_linear_bf16(x, w, b)
    bound = ref_batch_invariant_linear_bf16_error_bound(x, w, b, out_dtype == OUT_BFLOAT16)
    err = np.abs(got.astype(np.float64) - want)
    bad = ~(err <= bound)  # NaN (an unwritten output) counts as bad
    if bad.any():
        r, n = np.argwhere(bad)[0]
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} outputs outside the bf16 bound, first at "
                             f"[{r}, {n}]: got {got[r, n]!r}, float64 {want[r, n]!r}, |err| {err[r, n]:.3g} > "
                             f"bound {bound[r, n]:.3g}")


@pytest.mark.parametrize("out_dtype", [OUT_FLOAT32, OUT_BFLOAT16], ids=["out_f32", "out_bf16"])
@pytest.mark.parametrize("K,N", SHAPES_KN, ids=lambda v: str(v))
def test_bf16_kernel_row_bits_at_tile_edges_independent_of_batch(K, N, out_dtype):
    """Two query rows computed alone (M = 1, the 16-row tile) must give the same bits as copies of them
    placed at row 0, the last row, tile edges (15 / 16, 63 / 64, 127 / 128) and a random row of
    batches of every AWKWARD_M size, whichever tile shape that M selects."""
    rng = np.random.default_rng([K, N, out_dtype])
    queries, w, b = bf16_inputs(rng, 2, K, N, True)
    alone = np.concatenate([run_kernel(queries[i:i + 1], w, b, out_dtype) for i in range(2)])
    for M in AWKWARD_M:
        batch = bf16_inputs(rng, M, K, N, False)[0]
        spots = sorted({0, M - 1, *(min(e, M - 1) for e in (15, 16, 63, 64, 127, 128)), int(rng.integers(0, M))})
        which = [i % 2 for i in range(len(spots))]  # alternate the two queries over the spots
        batch[spots] = queries[which]
        out = run_kernel(batch, w, b, out_dtype)
        assert_same_bits(out[spots], alone[which], f"K={K} N={N} M={M}: query rows at {spots} vs alone")


@pytest.mark.parametrize("K,N", [(576, 3072), (4096, 4096), (100, 259)], ids=lambda v: str(v))
def test_batch_invariant_linear_bf16_prefix_rows_same_bits_across_tile_shapes(K, N):
    """Every row, not only chosen ones: the first m rows of a 4096-row batch equal the same rows run
    as a batch of m, for m across the launcher's tile choices (576 x 3072: tiles 2, 4, 5, 6;
    4096 x 4096: tiles 1, 2, 3, 4, 5, 6; 100 x 259, the element-load path: tiles 2, 4)."""
    rng = np.random.default_rng([K, N, 7])
    x, w, b = bf16_inputs(rng, 4096, K, N, True)
    full = run_kernel(x, w, b)
    for m in (1, 16, 17, 64, 65, 256, 257, 1000):
        assert_same_bits(run_kernel(x[:m], w, b), full[:m], f"K={K} N={N}: rows 0..{m - 1} at M={m} vs M=4096")


@pytest.mark.parametrize("out_dtype", [OUT_FLOAT32, OUT_BFLOAT16], ids=["out_f32", "out_bf16"])
@pytest.mark.parametrize("M,K,N", [(1, 576, 192), (40, 1000, 1000), (300, 576, 576), (129, 100, 259), (17, 40, 200)],
                         ids=lambda v: str(v))
def test_batch_invariant_linear_bf16_every_tile_gives_the_same_bits(M, K, N, out_dtype):
    """The launcher picks the tile shape from M, K and N; the contract is that no tile changes an
    output's arithmetic. Forcing each of the NUM_TILES shapes on the same inputs must give identical bits."""
    x, w, b = bf16_inputs(np.random.default_rng([M, K, N]), M, K, N, True)
    d_x, d_w, d_b = to_device(x), to_device(w), to_device(b)
    outs = []
    for tile in range(NUM_TILES):
        d_out = cp.empty((M, N), dtype=cp.float32 if out_dtype == OUT_FLOAT32 else cp.uint16)
        d_out.view(cp.uint8).fill(POISON_BYTE)
        tile_launch(ptr(d_x), ptr(d_w), ptr(d_b), ptr(d_out), M, K, N, out_dtype, tile, stream())
        out = cp.asnumpy(d_out)
        outs.append(out if out_dtype == OUT_FLOAT32 else bf16_from_bits(out))
    assert_within_bound(outs[0], x, w, b, out_dtype, f"tile 0, M={M} K={K} N={N}")
    for tile in range(1, NUM_TILES):
        assert_same_bits(outs[tile], outs[0], f"tile {tile} vs tile 0, M={M} K={K} N={N}")


@pytest.mark.parametrize("tile", [-2, NUM_TILES, 100])
def test_batch_invariant_linear_bf16_tile_launch_rejects_unknown_tile(tile):
    d = cp.zeros(64, cp.float32)
    rc = raw_launcher(TILE_NAME)(ptr(d), ptr(d), None, ptr(d), 2, 8, 8, OUT_FLOAT32, tile, stream())
    assert rc == CUDA_ERROR_INVALID_VALUE, f"tile {tile}: expected cudaErrorInvalidValue, got {rc}"


@pytest.mark.parametrize("out_dtype", [OUT_FLOAT32, OUT_BFLOAT16], ids=["out_f32", "out_bf16"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("M,K,N", [(M, K, N) for M in (1, 3, 17, 65, 257)
                                   for K, N in SHAPES_KN + [(1, 1), (8, 1), (16, 8), (7, 33), (4096, 64)]]
                         + [(1000, 576, 576), (1000, 100, 259)], ids=lambda v: str(v))
def test_batch_invariant_linear_bf16_matches_reference(M, K, N, with_bias, out_dtype):
    x, w, b = bf16_inputs(np.random.default_rng([M, K, N, with_bias]), M, K, N, with_bias)
    assert_within_bound(run_kernel(x, w, b, out_dtype), x, w, b, out_dtype, f"M={M} K={K} N={N} bias={with_bias}")


def test_batch_invariant_linear_bf16_unaligned_x_gives_same_bits():
    """x starting 2 bytes past a 16-byte boundary takes the element-load path; its bits must equal the
    cp.async path's (both stage the same shared tiles), at each tile shape."""
    K, N = 576, 192
    for M in (1, 40, 300):
        x, w, b = bf16_inputs(np.random.default_rng(M), M, K, N, True)
        shifted = cp.empty(M * K + 8, dtype=cp.uint16)
        shifted[1:1 + M * K] = cp.asarray(bf16_bits(x)).reshape(-1)
        d_x = shifted[1:1 + M * K]
        assert d_x.data.ptr % 16 != 0, "the shifted copy must be misaligned for this test to mean anything"
        assert_same_bits(run_kernel(x, w, b, d_x=d_x), run_kernel(x, w, b), f"M={M}: unaligned x vs aligned x")


def test_batch_invariant_linear_bf16_nan_rows_do_not_leak():
    rng = np.random.default_rng(3)
    q, w, b = bf16_inputs(rng, 1, 576, 192, True)
    alone = run_kernel(q, w, b)
    for M in (20, 300):
        filler = bf16_inputs(rng, M, 576, 192, False)[0]
        filler[1, 5], filler[3, 0], filler[M - 1, 575] = np.nan, np.inf, -np.inf
        for pos in (0, 2, 15, 16, M):
            out = run_kernel(np.concatenate([filler[:pos], q, filler[pos:]]), w, b)
            assert_same_bits(out[pos:pos + 1], alone, f"query at row {pos} of {M + 1} beside NaN / Inf rows")


@pytest.mark.parametrize("out_dtype", [OUT_FLOAT32, OUT_BFLOAT16], ids=["out_f32", "out_bf16"])
def test_batch_invariant_linear_bf16_k_zero_with_null_inputs_gives_bias_or_zeros(out_dtype):
    b = np.array([1, -2, 3, 0.5, 0.25], dtype=np.float32)  # bfloat16 values
    for bias, want in ((None, np.zeros((3, 5), np.float32)), (b, np.tile(b, (3, 1)))):
        d_out = cp.empty((3, 5), dtype=cp.float32 if out_dtype == OUT_FLOAT32 else cp.uint16)
        d_out.view(cp.uint8).fill(POISON_BYTE)
        d_b = to_device(bias)
        launch(None, None, ptr(d_b), ptr(d_out), 3, 0, 5, out_dtype, stream())
        got = cp.asnumpy(d_out)
        np.testing.assert_array_equal(got if out_dtype == OUT_FLOAT32 else bf16_from_bits(got), want)


def test_batch_invariant_linear_bf16_empty_launches_nothing():
    d_out = cp.empty((2, 3), dtype=cp.float32)
    d_out.view(cp.uint8).fill(POISON_BYTE)
    d_x, d_w = cp.zeros(8, cp.uint16), cp.zeros(12, cp.uint16)
    launch(ptr(d_x), ptr(d_w), None, ptr(d_out), 0, 4, 3, OUT_FLOAT32, stream())  # M = 0
    launch(ptr(d_x), ptr(d_w), None, ptr(d_out), 2, 4, 0, OUT_FLOAT32, stream())  # N = 0
    assert (cp.asnumpy(d_out.view(cp.uint8)) == POISON_BYTE).all(), "nothing may be written when M == 0 or N == 0"


@pytest.mark.parametrize("M,K,N,out_dtype,null", [
    (-1, 4, 3, OUT_FLOAT32, None), (2, -1, 3, OUT_FLOAT32, None), (2, 4, -1, OUT_FLOAT32, None),
    (2, 4, 3, 1, None), (2, 4, 3, 3, None), (2, 4, 3, -1, None),  # float16 / unknown output codes
    (2, 4, 3, OUT_FLOAT32, "x"), (2, 4, 3, OUT_FLOAT32, "weight"), (2, 4, 3, OUT_BFLOAT16, "out"),
])
def test_bf16_launcher_rejects_bad_arguments_with_invalid_value(M, K, N, out_dtype, null):
    raw = raw_launcher(NAME)
    d = {name: cp.zeros(16, cp.float32) for name in ("x", "weight", "out")}
    args = [None if null == name else ptr(d[name]) for name in ("x", "weight", "out")]
    assert raw(args[0], args[1], None, args[2], M, K, N, out_dtype, stream()) == CUDA_ERROR_INVALID_VALUE
    assert (cp.asnumpy(d["out"]) == 0).all(), "a rejected call must not launch"
