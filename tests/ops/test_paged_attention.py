"""paged_attention on CPU: the literal three-slot step, the randomized grid against
ref_paged_attention (outputs within tolerance, caches exactly), batch invariance (exact bits),
and the argument / index checks, which must leave the caches untouched.

Tolerance: the CPU op accumulates in float64 and rounds once, so float32 outputs are within an
ulp or two of the float64 reference (rtol = atol = 1e-6); float16 / bfloat16 outputs within their
rounding (the reference reads the same rounded inputs).
"""

import dataclasses

import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import paged_attention
from tests.paged_attention_case_tests import (  # noqa: F401  written once, also run on the CUDA kernel
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
)
from reference.paged_attention import ref_paged_attention

TOL = {"float32": dict(rtol=1e-6, atol=1e-6), "float16": dict(rtol=1e-3, atol=1e-3),
       "bfloat16": dict(rtol=8e-3, atol=8e-3)}
FLOATS = ("q", "k", "v", "key_cache", "value_cache")
INVARIANCE = [
    # (block_size, head_dim, heads, dec, length): verify steps (k + 1 = 4 queries) across a block
    # edge, then prefill chunks (fresh and chunked) of many queries.
    (16, 64, (4, 2), 37, 4),
    (64, 128, (8, 1), 61, 4),
    (16, 32, (8, 1), 0, 40),
    (64, 64, (4, 2), 21, 45),
]


def _tensors(case: AttentionCase, dtype: str = "float32") -> dict:
    """The case's inputs as CPU tensors, float ones in `dtype`."""
    out = {}
    for f in dataclasses.fields(case):
        value = getattr(case, f.name)
        if isinstance(value, np.ndarray):
            t = paddle.to_tensor(value)
            out[f.name] = t.astype(dtype) if f.name in FLOATS else t
    return out


def run_op(case: AttentionCase, dtype: str = "float32", **kw):
    """Runs the op; returns (out, key_cache, value_cache) after the call, as float32 numpy."""
    t = _tensors(case, dtype)
    out = paged_attention(t["q"], t["k"], t["v"], t["key_cache"], t["value_cache"], t["block_tables"],
                          t["cu_seqlens_q"], t["seq_lens_decoder"], t["seq_lens_this_time"],
                          t["batch_id_per_token"], case.block_size, kw.get("scale", case.scale))
    assert out.dtype == t["q"].dtype and list(out.shape) == list(case.q.shape)
    return tuple(x.astype("float32").numpy() for x in (out, t["key_cache"], t["value_cache"]))


def _check_against_reference(case: AttentionCase, dtype: str):
    check_against_reference(run_op(case, dtype), case, TOL[dtype])


@pytest.fixture
def run():
    """The backend of the shared tests (tests/paged_attention_case_tests.py): the Paddle op."""
    return run_op


@pytest.fixture
def tol():
    return TOL


@pytest.fixture(params=grid_cases(), ids=case_id)
def reference_grid(request):
    """(grid case, dtype): every grid case in float32 (half precision: a subset, below)."""
    return request.param, "float32"


@pytest.fixture(params=[(*c, dtype) for c in INVARIANCE for dtype in ("float32", "bfloat16")],
                ids=lambda p: "-".join(map(str, p)))
def invariance_grid(request):
    """(block_size, head_dim, heads, dec, length, dtype): INVARIANCE in float32 and bfloat16."""
    return request.param


def test_paged_attention_updates_caches_in_place_and_returns_out_only():
    case = literal_case()
    t = _tensors(case)
    out = paged_attention(t["q"], t["k"], t["v"], t["key_cache"], t["value_cache"], t["block_tables"],
                          t["cu_seqlens_q"], t["seq_lens_decoder"], t["seq_lens_this_time"],
                          t["batch_id_per_token"], scale=1.0)
    assert isinstance(out, paddle.Tensor)
    want_k, want_v = literal_caches_after(case)
    np.testing.assert_array_equal(t["key_cache"].numpy(), want_k)
    np.testing.assert_array_equal(t["value_cache"].numpy(), want_v)


def test_paged_attention_default_scale_is_inverse_sqrt_head_dim_and_block_size_from_cache():
    case = make_attention_case(3, 3, "mixed", head_dim=64)
    t = _tensors(case)
    out = paged_attention(t["q"], t["k"], t["v"], t["key_cache"], t["value_cache"], t["block_tables"],
                          t["cu_seqlens_q"], t["seq_lens_decoder"], t["seq_lens_this_time"],
                          t["batch_id_per_token"])
    want, _, _ = ref_paged_attention(*case.args(), case.block_size, scale=0.125)
    np.testing.assert_allclose(out.numpy(), want, **TOL["float32"])
    # A different scale changes the result (the attribute is not ignored).
    other, _, _ = run_op(case, scale=0.5)
    assert not np.allclose(other, want, rtol=1e-3, atol=1e-3)


def test_paged_attention_accepts_fastdeploy_column_shapes():
    case = literal_case()
    case.seq_lens_decoder = case.seq_lens_decoder.reshape(-1, 1)
    case.seq_lens_this_time = case.seq_lens_this_time.reshape(-1, 1)
    out, _, _ = run_op(case)
    np.testing.assert_array_equal(out, LITERAL_OUT)


def test_paged_attention_accepts_whole_per_slot_buffers():
    """seq_lens_decoder and block_tables may have rows past bsz (FastDeploy passes [N] buffers)."""
    case = literal_case()
    case.seq_lens_decoder = np.concatenate([case.seq_lens_decoder, [10**6, -5]]).astype(np.int32)
    case.block_tables = np.concatenate([case.block_tables, np.full((2, 3), 99, np.int32)])
    out, _, _ = run_op(case)
    np.testing.assert_array_equal(out, LITERAL_OUT)


def test_paged_attention_empty_step():
    """T_cap = 0 with every slot stopped: an empty output, caches untouched."""
    case = literal_case()
    case = dataclasses.replace(case, q=case.q[:0], k=case.k[:0], v=case.v[:0],
                               batch_id_per_token=case.batch_id_per_token[:0],
                               cu_seqlens_q=np.zeros(4, np.int32), seq_lens_this_time=np.zeros(3, np.int32))
    out, key_cache, value_cache = run_op(case)
    assert out.shape == (0, 2, 2)
    np.testing.assert_array_equal(key_cache, case.key_cache)
    np.testing.assert_array_equal(value_cache, case.value_cache)


# --- randomized grid ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("c", grid_cases()[12:18] + grid_cases()[-4:], ids=case_id)
def test_paged_attention_half_precision_matches_reference(c, dtype):
    seed, bsz, kind, block_size, head_dim, heads, garbage = c
    case = make_attention_case(seed, bsz, kind, block_size=block_size, head_dim=head_dim, heads=heads,
                               garbage=garbage, dtype=dtype)
    _check_against_reference(case, dtype)




# --- argument and index errors -------------------------------------------------------------------------

def _set(field, fn):
    def mutate(case):
        setattr(case, field, fn(getattr(case, field)))
    return mutate


def _put(field, index, value):
    def mutate(case):
        a = getattr(case, field).copy()
        a[index] = value
        setattr(case, field, a)
    return mutate


BAD_ARGS = [
    ("q int32", _set("q", lambda a: a.astype(np.int32)), "q has dtype int32, expected float32, float16 or bfloat16"),
    ("q 2-D", _set("q", lambda a: a.reshape(5, 4)), r"q has shape \[5, 4\], expected a 3-D tensor"),
    ("k float64", _set("k", lambda a: a.astype(np.float64)), "k has dtype float64, expected q's float32"),
    ("cache float64", _set("value_cache", lambda a: a.astype(np.float64)),
     "value_cache has dtype float64, expected q's float32"),
    ("k rows", _set("k", lambda a: a[:4]), r"k has shape \[4, 1, 2\], expected \[T_cap, num_kv_heads, head_dim\]"),
    ("v heads", _set("v", lambda a: np.concatenate([a, a], axis=1)), r"v has shape \[5, 2, 2\], expected k's shape"),
    ("gqa", lambda c: (_set("q", lambda a: np.concatenate([a, a[:, :1]], axis=1))(c),
                       _set("k", lambda a: np.concatenate([a, a], axis=1))(c),
                       _set("v", lambda a: np.concatenate([a, a], axis=1))(c)),
     r"num_heads = 3 \(q\) is not a positive multiple of num_kv_heads = 2 \(k\)"),
    ("cache 3-D", _set("key_cache", lambda a: a[:, 0]), r"key_cache has shape \[5, 2, 2\], expected a 4-D tensor"),
    ("cache head_dim", _set("key_cache", lambda a: np.concatenate([a, a], axis=3)),
     r"key_cache has shape \[5, 1, 2, 4\], expected \[num_blocks, num_kv_heads, block_size, head_dim\]"),
    ("value_cache blocks", _set("value_cache", lambda a: a[:4]),
     r"value_cache has shape \[4, 1, 2, 2\], expected key_cache's shape = \[5, 1, 2, 2\]"),
    ("block_tables int64", _set("block_tables", lambda a: a.astype(np.int64)),
     "block_tables has dtype int64, expected int32"),
    ("block_tables rows", _set("block_tables", lambda a: a[:2]),
     r"block_tables has shape \[2, 3\], expected at least bsz = 3 rows"),
    ("cu length", _set("cu_seqlens_q", lambda a: a[:3]), r"cu_seqlens_q has shape \[3\], expected \[bsz \+ 1\] = \[4\]"),
    ("dec short", _set("seq_lens_decoder", lambda a: a[:2]),
     r"seq_lens_decoder has 2 slots \(shape \[2\]\), expected at least bsz = 3"),
    ("batch ids length", _set("batch_id_per_token", lambda a: a[:4]),
     r"batch_id_per_token has shape \[4\], expected \[T_cap\] \(q's rows\) = \[5\]"),
    ("lens int64", _set("seq_lens_this_time", lambda a: a.astype(np.int64)),
     "seq_lens_this_time has dtype int64, expected int32"),
]

BAD_INDICES = [
    ("table -1", _put("block_tables", (0, 1), -1),
     r"block_tables\[0, 1\] = -1 but slot 0 uses positions 0..3 \(blocks 0..1\); expected a block id in \[0, num_blocks = 5\)"),
    ("table past num_blocks", _put("block_tables", (2, 0), 5),
     r"block_tables\[2, 0\] = 5 but slot 2 uses positions 0..1 .* \[0, num_blocks = 5\)"),
    ("cached block -1", _put("block_tables", (0, 0), -1), r"block_tables\[0, 0\] = -1 but slot 0"),
    ("past capacity", _put("seq_lens_decoder", 0, 5),
     r"slot 0 reaches position 6 \(seq_lens_decoder\[0\] = 5 \+ seq_lens_this_time\[0\] = 2 - 1\) but block_tables "
     r"holds max_blocks_per_seq \* block_size = 3 \* 2 = 6 positions per slot"),
    ("negative dec", _put("seq_lens_decoder", 2, -1), r"seq_lens_decoder\[2\] = -1, expected >= 0"),
    ("negative len", _put("seq_lens_this_time", 1, -1), r"seq_lens_this_time\[1\] = -1, expected >= 0"),
    ("cu not prefix sum", _put("cu_seqlens_q", 3, 3),
     r"cu_seqlens_q\[3\] - cu_seqlens_q\[2\] = 1 but seq_lens_this_time\[2\] = 2"),
    ("cu[0]", _put("cu_seqlens_q", 0, 1), r"cu_seqlens_q\[0\] = 1, expected 0"),
    ("T > T_cap", lambda c: (_put("seq_lens_this_time", 2, 4)(c), _put("cu_seqlens_q", 3, 6)(c),
                              _put("block_tables", (2, 1), 2)(c)),
     r"the step has T = cu_seqlens_q\[bsz\] = 6 tokens but q has only T_cap = 5 rows"),
    ("batch id of another slot", _put("batch_id_per_token", 1, 2),
     r"batch_id_per_token\[1\] = 2, expected 0 \(row 1 is token 1 of slot 0 by cu_seqlens_q\)"),
    ("padding row with a slot", _put("batch_id_per_token", 4, 0),
     r"batch_id_per_token\[4\] = 0, expected -1 past the step's T = 4 tokens"),
]


@pytest.mark.parametrize("what, mutate, match", BAD_ARGS + BAD_INDICES, ids=[b[0] for b in BAD_ARGS + BAD_INDICES])
def test_paged_attention_rejects_bad_input(what, mutate, match):
    case = literal_case()
    mutate(case)
    tensors = {f.name: paddle.to_tensor(getattr(case, f.name)) for f in dataclasses.fields(case)
               if isinstance(getattr(case, f.name), np.ndarray)}
    before = {name: tensors[name].numpy().copy() for name in ("key_cache", "value_cache")}
    with pytest.raises(ValueError, match="paged_attention: " + match):
        paged_attention(*(tensors[name] for name in (
            "q", "k", "v", "key_cache", "value_cache", "block_tables", "cu_seqlens_q", "seq_lens_decoder",
            "seq_lens_this_time", "batch_id_per_token")), scale=1.0)
    # Checked before anything is written: an error leaves the caches as they were.
    for name, value in before.items():
        np.testing.assert_array_equal(tensors[name].numpy(), value)


def _literal_tensors(**replace):
    case = literal_case()
    t = _tensors(case)
    t.update(replace)
    return [t[n] for n in ("q", "k", "v", "key_cache", "value_cache", "block_tables", "cu_seqlens_q",
                           "seq_lens_decoder", "seq_lens_this_time", "batch_id_per_token")]


@pytest.mark.parametrize("block_size, scale, match", [
    (4, 1.0, r"block_size = 4 but key_cache has shape \[5, 1, 2, 2\] with block_size = 2"),
    (0, 1.0, r"block_size = 0 but key_cache has shape"),
    (2, float("nan"), r"scale = nan, expected a finite number"),
    (2, float("inf"), r"scale = inf, expected a finite number"),
])
def test_paged_attention_rejects_bad_attributes(block_size, scale, match):
    with pytest.raises(ValueError, match=match):
        paged_attention(*_literal_tensors(), block_size=block_size, scale=scale)


def test_paged_attention_rejects_head_dim_over_256():
    q = paddle.zeros([5, 2, 257])
    k = paddle.zeros([5, 1, 257])
    cache = paddle.zeros([5, 1, 2, 257])
    with pytest.raises(ValueError, match=r"head_dim = 257 \(q has shape \[5, 2, 257\]\), expected 1 <= head_dim <= 256"):
        paged_attention(*_literal_tensors(q=q, k=k, v=k, key_cache=cache, value_cache=cache.clone()))


def test_paged_attention_ignores_stopped_slot_with_stale_decoder_length_and_table():
    """A stopped slot (L 0) may keep a decoder length past its table and -1 entries: nothing is
    read for it, so nothing raises."""
    case = literal_case()
    case.seq_lens_decoder[1] = 10**6
    out, _, _ = run_op(case)
    np.testing.assert_array_equal(out, LITERAL_OUT)


def test_paged_attention_rows_past_t_are_zero_in_a_reused_output_buffer():
    """Rows with batch id -1 must be written as zeros, not left as whatever the allocator hands
    back: a first call fills an output of the same size with non-zero values, then frees it."""
    case = make_attention_case(11, 3, "all_decode", head_dim=32)
    stopped = dataclasses.replace(case, seq_lens_this_time=np.zeros(3, np.int32), cu_seqlens_q=np.zeros(4, np.int32),
                                  batch_id_per_token=np.full_like(case.batch_id_per_token, -1))
    for _ in range(3):
        busy, _, _ = run_op(case)
        assert np.abs(busy[:-3]).sum() > 0
        out, key_cache, _ = run_op(stopped)
        np.testing.assert_array_equal(out, np.zeros_like(out))
        np.testing.assert_array_equal(key_cache, stopped.key_cache)
