"""paged_attention's CUDA kernels against ref_paged_attention (CuPy + ctypes, no Paddle).

The same cases as tests/ops (literal three slots, the randomized grid, batch invariance with exact
bits) plus what only the kernels have: bsz 256 and long contexts (many 32-key tiles), odd and
large head dims, every dtype on the full grid, CUDA-graph capture, and the bounds checks that
replace the CPU op's errors: a row the CPU op would refuse gets a zero output row and writes
nothing, every other row is unaffected. The output buffer starts as a poison pattern, so a row
the kernel forgets to write shows up.

bfloat16 runs on its tensor-core launcher (specworker_paged_attention_bf16_launch, dispatched like the Paddle
binding does); tests/gpu/test_paged_attention_bf16_cuda.py adds what only that kernel has (chunk edges,
splits, query tiles). Tolerance: float32 online softmax in 32-key tiles against the float64 reference,
rtol = atol = 1e-5; float16 / bfloat16 outputs within their rounding (inputs are already rounded to the dtype).
"""

import ctypes
import dataclasses

import numpy as np
import pytest

from kernel_harness.paged_attention import DTYPE_CODE
from tests.gpu.harness import ptr, raw_launcher, require_gpu, stream
from tests.gpu.paged_attention_device import expect_with_skips, launch, run_cuda
from tests.paged_attention_case_tests import (  # noqa: F401  written once, also run on the Paddle op
    check_against_reference, test_paged_attention_is_batch_invariant, test_paged_attention_literal_three_slots,
    test_paged_attention_matches_reference,
)
from reference.cases.paged_attention import (
    LITERAL_OUT,
    AttentionCase,
    case_id,
    grid_cases,
    literal_case,
    literal_caches_after,
    make_attention_case,
    pack_case,
    random_slot,
)

cp = require_gpu()

NAME = "specworker_paged_attention_launch"
CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE = 0, 1
TOL = {"float32": dict(rtol=1e-5, atol=1e-5), "float16": dict(rtol=1e-3, atol=1e-3),
       "bfloat16": dict(rtol=8e-3, atol=8e-3)}
INVARIANCE = [
    (16, 64, (4, 2), 37, 4),
    (64, 128, (8, 1), 61, 4),
    (16, 32, (8, 1), 0, 40),
    (64, 64, (4, 2), 21, 45),
    (16, 128, (32, 8), 1000, 4),  # a long history: 32 tiles before the verify queries
]


def _raw():
    return raw_launcher(NAME)


def _check_against_reference(case: AttentionCase, dtype: str, want=None):
    check_against_reference(run_cuda(case, dtype), case, TOL[dtype], want)


@pytest.fixture
def run():
    """The backend of the shared tests (tests/paged_attention_case_tests.py): the kernel, the output
    starting as NaN bytes and the launcher's return code checked."""
    return run_cuda


@pytest.fixture
def tol():
    return TOL


@pytest.fixture(params=[(c, dtype) for c in grid_cases() for dtype in DTYPE_CODE],
                ids=lambda p: f"{case_id(p[0])}-{p[1]}")
def reference_grid(request):
    """(grid case, dtype): every grid case in every dtype."""
    return request.param


@pytest.fixture(params=[(*c, dtype) for c in INVARIANCE for dtype in DTYPE_CODE], ids=lambda p: "-".join(map(str, p)))
def invariance_grid(request):
    """(block_size, head_dim, heads, dec, length, dtype): INVARIANCE in every dtype."""
    return request.param


# --- randomized grid ----------------------------------------------------------------------------------

@pytest.mark.parametrize("bsz, kind", [(256, "mixed"), (256, "all_decode"), (300, "stopped")])
def test_paged_attention_cuda_large_batch(bsz, kind):
    case = make_attention_case(bsz, bsz, kind, block_size=16, head_dim=128, heads=(8, 2), max_model_len=96)
    _check_against_reference(case, "float32")


# head_dim: odd (lanes past head_dim idle), 80 (not a multiple of 32), 256 (two dims per thread, the maximum).
@pytest.mark.parametrize("head_dim", [1, 33, 80, 256])
@pytest.mark.parametrize("dtype", list(DTYPE_CODE))
def test_paged_attention_cuda_head_dims(head_dim, dtype):
    case = make_attention_case(head_dim, 17, "mixed", block_size=16, head_dim=head_dim, heads=(4, 1), dtype=dtype)
    _check_against_reference(case, dtype)


@pytest.mark.parametrize("dec", [0, 31, 32, 33, 4000])
def test_paged_attention_cuda_long_context_and_tile_edges(dec):
    """Keys in 32-key tiles: positions just before, at and after a tile edge, and a long history
    (125 tiles) where the online-softmax rescaling runs many times; 32 query heads on 8 kv heads."""
    rng = np.random.default_rng(dec)
    slots = [random_slot(rng, dec, 4, 32, 8, 64), random_slot(rng, dec + 1, 1, 32, 8, 64),
             random_slot(rng, 0, 0, 32, 8, 64), random_slot(rng, max(dec - 5, 0), 40, 32, 8, 64)]
    _check_against_reference(pack_case(rng, slots, 64), "float32")


def test_paged_attention_cuda_is_deterministic():
    case = make_attention_case(5, 64, "mixed", block_size=16, head_dim=128, heads=(8, 1))
    first = run_cuda(case)
    for _ in range(3):
        again = run_cuda(case)
        for a, b in zip(first, again):
            assert np.array_equal(a, b, equal_nan=True)


# --- bounds checks (the CPU op raises; the kernels write zero rows and skip writes) --------------------

def _mixed_case(seed=0):
    """Slot 0: decode with Dec 30 and 4 queries at positions 30..33 (blocks 1 and 2 of size 16);
    slots 1, 2: random neighbours; slot 3: prefill of 5 tokens."""
    rng = np.random.default_rng(seed)
    slots = [random_slot(rng, 30, 4, 4, 2, 32), random_slot(rng, 50, 2, 4, 2, 32), random_slot(rng, 7, 3, 4, 2, 32),
             random_slot(rng, 0, 5, 4, 2, 32)]
    return pack_case(rng, slots, 16, garbage="large")


def test_paged_attention_cuda_missing_block_of_new_tokens():
    """block_tables[0, 2] = -1 (positions 32, 33): rows 2, 3 of slot 0 are zeros and not written;
    rows 0, 1 (positions 30, 31 in block 1) are computed and written as usual."""
    case = _mixed_case()
    lost = int(case.block_tables[0, 2])
    want = expect_with_skips(case, zero_rows=(2, 3), unwritten=[(lost, 0), (lost, 1)])
    case.block_tables[0, 2] = -1
    _check_against_reference(case, "float32", want)


@pytest.mark.parametrize("bad", [-1, -7, "num_blocks"])
def test_paged_attention_cuda_missing_block_of_history(bad):
    """A history block outside [0, num_blocks): every row of slot 0 reads it, so all are zeros;
    their own positions are still written (their blocks are valid)."""
    case = _mixed_case()
    want = expect_with_skips(case, zero_rows=range(4))
    case.block_tables[0, 0] = case.key_cache.shape[0] if bad == "num_blocks" else bad
    _check_against_reference(case, "float32", want)


def test_paged_attention_cuda_position_past_table_capacity():
    """seq_lens_decoder[2] pushes slot 2 (rows 6..8) past max_blocks_per_seq * block_size: zero
    rows, and its positions 7..9 are not written."""
    case = _mixed_case()
    block = int(case.block_tables[2, 0])
    want = expect_with_skips(case, zero_rows=(6, 7, 8), unwritten=[(block, 7), (block, 8), (block, 9)])
    case.seq_lens_decoder[2] = case.block_tables.shape[1] * case.block_size
    _check_against_reference(case, "float32", want)


def test_paged_attention_cuda_negative_decoder_length():
    """seq_lens_decoder[1] < 0: slot 1's rows 4, 5 are zeros and its positions 50, 51 not written."""
    case = _mixed_case()
    block = int(case.block_tables[1, 50 // 16])
    want = expect_with_skips(case, zero_rows=(4, 5), unwritten=[(block, 50 % 16), (block, 51 % 16)])
    case.seq_lens_decoder[1] = -3
    _check_against_reference(case, "float32", want)


@pytest.mark.parametrize("bad_id", [-1, 4, 99])
def test_paged_attention_cuda_bad_batch_id(bad_id):
    """The last row of slot 0 (position 33) with batch id -1, bsz or beyond: that row is zero and
    not written; the slot's other rows do not read position 33, so they are unaffected."""
    case = _mixed_case()
    block = int(case.block_tables[0, 2])
    want = expect_with_skips(case, zero_rows=(3,), unwritten=[(block, 1)])
    case.batch_id_per_token[3] = bad_id
    _check_against_reference(case, "float32", want)


def test_paged_attention_cuda_local_index_past_seq_lens_this_time():
    """seq_lens_this_time[3] = 2 while five rows carry batch id 3: rows 2..4 of the slot are zero
    and not written (positions 2..4 of its block)."""
    case = _mixed_case()
    block = int(case.block_tables[3, 0])
    want = expect_with_skips(case, zero_rows=(11, 12, 13), unwritten=[(block, 2), (block, 3), (block, 4)])
    case.seq_lens_this_time[3] = 2
    _check_against_reference(case, "float32", want)


@pytest.mark.parametrize("what, dims", [
    ("head_dim 0", dict(head_dim=0)),
    ("head_dim 257", dict(head_dim=257)),
    ("gqa", dict(num_kv_heads=3)),
    ("num_heads 0", dict(num_heads=0)),
    ("block_size 0", dict(block_size=0)),
    ("negative token_cap", dict(token_cap=-1)),
    ("negative bsz", dict(bsz=-1)),
    ("negative num_blocks", dict(num_blocks=-1)),
])
def test_paged_attention_cuda_rejects_bad_sizes(what, dims):
    rc, _, _, _ = launch(literal_case(), dims=dims)
    assert rc == CUDA_ERROR_INVALID_VALUE, what


def test_paged_attention_cuda_rejects_unknown_dtype():
    d = [cp.asarray(np.zeros(64, np.float32)) for _ in range(11)]
    rc = _raw()(*map(ptr, d), 5, 3, 2, 1, 2, 5, 2, 3, ctypes.c_float(1.0), 3, stream())
    assert rc == CUDA_ERROR_INVALID_VALUE


def test_paged_attention_cuda_empty_step_launches_nothing():
    case = literal_case()
    case = dataclasses.replace(case, q=case.q[:0], k=case.k[:0], v=case.v[:0],
                               batch_id_per_token=case.batch_id_per_token[:0],
                               cu_seqlens_q=np.zeros(4, np.int32), seq_lens_this_time=np.zeros(3, np.int32))
    rc, out, key_cache, _ = launch(case)
    assert rc == CUDA_SUCCESS and out.shape == (0, 2, 2)
    np.testing.assert_array_equal(key_cache, case.key_cache)


def test_paged_attention_cuda_captures_in_cuda_graph():
    """No allocation and no host sync inside the launcher: it records into a CUDA graph, and the
    replayed graph gives the literal result."""
    case = literal_case()
    s = cp.cuda.Stream(non_blocking=True)
    if not hasattr(s, "begin_capture"):
        pytest.skip("this CuPy has no stream capture (cupy.cuda.Stream.begin_capture)")
    floats = {n: cp.asarray(getattr(case, n)) for n in ("q", "k", "v", "key_cache", "value_cache")}
    ints = [cp.asarray(getattr(case, n)) for n in ("block_tables", "cu_seqlens_q", "seq_lens_decoder",
                                                    "seq_lens_this_time", "batch_id_per_token")]
    out = cp.full(case.q.shape, 3.0, dtype=cp.float32)
    cp.cuda.get_current_stream().synchronize()
    with s:
        s.begin_capture()
        rc = _raw()(*(ptr(floats[n]) for n in ("q", "k", "v", "key_cache", "value_cache")), *map(ptr, ints), ptr(out),
                    5, 3, 2, 1, 2, 5, 2, 3, ctypes.c_float(1.0), 0, ctypes.c_void_p(s.ptr))
        graph = s.end_capture()
    assert rc == CUDA_SUCCESS
    np.testing.assert_array_equal(cp.asnumpy(out), np.full(case.q.shape, 3.0, np.float32))  # captured, not run
    graph.launch(s)
    s.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(out), LITERAL_OUT)
    want_k, _ = literal_caches_after(case)
    np.testing.assert_array_equal(cp.asnumpy(floats["key_cache"]), want_k)
