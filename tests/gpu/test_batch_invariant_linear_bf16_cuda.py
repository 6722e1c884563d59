"""batch_invariant_linear_bf16's standalone CUDA kernel (CuPy + ctypes, no Paddle): batch invariance
as exact bit equality (a row alone vs the same row at tile edges of batches of 1 .. 4096 rows, every
tile shape of an instruction family and both split modes forced through the tile launcher, the cp.async
vs the element-load path), the k-chunk arithmetic of docs/spec.md §4.8 bit for bit (a split output equals
the float32 sum, in chunk order, of the chunks run alone), values against the float64 reference on the
bfloat16 inputs within the bound of §4.8 (ref_batch_invariant_linear_bf16_error_bound), the edge sizes and
the launcher's argument checks. The output starts as a NaN poison pattern, so an output the kernel forgets
to write fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.gpu.harness import launcher, ptr, raw_launcher, require_gpu, stream
from reference.batch_invariant_linear_bf16 import (
    bf16_bits, bf16_from_bits, ref_batch_invariant_linear_bf16, ref_batch_invariant_linear_bf16_chunks,
    ref_batch_invariant_linear_bf16_error_bound, ref_bf16_round,
)

cp = require_gpu()

NAME = "specworker_batch_invariant_linear_bf16_launch"
OUT_FLOAT32, OUT_BFLOAT16 = 0, 2
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_NOT_SUPPORTED = 801
POISON_BYTE = 0xFF  # NaN in float32 and bfloat16
TILE_NAME = "specworker_batch_invariant_linear_bf16_tile_launch"
MMA_TILES = range(0, 10)  # mma.sync tiles (sm_80 and later)
WGMMA_TILES = range(10, 17)  # wgmma tiles (sm_90a builds on sm_90 GPUs; else cudaErrorNotSupported)
WS_TILES = (14, 15, 16)  # warp-specialised wgmma tiles: the 16-byte path only (else cudaErrorNotSupported)
NUM_TILES = 17
# (tile, split_mode) pairs a tile does not have (documented in the launcher's header): cudaErrorInvalidValue
MISSING_SPLIT_MODES = {(13, 0), (14, 0), (14, 1), (15, 1), (16, 1)}
SPLIT_PICK, SPLIT_ONE_BLOCK, SPLIT_CLUSTER = -1, 0, 1
launch = launcher(NAME)
tile_launch = launcher(TILE_NAME)
raw_tile_launch = raw_launcher(TILE_NAME)

# The launcher's tiles (PickTile in the kernel file): 16-row tiles up to M = 16, beyond that 16- to
# 128-row tiles chosen with N; the awkward sizes straddle every row-tile edge (16, 32, 64, 128).
AWKWARD_M = [1, 2, 3, 15, 16, 17, 63, 64, 65, 127, 257, 1000, 4096]
# (K, N): SmolLM2-135M's q / k / down projections; K = 40 < one 64-wide k tile and 2.5 MMA k steps;
# N = 200 not a multiple of the 32 / 64 / 128 column tiles; (100, 259) neither multiple of 8 (the
# element-load path); 1000 spans many k tiles of both widths. Split K (ref_batch_invariant_linear_bf16_chunks):
# (4096, 64) four chunks of 1024; (2100, 40) two, the second 948 long (not a multiple of 16 or 8: zero fill
# inside the last chunk, element loads).
SHAPES_KN = [(576, 576), (576, 192), (1536, 576), (40, 200), (100, 259), (1000, 1000), (4096, 64), (2100, 40)]


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


@pytest.mark.parametrize("K,N", [(576, 3072), (4096, 4096), (100, 259), (14336, 256)], ids=lambda v: str(v))
def test_batch_invariant_linear_bf16_prefix_rows_same_bits_across_tile_shapes(K, N):
    """Every row, not only chosen ones: the first m rows of a 4096-row batch equal the same rows run
    as a batch of m, for m across the launcher's tile and split-mode choices (4096 x 4096 and 14336 x 256
    split K in 4 chunks, one block or a cluster depending on M; 100 x 259 takes element loads)."""
    rng = np.random.default_rng([K, N, 7])
    x, w, b = bf16_inputs(rng, 4096, K, N, True)
    full = run_kernel(x, w, b)
    for m in (1, 16, 17, 64, 65, 256, 257, 1000):
        assert_same_bits(run_kernel(x[:m], w, b), full[:m], f"K={K} N={N}: rows 0..{m - 1} at M={m} vs M=4096")


def run_tile(d_x, d_w, d_b, M, K, N, out_dtype, tile, split_mode):
    """out of one forced tile and split mode as float32 numpy, or None when this build / GPU lacks the tile."""
    d_out = cp.empty((M, N), dtype=cp.float32 if out_dtype == OUT_FLOAT32 else cp.uint16)
    d_out.view(cp.uint8).fill(POISON_BYTE)
    rc = raw_tile_launch(ptr(d_x), ptr(d_w), ptr(d_b), ptr(d_out), M, K, N, out_dtype, tile, split_mode, stream())
    if rc == CUDA_ERROR_NOT_SUPPORTED and tile in WGMMA_TILES:
        return None
    if rc == CUDA_ERROR_INVALID_VALUE and (tile, split_mode) in MISSING_SPLIT_MODES:
        return None
    assert rc == 0, f"tile {tile} split_mode {split_mode}: cudaError {rc}"
    cp.cuda.get_current_stream().synchronize()
    out = cp.asnumpy(d_out)
    return out if out_dtype == OUT_FLOAT32 else bf16_from_bits(out)


@pytest.mark.parametrize("out_dtype", [OUT_FLOAT32, OUT_BFLOAT16], ids=["out_f32", "out_bf16"])
@pytest.mark.parametrize("M,K,N", [(1, 576, 192), (40, 1000, 1000), (300, 576, 576), (129, 100, 259), (17, 40, 200),
                                   (70, 4096, 64), (130, 2100, 40), (3, 3000, 259)],
                         ids=lambda v: str(v))
def test_batch_invariant_linear_bf16_every_tile_gives_the_same_bits(M, K, N, out_dtype):
    """The launcher picks the tile shape from M, K and N, and how a split K is summed (one block, or a
    cluster); the contract is that neither changes an output's arithmetic. Forcing each tile of an
    instruction family (mma.sync 0 .. 9; wgmma 10 .. 16 where built) in each split mode on the same inputs
    must give identical bits. The last three shapes split K (2, 4 chunks; (3000, 259) on element loads)."""
    x, w, b = bf16_inputs(np.random.default_rng([M, K, N]), M, K, N, True)
    d_x, d_w, d_b = to_device(x), to_device(w), to_device(b)
    split = len(ref_batch_invariant_linear_bf16_chunks(K, N)) > 1
    modes = (SPLIT_ONE_BLOCK, SPLIT_CLUSTER) if split else (SPLIT_PICK,)
    for family in (MMA_TILES, WGMMA_TILES):
        first = None
        for tile in family:
            for mode in modes:
                out = run_tile(d_x, d_w, d_b, M, K, N, out_dtype, tile, mode)
                if out is None:
                    continue
                what = f"tile {tile} split_mode {mode}, M={M} K={K} N={N}"
                if first is None:
                    assert_within_bound(out, x, w, b, out_dtype, what)
                    first = (out, what)
                else:
                    assert_same_bits(out, first[0], f"{what} vs {first[1]}")


@pytest.mark.parametrize("out_dtype", [OUT_FLOAT32, OUT_BFLOAT16], ids=["out_f32", "out_bf16"])
@pytest.mark.parametrize("K", [520, 2304], ids=lambda v: f"K{v}")
def test_batch_invariant_linear_bf16_persistent_tiles_walk_many_units_keep_bits(K, out_dtype):
    """The warp-specialised tiles (14 .. 16) run a persistent grid of two-block clusters: a cluster walks several (row
    pair, column tile) units with one ring whose barrier phases carry over from unit to unit, and the second block
    of the last pair may own rows past M. M = 1100 is 9 row tiles of 128 (the last pair's second tile lies wholly
    past M); N = 4104 is 33 column tiles of 128, 22 of 192 (3 weight blocks of 64 columns: 0 and 2 copied by the
    cluster's first block, 1 by the second; in the last tile, 72 columns wide, block 1 lies partly and block 2
    wholly past N) and 17 of 256, the last 8 columns wide, so with at most 66 clusters resident on an H200 each
    walks 2 or 3 units; K = 520 ends inside a 64-wide k tile; K = 2304 splits into 2 chunks of 1152 (tiles 15 and
    16's one-block split; tile 14 has none). Every output must equal the 64 x 64 wgmma tile's (cp.async ring, one
    block per output tile) bit for bit, and rows 0 .. 2 the same rows computed at M = 3."""
    M, N = 1100, 4104
    x, w, b = bf16_inputs(np.random.default_rng([K, out_dtype, 17]), M, K, N, True)
    d_x, d_w, d_b = to_device(x), to_device(w), to_device(b)
    mode = SPLIT_ONE_BLOCK if len(ref_batch_invariant_linear_bf16_chunks(K, N)) > 1 else SPLIT_PICK
    want = run_tile(d_x, d_w, d_b, M, K, N, out_dtype, 10, mode)
    if want is None:
        pytest.skip("no wgmma tiles in this build / on this GPU")
    assert_within_bound(want[:4], x[:4], w, b, out_dtype, f"K={K}: tile 10, rows 0..3")
    assert_same_bits(run_kernel(x[:3], w, b, out_dtype, d_x=d_x[:3]), want[:3], f"K={K}: rows 0..2 at M=3 vs tile 10")
    for tile in WS_TILES:
        got = run_tile(d_x, d_w, d_b, M, K, N, out_dtype, tile, mode)
        if got is None:
            assert (tile, mode) in MISSING_SPLIT_MODES, f"tile {tile} split_mode {mode}: not run on an sm_90a build"
            continue
        assert_same_bits(got, want, f"K={K} tile {tile} split_mode {mode} vs tile 10")


DECODE_TILES = (0, 1, 9)  # the mma.sync tiles the launcher picks for M <= 16 (PickMmaTile)


@pytest.mark.parametrize("K,N", [(40, 166400), (40, 166401), (2048, 24320)], ids=lambda v: str(v))
def test_batch_invariant_linear_bf16_decode_blocks_walking_several_column_tiles_keep_row_bits(K, N):
    """Decode launches (M <= 16) cap the grid at one wave of resident blocks, and a block then walks several
    column tiles (a cluster split reuses its ring for the chunk sums after each). N = 166400 / 166401 are 2600
    / 2601 64-column tiles (the cp.async path and the element loads), more than a wave of tile 0 unless 2600
    blocks fit on the GPU at once (its 23.5 KB ring: 9 per SM by shared memory, 1188 on the H200);
    (2048, 24320) splits K in 2 chunks over 380 64-column tiles, more than a wave of tile 9 in clusters of 2
    on the H200 (4 per SM: 264). Rows at M = 1, 3 and 16 (the launcher's pick)
    and M = 1 on every decode tile in both split modes must equal the same rows at M = 17 and 64 (other tiles,
    one column tile per block)."""
    rng = np.random.default_rng([K, N, 13])
    x, w, b = bf16_inputs(rng, 64, K, N, True)
    d_x, d_w, d_b = to_device(x), to_device(w), to_device(b)
    wide = run_kernel(x, w, b, d_x=d_x)
    assert_within_bound(wide[:2], x[:2], w, b, OUT_FLOAT32, f"K={K} N={N}: rows 0, 1 at M=64")
    for m in (1, 3, 16, 17):
        assert_same_bits(run_kernel(x[:m], w, b, d_x=d_x[:m]), wide[:m],
                         f"K={K} N={N}: rows 0..{m - 1} at M={m} vs M=64")
    modes = (SPLIT_PICK,)
    if len(ref_batch_invariant_linear_bf16_chunks(K, N)) > 1:
        clusters = int(cp.cuda.Device().compute_capability) >= 90
        modes = (SPLIT_ONE_BLOCK, SPLIT_CLUSTER) if clusters else (SPLIT_ONE_BLOCK,)
    for tile in DECODE_TILES:
        for mode in modes:
            out = run_tile(d_x[:1], d_w, d_b, 1, K, N, OUT_FLOAT32, tile, mode)
            assert_same_bits(out, wide[:1], f"K={K} N={N}: M=1 tile {tile} split_mode {mode} vs M=64")


def wide_range_bf16_inputs(rng, M: int, K: int, N: int):
    """bfloat16 x, weight and bias whose values stress the tensor cores' internal alignment and rounding: each
    element N(0, 1) times 2^e with e uniform in [-60, 30] (products from about 2^-120, float32 subnormal, to 2^60),
    10% exact zeros with random signs, and row 1 of x the negation of row 0 (outputs that cancel exactly)."""
    def spread(shape):
        a = rng.standard_normal(shape) * np.exp2(rng.integers(-60, 31, size=shape))
        a[rng.random(shape) < 0.1] = 0.0
        a = np.where(rng.random(shape) < 0.5, a, -a)
        return ref_bf16_round(a.astype(np.float32))
    x, w, b = spread((M, K)), spread((K, N)), spread((N,))
    if M > 1:
        x[1] = -x[0]
    return x, w, b


@pytest.mark.parametrize("M,K,N", [(20, 512, 64), (5, 4096, 64), (3, 100, 259)], ids=lambda v: str(v))
def test_batch_invariant_linear_bf16_instruction_families_agree_on_wide_range_inputs(M, K, N):
    """On an sm_90a build the launcher computes M <= 16 with mma.sync tiles and larger M with wgmma tiles
    (docs/spec.md §4.8), so batch invariance rests on the two instructions giving the same bits per k step.
    Every tile of both families, both split modes, on inputs built to expose any difference in alignment,
    truncation, subnormals, signed zeros or cancellation (wide_range_bf16_inputs), must agree bit for bit."""
    x, w, b = wide_range_bf16_inputs(np.random.default_rng([M, K, N, 11]), M, K, N)
    d_x, d_w, d_b = to_device(x), to_device(w), to_device(b)
    split = len(ref_batch_invariant_linear_bf16_chunks(K, N)) > 1
    modes = (SPLIT_ONE_BLOCK, SPLIT_CLUSTER) if split else (SPLIT_PICK,)
    first, wgmma_seen = None, False
    for tile in list(MMA_TILES) + list(WGMMA_TILES):
        for mode in modes:
            out = run_tile(d_x, d_w, d_b, M, K, N, OUT_FLOAT32, tile, mode)
            if out is None:
                continue
            wgmma_seen |= tile in WGMMA_TILES
            what = f"tile {tile} split_mode {mode}, M={M} K={K} N={N}"
            if first is None:
                assert not np.isnan(out).any(), f"{what}: NaN from finite inputs"
                first = (out, what)
            else:
                assert_same_bits(out, first[0], f"{what} vs {first[1]}")
    if not wgmma_seen:
        pytest.skip("no wgmma tiles in this build / on this GPU: one instruction family only")


@pytest.mark.parametrize("M,K,N", [(1, 4096, 64), (37, 2100, 40), (300, 3000, 259), (65, 4096, 520)],
                         ids=lambda v: str(v))
def test_batch_invariant_linear_bf16_split_k_is_the_ordered_sum_of_its_chunks(M, K, N):
    """docs/spec.md §4.8: with S > 1 chunks, out = fl32(fl32(p0 + p1) + ...) + bias, where p_c is chunk c's
    own MMA chain from +0. Each chunk run alone (its K slice is shorter than a split needs, so the kernel
    runs it as one chain) gives p_c; summing them in float32 in chunk order must give the split result bit
    for bit. With 4 chunks, summing in reverse must not (so the test can tell the order; with 2 the two
    orders are the same IEEE sum)."""
    chunks = ref_batch_invariant_linear_bf16_chunks(K, N)
    assert len(chunks) > 1, f"({K}, {N}) must split for this test to mean anything"
    x, w, b = bf16_inputs(np.random.default_rng([M, K, N, 5]), M, K, N, True)
    parts = []
    for a, e in chunks:
        assert len(ref_batch_invariant_linear_bf16_chunks(e - a, N)) == 1
        parts.append(run_kernel(np.ascontiguousarray(x[:, a:e]), np.ascontiguousarray(w[a:e]), None))
    total = parts[0]
    for p in parts[1:]:
        total = total + p  # float32 + float32 -> float32, one rounding
    want = total + b[None, :]
    assert_same_bits(run_kernel(x, w, b), want, f"M={M} K={K} N={N}: split output vs the chunks summed in order")
    if len(parts) < 3:
        return
    backwards = parts[-1]
    for p in parts[-2::-1]:
        backwards = backwards + p
    assert (backwards + b[None, :]).view(np.uint32).tolist() != want.view(np.uint32).tolist(), \
        "summing the chunks in reverse gave the same bits everywhere: the order check would prove nothing"


@pytest.mark.parametrize("tile,split_mode", [(-2, -1), (NUM_TILES, -1), (100, -1), (0, -2), (0, 2)])
def test_batch_invariant_linear_bf16_tile_launch_rejects_unknown_tile_or_split_mode(tile, split_mode):
    d = cp.zeros(64, cp.float32)
    rc = raw_tile_launch(ptr(d), ptr(d), None, ptr(d), 2, 8, 8, OUT_FLOAT32, tile, split_mode, stream())
    assert rc == CUDA_ERROR_INVALID_VALUE, \
        f"tile {tile} split_mode {split_mode}: expected cudaErrorInvalidValue, got {rc}"


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
