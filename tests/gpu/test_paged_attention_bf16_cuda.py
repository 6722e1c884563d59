"""paged_attention's bfloat16 tensor-core kernel (specworker_paged_attention_bf16_launch) beyond the shared
cases of test_paged_attention_cuda.py (literal, grid, batch invariance, head dims, which run it for bfloat16):
128-key chunk edges and long histories, the model head layouts (query tiles of 16 / min(group, 16) rows,
head groups past 16 heads per kv head), batch invariance across chunks, splits and query tiles, bsz 128,
the bounds checks of its own (a query tile whose first row is bad), the workspace check, graph capture, and the
same bits on a stream of the caller's own (where, from sm_90, the launches overlap: programmatic dependent launch).

Tolerance: bf16 inputs, float32 scores and sums, P rounded to bf16 for P V, output rounded to bf16, against the
float64 reference: rtol = atol = 8e-3 (tests/gpu/test_paged_attention_cuda.py's bfloat16 tolerance).
"""

import ctypes

import numpy as np
import pytest

from kernel_harness import paged_attention
from tests.gpu.harness import require_gpu
from tests.gpu.paged_attention_device import expect_with_skips, launch, run_cuda, to_device
from tests.paged_attention_case_tests import check_against_reference
from reference.cases.paged_attention import invariance_runs, literal_case, make_attention_case, pack_case, random_slot

cp = require_gpu()

TOL = dict(rtol=8e-3, atol=8e-3)
CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE = 0, 1
# (num_heads, num_kv_heads): SmolLM2 (group 3: tiles of 5 rows), Llama-3-8B (group 4), multi-query 32:1
# (two head groups of 16), group 20 (head groups of 16 and 4), group 6 (tiles of 2 rows, 12 of 16 MMA rows).
LAYOUTS = [(9, 3), (32, 8), (32, 1), (20, 1), (12, 2)]


def _check(case):
    check_against_reference(run_cuda(case, "bfloat16"), case, TOL)


def _slots(rng, specs, heads, head_dim):
    return [random_slot(rng, dec, length, *heads, head_dim, "bfloat16") for dec, length in specs]


# Chunks of 128 keys, tiles of 64: the last key of chunk 0 (127), the first of chunk 1 (128), verify steps across
# an edge (124..127, 126..129, 254..257), the middle tile edge (63, 64), a long history (4000: 32 chunks).
@pytest.mark.parametrize("dec", [0, 60, 63, 124, 126, 127, 128, 254, 511, 4000])
@pytest.mark.parametrize("heads, head_dim", [((9, 3), 64), ((32, 8), 128)])
def test_paged_attention_bf16_cuda_chunk_edges(dec, heads, head_dim):
    rng = np.random.default_rng(dec + head_dim)
    slots = _slots(rng, [(dec, 4), (dec + 1, 1), (0, 0), (max(dec - 3, 0), 7), (dec, 1)], heads, head_dim)
    _check(pack_case(rng, slots, 16, garbage="nan" if dec % 2 else "large", dtype="bfloat16"))


@pytest.mark.parametrize("heads", LAYOUTS, ids=lambda h: f"h{h[0]}kv{h[1]}")
@pytest.mark.parametrize("kind", ["mixed", "all_prefill", "all_decode", "stopped"])
def test_paged_attention_bf16_cuda_head_layouts(heads, kind):
    case = make_attention_case(sum(heads) + len(kind), 17, kind, block_size=16, head_dim=64, heads=heads,
                               dtype="bfloat16", max_model_len=80)
    _check(case)


@pytest.mark.parametrize("kind", ["mixed", "all_decode", "stopped"])
def test_paged_attention_bf16_cuda_batch_128(kind):
    """bsz 128 (the replay's largest batch), SmolLM2 heads, histories up to 480 positions (four chunks)."""
    case = make_attention_case(128 + len(kind), 128, kind, block_size=16, head_dim=64, heads=(9, 3),
                               dtype="bfloat16", max_model_len=120)
    _check(case)


def test_paged_attention_bf16_cuda_bsz_1():
    rng = np.random.default_rng(1)
    for dec, length in [(0, 1), (0, 37), (300, 1), (300, 4), (700, 3)]:
        _check(pack_case(rng, _slots(rng, [(dec, length)], (32, 8), 128), 64, pad_rows=0, dtype="bfloat16"))


# (block_size, head_dim, heads, dec, length): verify steps across a chunk edge and deep in a long history,
# prefill chunks whose split (length // 3) is not a multiple of the query tile, head groups past 16.
INVARIANCE = [
    (16, 64, (9, 3), 125, 4),
    (64, 128, (32, 8), 1000, 4),
    (16, 64, (9, 3), 0, 40),
    (16, 128, (32, 8), 250, 45),
    (16, 64, (32, 1), 510, 4),
    (16, 32, (20, 1), 100, 3),
]


@pytest.mark.parametrize("case", INVARIANCE, ids=lambda c: "-".join(map(str, c)))
def test_paged_attention_bf16_cuda_is_batch_invariant(case):
    """Alone, one query per step (decode on the kernel's own cache writes), among verify rows, in batches of 17
    at three slot indices with different T_cap (so different split counts), split into two chunked steps:
    identical bits."""
    block_size, head_dim, heads, dec, length = case
    runs = invariance_runs(lambda c: run_cuda(c, "bfloat16"), seed=dec + length, block_size=block_size,
                           head_dim=head_dim, heads=heads, dtype="bfloat16", dec=dec, length=length)
    base = runs.pop("alone")
    assert np.isfinite(base).all()
    for name, rows in runs.items():
        assert np.array_equal(rows, base), f"{name}: max |diff| {np.abs(rows - base).max()}"


def test_paged_attention_bf16_cuda_split_count_changes_no_bit():
    """The same slot with T_cap = its 4 rows (many splits per block) and T_cap = 4 + 3000 padding rows (one
    split: every block walks all chunks): the splits pick which block computes a chunk, never how."""
    rng = np.random.default_rng(5)
    slot = _slots(rng, [(2000, 4)], (32, 8), 128)
    few = pack_case(np.random.default_rng(0), slot, 16, pad_rows=0, dtype="bfloat16")
    many = pack_case(np.random.default_rng(0), slot, 16, pad_rows=3000, dtype="bfloat16")
    a, b = run_cuda(few, "bfloat16")[0], run_cuda(many, "bfloat16")[0]
    assert np.array_equal(a[:4], b[:4])
    assert (b[4:] == 0).all()


def test_paged_attention_bf16_cuda_is_deterministic():
    case = make_attention_case(3, 33, "mixed", block_size=16, head_dim=128, heads=(32, 8), dtype="bfloat16",
                               max_model_len=200)
    first = run_cuda(case, "bfloat16")
    for _ in range(3):
        for x, y in zip(first, run_cuda(case, "bfloat16")):
            assert np.array_equal(x, y, equal_nan=True)


# --- bounds checks -------------------------------------------------------------------------------------

def _case_with_tiles():
    """Slot 0: verify, 4 queries at positions 300..303 (SmolLM2 heads: one query tile of 5 rows); slot 1:
    prefill of 12 tokens (tiles of rows 0-4, 5-9, 10-11); slot 2: decode."""
    rng = np.random.default_rng(11)
    slots = _slots(rng, [(300, 4), (0, 12), (40, 1)], (9, 3), 64)
    return pack_case(rng, slots, 16, garbage="large", dtype="bfloat16")


def test_paged_attention_bf16_cuda_missing_history_block():
    """block_tables[0, 3] = -1 (positions 48..63 of slot 0): every row of slot 0 reads it and is zero; the
    other slots and slot 0's own cache writes are unaffected."""
    case = _case_with_tiles()
    want = expect_with_skips(case, zero_rows=range(4))
    case.block_tables[0, 3] = -1
    check_against_reference(run_cuda(case, "bfloat16"), case, TOL, want)


def test_paged_attention_bf16_cuda_bad_first_row_of_a_query_tile():
    """Row 9 (slot 1's token 5, the first of its second query tile) gets batch id -1: that row is zero and not
    written, and so are rows 10..13 of its tile (documented: the tile is not computed); rows 4..8 and 14, 15
    (the first and third tiles) are unaffected. Rows of other tiles never read positions 5..9 past their own."""
    case = _case_with_tiles()
    block = int(case.block_tables[1, 0])
    want = expect_with_skips(case, zero_rows=range(9, 14), unwritten=[(block, 5)])
    case.batch_id_per_token[9] = -1
    # Rows 10..13 (positions 6..9) are still written by the append; rows 14, 15 read key 5, which was not.
    out, key_cache, value_cache = run_cuda(case, "bfloat16")
    np.testing.assert_array_equal(out[9:14], 0)
    np.testing.assert_allclose(out[:9], want[0][:9], **TOL)
    np.testing.assert_allclose(out[16], want[0][16], **TOL)
    np.testing.assert_array_equal(key_cache[block, :, 5], case.key_cache[block, :, 5])
    np.testing.assert_array_equal(key_cache[block, :, 6:10], want[1][block, :, 6:10])


def test_paged_attention_bf16_cuda_overlapped_launches_same_bits():
    """On a non-blocking stream (from sm_90 the chunk and combine kernels are programmatic dependent launches: each
    starts while the kernel before it drains) the output and caches are the bits of a launch on the default stream
    (no overlap): decode and verify rows over several chunks, this step's keys read back, a missing history block,
    a bad first row of a query tile."""
    rng = np.random.default_rng(21)
    long_verify = pack_case(rng, _slots(rng, [(2000, 4), (130, 1), (0, 9), (300, 4)], (32, 8), 128), 64,
                            garbage="nan", dtype="bfloat16")
    missing = _case_with_tiles()
    missing.block_tables[0, 3] = -1
    bad_first = _case_with_tiles()
    bad_first.batch_id_per_token[9] = -1
    cases = [make_attention_case(128, 128, "mixed", block_size=16, head_dim=64, heads=(9, 3), dtype="bfloat16",
                                 max_model_len=120), long_verify, missing, bad_first]
    s = cp.cuda.Stream(non_blocking=True)
    for i, case in enumerate(cases):
        want = run_cuda(case, "bfloat16")
        with s:
            got = run_cuda(case, "bfloat16")
        for name, x, y in zip(("out", "key_cache", "value_cache"), want, got):
            assert np.array_equal(x, y, equal_nan=True), f"case {i}: {name}"


def _on_stream(case, s):
    with s:
        return run_cuda(case, "bfloat16")


def _capture(case, s, workspace_fill=None):
    """The launcher on the case's arrays (bf16 bits as uint16, out zero) recorded into a graph on stream s. Returns
    (rc, graph, arrays)."""
    arrays = {n: to_device(getattr(case, n), "bfloat16") for n in ("q", "k", "v", "key_cache", "value_cache")}
    arrays.update({n: cp.asarray(getattr(case, n).astype(np.int32)) for n in
                   ("block_tables", "cu_seqlens_q", "seq_lens_decoder", "seq_lens_this_time", "batch_id_per_token")})
    arrays["out"] = cp.zeros(arrays["q"].shape, dtype=cp.uint16)
    token_cap, num_heads, head_dim = case.q.shape
    sizes = dict(token_cap=token_cap, bsz=case.seq_lens_this_time.shape[0], num_heads=num_heads,
                 num_kv_heads=case.k.shape[1], head_dim=head_dim, num_blocks=case.key_cache.shape[0],
                 block_size=case.block_size, max_blocks=case.block_tables.shape[1])
    workspace = paged_attention.bf16_workspace(cp, sizes)
    if workspace_fill is not None:
        workspace.fill(workspace_fill)
    cp.cuda.get_current_stream().synchronize()
    with s:
        s.begin_capture()
        rc = paged_attention.launch(cp, arrays, sizes, case.scale, "bfloat16", ctypes.c_void_p(s.ptr), workspace)
        graph = s.end_capture()
    return rc, graph, arrays


# A verify slot at dec = 128 nc - 137 and a decode slot at dec / 2 (block 64, no padding rows): 2 nc table columns,
# so nc chunks of 128 and, with T_cap = 5, nc splits. On sm_90 and a stream of the caller's own: Llama-3-8B heads,
# nc = 5 .. 9 take two launches (200 .. 360 chunk blocks), the others three (head_dim 128 never takes the fused
# launch); SmolLM2 heads (head_dim 64, 15 chunk blocks a split), nc = 9 .. 12 take the fused launch (135 .. 180
# blocks, a cluster of nc blocks per query tile), 13 .. 16 two launches.
SPLIT_CASES = [("llama", nc) for nc in range(2, 19)] + [("smollm2", nc) for nc in range(9, 17)]
SPLIT_MODELS = {"llama": (100, (32, 8), 128), "smollm2": (200, (9, 3), 64)}  # seed base, heads, head_dim


@pytest.mark.parametrize("model,nc", SPLIT_CASES)
def test_paged_attention_bf16_cuda_own_stream_same_bits_at_every_split_count(model, nc):
    """On a stream of the caller's own (sm_90: programmatic launches, two launches, or the fused launch of append,
    chunks and the chunk merge by the tile's cluster) the output and caches are the bits of the three plain launches
    (default stream), verify and decode rows over nc chunks. The fused merge runs in chunk order whichever block of
    the cluster finishes last."""
    seed, heads, head_dim = SPLIT_MODELS[model]
    rng = np.random.default_rng(seed + nc)
    dec = 128 * nc - 137
    case = pack_case(rng, _slots(rng, [(dec, 4), (dec // 2, 1)], heads, head_dim), 64, pad_rows=0, garbage="nan",
                     dtype="bfloat16")
    assert case.block_tables.shape[1] == 2 * nc
    want = run_cuda(case, "bfloat16")
    got = _on_stream(case, cp.cuda.Stream(non_blocking=True))
    for name, x, y in zip(("out", "key_cache", "value_cache"), want, got):
        assert np.array_equal(x, y, equal_nan=True), f"{model} nc {nc}: {name}"
    check_against_reference(got, case, TOL)


# Two graphs on a stream of their own (SmolLM2 heads; verify, decode, a stopped slot, a prefill across the chunk edge
# 128): T_cap 7 over 9 chunks, 9 splits of 21 blocks, on sm_90 the fused launch; T_cap 17 over 13 chunks, 13 splits,
# three launches since issue22i (query tiles whose rows read this step's keys of an earlier tile).
GRAPH_CASES = {"fused": (32, [(1000, 3), (129, 1), (0, 0), (126, 3)], 7),
               "three_launches": (31, [(1000, 4), (129, 1), (0, 0), (124, 8), (1500, 1)], None)}


@pytest.mark.parametrize("name", GRAPH_CASES)
def test_paged_attention_bf16_cuda_graph_replays_same_bits(name):
    """A graph captured on a stream of its own and replayed 5 times gives the three launches' bits (default stream)
    every time: the append writes the same cache rows again, and the workspace is not assumed clean."""
    seed, slots, rows = GRAPH_CASES[name]
    rng = np.random.default_rng(seed)
    case = pack_case(rng, _slots(rng, slots, (9, 3), 64), 64, pad_rows=0 if rows else 3, garbage="nan",
                     dtype="bfloat16")
    if rows:
        assert case.q.shape[0] == rows and case.block_tables.shape[1] == 18  # 9 chunks
    want = run_cuda(case, "bfloat16")
    s = cp.cuda.Stream(non_blocking=True)
    if not hasattr(s, "begin_capture"):
        pytest.skip("this CuPy has no stream capture (cupy.cuda.Stream.begin_capture)")
    rc, graph, arrays = _capture(case, s, workspace_fill=np.nan)
    assert rc == CUDA_SUCCESS
    for i in range(5):
        arrays["out"].fill(0xFFFF)
        graph.launch(s)
        s.synchronize()
        out = (cp.asnumpy(arrays["out"]).astype(np.uint32) << 16).view(np.float32)
        assert np.array_equal(out, want[0], equal_nan=True), f"replay {i}"
    for buffer, i in (("key_cache", 1), ("value_cache", 2)):
        got = (cp.asnumpy(arrays[buffer]).astype(np.uint32) << 16).view(np.float32)
        assert np.array_equal(got, want[i], equal_nan=True), f"{name}: {buffer}"


def test_paged_attention_bf16_cuda_rejects_small_workspace():
    case = literal_case()
    need = paged_attention.bf16_workspace_bytes(5, 2, 2, 2, 3)
    assert need == 5 * 2 * 1 * (2 + 2) * 4
    rc, *_ = launch(case, "bfloat16", workspace=cp.empty(need // 4 - 1, dtype=cp.float32))
    assert rc == CUDA_ERROR_INVALID_VALUE


@pytest.mark.parametrize("what, dims", [
    ("head_dim 0", dict(head_dim=0)),
    ("head_dim 257", dict(head_dim=257)),
    ("gqa", dict(num_kv_heads=3)),
    ("num_heads 0", dict(num_heads=0)),
    ("block_size 0", dict(block_size=0)),
    ("negative token_cap", dict(token_cap=-1)),
    ("negative bsz", dict(bsz=-1)),
])
def test_paged_attention_bf16_cuda_rejects_bad_sizes(what, dims):
    rc, *_ = launch(literal_case(), "bfloat16", dims=dims, workspace=cp.empty(1 << 16, dtype=cp.float32))
    assert rc == CUDA_ERROR_INVALID_VALUE, what


def test_paged_attention_bf16_cuda_captures_in_cuda_graph():
    """No allocation and no host sync in the launcher (workspace given): it records into a graph whose replay
    gives the result of a direct call."""
    case = make_attention_case(9, 5, "mixed", block_size=16, head_dim=64, heads=(9, 3), dtype="bfloat16",
                               max_model_len=200)
    want = run_cuda(case, "bfloat16")
    s = cp.cuda.Stream(non_blocking=True)
    if not hasattr(s, "begin_capture"):
        pytest.skip("this CuPy has no stream capture (cupy.cuda.Stream.begin_capture)")
    rc, graph, arrays = _capture(case, s)
    assert rc == CUDA_SUCCESS
    assert not cp.asnumpy(arrays["out"]).any()  # captured, not run
    graph.launch(s)
    s.synchronize()
    out = (cp.asnumpy(arrays["out"]).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(out, want[0])


# Decode histories around the chunk edges (127 / 128, 255 / 256), inside one chunk, and up to 16 chunks.
DECODE_DECS = [0, 1, 62, 127, 128, 129, 255, 383, 640, 1023, 1500, 2047]


@pytest.mark.parametrize("heads, head_dim", [((9, 3), 64), ((32, 8), 128)], ids=["smollm2", "llama3"])
def test_paged_attention_bf16_cuda_decode_rows_same_bits_alone_batched_and_per_stream(heads, head_dim):
    """Decode steps (one query per slot, block size 64): each slot's row has the same bits in a batch of 37 slots on
    the default stream (three launches) and on a stream of its own (sm_90: the chunk kernel appends, then the
    combine), in a batch of its first 5 slots, and alone (T_cap 1: many splits), and agrees with the reference."""
    rng = np.random.default_rng(head_dim)
    decs = [DECODE_DECS[i % len(DECODE_DECS)] + 7 * (i // len(DECODE_DECS)) for i in range(37)]
    slots = _slots(rng, [(dec, 1) for dec in decs], heads, head_dim)
    batch = pack_case(rng, slots, 64, pad_rows=0, garbage="nan", dtype="bfloat16")
    s = cp.cuda.Stream(non_blocking=True)
    want = run_cuda(batch, "bfloat16")
    got = _on_stream(batch, s)
    for name, x, y in zip(("out", "key_cache", "value_cache"), want, got):
        assert np.array_equal(x, y, equal_nan=True), name
    check_against_reference(got, batch, TOL)
    first5 = _on_stream(pack_case(rng, slots[:5], 64, pad_rows=0, garbage="nan", dtype="bfloat16"), s)[0]
    assert np.array_equal(first5, got[0][:5])
    for i in (0, 3, 4, 5, 11, 20, 36):
        alone = _on_stream(pack_case(rng, [slots[i]], 64, pad_rows=0, garbage="nan", dtype="bfloat16"), s)[0]
        assert np.array_equal(alone[0], got[0][i]), f"slot {i} (dec {decs[i]})"


# Histories whose last tile is cut at different offsets (1, 63, 64, 65, 127, 191 keys ...), decode and verify rows,
# one spanning 8 chunks; the cache past each slot's keys is NaN.
WHOLE_TILE_SPECS = [(0, 1), (62, 1), (63, 1), (64, 1), (100, 4), (126, 4), (190, 1), (255, 4), (300, 1), (1000, 4)]


@pytest.mark.parametrize("heads, head_dim", [((9, 3), 64), ((32, 8), 128)], ids=["smollm2", "llama3"])
def test_paged_attention_bf16_cuda_whole_tile_copies_same_bits_as_per_key_copies(heads, head_dim):
    """Block sizes 64 and 128 with head_dim 64 / 128 copy a tile of 64 keys as whole rows (index math once per tile;
    on a stream of the caller's own also in the kernel that appends, for tiles before this step's keys); block size
    16 looks each key's block up. Both give the same bits, on the default stream and on a stream of its own, and
    the keys of a cut last tile are zero-filled (a missed fill reads the NaN past the history)."""
    rng = np.random.default_rng(40 + head_dim)
    slots = _slots(rng, WHOLE_TILE_SPECS, heads, head_dim)
    per_key = run_cuda(pack_case(np.random.default_rng(0), slots, 16, pad_rows=0, garbage="nan", dtype="bfloat16"),
                       "bfloat16")[0]
    assert np.isfinite(per_key).all()
    s = cp.cuda.Stream(non_blocking=True)
    for block_size in (64, 128):
        case = pack_case(np.random.default_rng(block_size), slots, block_size, pad_rows=0, garbage="nan",
                         dtype="bfloat16")
        for name, got in (("default stream", run_cuda(case, "bfloat16")), ("own stream", _on_stream(case, s))):
            diff = np.abs(got[0] - per_key).max()
            assert np.array_equal(got[0], per_key), f"block {block_size}, {name}: max |diff| {diff}"
        check_against_reference(got, case, TOL)


# Unusual head dims in the chunk-state combine: 1 and 33 (no 16-byte copies or reads), 80 (16-byte reads, lanes past
# the columns idle), 256 (two columns a thread, or a second pass of a warp's lanes). Slot histories of 2 .. 6 chunks
# (13 table columns of 64: CombineWarpKernel reads 8 chunk states of a lane ahead) and of 2 .. 33 chunks (16 ahead,
# then one at a time; 4200: a second step of 32 chunks' m and l; CombineKernel: 17 and more through shared memory).
ACROSS_CHUNKS = {"short": [(130, 1), (700, 4), (254, 3), (383, 2)],
                 "long": [(130, 1), (700, 4), (2040, 1), (2100, 2), (4200, 1)]}


@pytest.mark.parametrize("histories", ACROSS_CHUNKS)
@pytest.mark.parametrize("head_dim", [1, 33, 80, 256])
def test_paged_attention_bf16_cuda_head_dims_across_chunks(head_dim, histories):
    """Decode and verify rows over several chunks of 128 keys at unusual head dims: the reference within TOL; on a
    stream of its own (sm_90: programmatic launches, the chunk kernel appends) the default stream's bits; behind 2000
    padding rows (token_cap * heads past one wave of CombineKernel's blocks: the launcher takes CombineWarpKernel) the
    same bits, padding rows zero."""
    rng = np.random.default_rng(300 + head_dim)
    slots = _slots(rng, ACROSS_CHUNKS[histories], (4, 1), head_dim)
    case = pack_case(np.random.default_rng(0), slots, 64, pad_rows=0, garbage="nan", dtype="bfloat16")
    want = run_cuda(case, "bfloat16")
    check_against_reference(want, case, TOL)
    s = cp.cuda.Stream(non_blocking=True)
    got = _on_stream(case, s)
    for name, x, y in zip(("out", "key_cache", "value_cache"), want, got):
        assert np.array_equal(x, y, equal_nan=True), f"head_dim {head_dim}, {histories}: {name}"
    padded = pack_case(np.random.default_rng(0), slots, 64, pad_rows=2000, garbage="nan", dtype="bfloat16")
    rows = case.q.shape[0]
    for name, out in (("default stream", run_cuda(padded, "bfloat16")[0]), ("own stream", _on_stream(padded, s)[0])):
        assert np.array_equal(out[:rows], want[0]), f"head_dim {head_dim}, {histories}, 2000 padding rows, {name}"
        assert (out[rows:] == 0).all(), f"head_dim {head_dim}, {histories}: a padding row is not zero ({name})"
