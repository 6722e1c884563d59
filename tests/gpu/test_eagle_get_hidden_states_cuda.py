import ctypes

import numpy as np
import pytest

from tests.eagle_hidden_cases import (  # noqa: F401  written once, also run on the Paddle op
    DTYPES, hidden_of, per_slot, rows, test_eagle_get_hidden_states_bsz_256_structured,
    test_eagle_get_hidden_states_bsz_one_literal, test_eagle_get_hidden_states_matches_reference,
    test_eagle_get_hidden_states_three_slots_literal,
)
from tests.gpu.harness import launcher, ptr, require_gpu, stream
from reference.cases.mtp_round_state import all_round_cases, make_round_state, make_target_hidden
from reference.draft_model_preprocess import ref_draft_model_preprocess
from reference.eagle_get_hidden_states import ref_eagle_get_hidden_states

cp = require_gpu()
launch = launcher("specworker_eagle_get_hidden_states_launch")

GUARD_BYTES = 256  # bytes past the output that the kernel must leave untouched
CANARY_BYTE = 0xAB  # the output starts as this, so a row the kernel forgot shows


def run_kernel(hidden, state, capacity=None, misalign=0):
    """Runs the kernel; returns (out [capacity, H] same dtype as hidden, output_token_num [1]).
    misalign shifts the input and output base addresses by that many bytes (a multiple of the
    element size) to force the narrower vector paths. Checks the bytes past the output and the
    output_token_num entries past [1] stayed untouched."""
    T, H = hidden.shape
    esize = hidden.dtype.itemsize
    capacity = T if capacity is None else capacity
    row_bytes = H * esize
    d_in_raw = cp.zeros(T * row_bytes + misalign + 16, dtype=cp.uint8)
    d_in_raw[misalign:misalign + T * row_bytes] = cp.asarray(hidden.reshape(-1).view(np.uint8))
    d_out_raw = cp.full(capacity * row_bytes + misalign + GUARD_BYTES, CANARY_BYTE, dtype=cp.uint8)
    lens = {k: cp.asarray(np.asarray(state[k], np.int32).reshape(-1)) for k in
            ("seq_lens_this_time", "seq_lens_encoder", "accept_num", "target_model_seq_lens_this_time")}
    bsz = int(lens["seq_lens_this_time"].size)
    scratch = cp.full(2 * bsz + 1 + 64, -12345, dtype=cp.int32)  # garbage: the kernel must not rely on zeros
    count = cp.full(1 + 64, -7, dtype=cp.int32)
    launch(ctypes.c_void_p(d_in_raw.data.ptr + misalign), T, H, esize, ptr(lens["seq_lens_this_time"]),
           ptr(lens["seq_lens_encoder"]), ptr(lens["accept_num"]), ptr(lens["target_model_seq_lens_this_time"]),
           bsz, ptr(scratch), ctypes.c_void_p(d_out_raw.data.ptr + misalign), capacity, ptr(count), stream())
    raw = cp.asnumpy(d_out_raw)
    assert (raw[:misalign] == CANARY_BYTE).all(), "output written before its start"
    assert (raw[misalign + capacity * row_bytes:] == CANARY_BYTE).all(), "output written past its end"
    count = cp.asnumpy(count)
    assert (count[1:] == -7).all(), "output_token_num written past [1]"
    out = raw[misalign:misalign + capacity * row_bytes].view(hidden.dtype).reshape(capacity, H)
    return out, count[:1]


@pytest.fixture
def run():
    """The backend of the shared tests (tests/eagle_hidden_cases.py): the kernel, guard bytes checked."""
    return run_kernel


@pytest.fixture(params=[(bsz, kind, seed, 111, dtype) for bsz, kind, seed in all_round_cases() for dtype in DTYPES],
                ids=lambda p: "-".join(map(str, p[:3] + p[4:])))
def reference_grid(request):
    """(bsz, kind, seed, H, dtype): every batch size x kind, H = 111, each dtype."""
    return request.param


def assert_matches_reference(hidden, state, **kw):
    out, count = run_kernel(hidden, state, **kw)
    want_out, want_count = ref_eagle_get_hidden_states(hidden, state)
    np.testing.assert_array_equal(count, want_count)
    # compare bytes, so NaN bit patterns in the bf16 rows compare too
    np.testing.assert_array_equal(out.view(np.uint8), want_out.view(np.uint8))


def test_eagle_get_hidden_states_cuda_decode_prefill_stopped_literal():
    h = rows(12)
    # slot 0 decode keeps 1 of 4, slot 1 stopped consumes 2, slot 2 just-finished prefill of 5
    # keeps all 5 (not accept_num = 1), slot 3 decode keeps 1 of 1
    out, count = run_kernel(h, per_slot([1, 0, 5, 1], [0, 0, 5, 0], [1, 2, 1, 1], [4, 2, 5, 1]))
    np.testing.assert_array_equal(out[:7], h[[0, 6, 7, 8, 9, 10, 11]])
    np.testing.assert_array_equal(out[7:], 0)
    np.testing.assert_array_equal(count, [7])


def test_eagle_get_hidden_states_cuda_all_stopped_zero_rows_zero_slots():
    out, count = run_kernel(rows(4), per_slot([0, 0, 0], [0, 3, 0], [1, 1, 0], [2, 2, 0]))
    np.testing.assert_array_equal(out, 0)
    np.testing.assert_array_equal(count, [0])
    out, count = run_kernel(np.zeros((0, 4), np.float32), per_slot([0, 0], [0, 0], [0, 0], [0, 0]))
    assert out.shape == (0, 4)
    np.testing.assert_array_equal(count, [0])
    out, count = run_kernel(rows(2), per_slot([], [], [], []))
    np.testing.assert_array_equal(out, 0)
    np.testing.assert_array_equal(count, [0])


def preprocessed(seed, bsz, kind, max_model_len=64):
    rng = np.random.default_rng(seed)
    return rng, ref_draft_model_preprocess(make_round_state(rng, bsz, kind, max_model_len=max_model_len), 1)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("bsz, kind, seed", all_round_cases()[::2])
def test_eagle_get_hidden_states_cuda_matches_reference_h7168(bsz, kind, seed, dtype):
    rng, st = preprocessed(seed, bsz, kind, max_model_len=32)
    assert_matches_reference(hidden_of(rng, st, 7168, dtype), st)


@pytest.mark.parametrize("H, dtype", [(111, "float32"), (7168, "bfloat16")])
@pytest.mark.parametrize("bsz", [1, 2, 1023, 1024, 1025, 2048, 4999, 5000])
def test_eagle_get_hidden_states_cuda_any_bsz(bsz, H, dtype):
    """The offsets scan walks the slots in tiles of 1024 (one block, no cooperative launch):
    bsz around the tile edges and far past one tile."""
    rng, st = preprocessed(bsz, bsz, "mixed", max_model_len=12)
    assert_matches_reference(hidden_of(rng, st, H, dtype), st)


def test_eagle_get_hidden_states_cuda_long_prefill_large_hidden():
    """A few slots with thousands of prompt rows of H = 7168: rows of one slot span many blocks."""
    rng, st = preprocessed(11, 3, "all_prefill", max_model_len=3000)
    assert_matches_reference(hidden_of(rng, st, 7168, "bfloat16"), st)


@pytest.mark.parametrize("H", [1, 2, 3, 4, 5, 8, 111, 7168])
@pytest.mark.parametrize("dtype, misalign", [("float32", 0), ("float32", 4), ("float32", 8), ("float16", 0),
                                             ("float16", 2), ("float16", 4), ("float16", 8)])
def test_eagle_get_hidden_states_cuda_vector_widths(H, dtype, misalign):
    """Row sizes and base addresses (shifted by misalign bytes, a multiple of the element size)
    that allow 16, 8, 4 or 2-byte vectors, or only single elements."""
    rng, st = preprocessed(H, 17, "mixed", max_model_len=16)
    assert_matches_reference(hidden_of(rng, st, H, dtype), st, misalign=misalign)


# The CPU op raises for these values; the kernel cannot, so it must stay in bounds.
def test_eagle_get_hidden_states_cuda_clamps_rows_to_target_rows():
    """Slot 0 asks for 3 rows but the target ran 2: it gets 2; slot 1 (negative lengths) none."""
    h = rows(5)
    out, count = run_kernel(h, per_slot([3, -1, 2], [0, 0, 0], [3, 1, 2], [2, -4, 3]))
    np.testing.assert_array_equal(out[:4], h[[0, 1, 2, 3]])
    np.testing.assert_array_equal(out[4:], 0)
    np.testing.assert_array_equal(count, [4])


def test_eagle_get_hidden_states_cuda_source_rows_past_input_are_zero():
    """sum(target L) = 6 > T = 4: slot 1's rows 4 and 5 do not exist, so their output rows are zero."""
    h = rows(4)
    out, count = run_kernel(h, per_slot([3, 3], [3, 0], [1, 3], [3, 3]))
    np.testing.assert_array_equal(out[:4], np.stack([h[0], h[1], h[2], h[3]]))
    np.testing.assert_array_equal(count, [4])  # clamped to the 4 output rows
    out, count = run_kernel(h, per_slot([3, 3], [3, 0], [1, 3], [3, 3]), capacity=6)
    np.testing.assert_array_equal(out, np.concatenate([h, np.zeros((2, 3), np.float32)]))
    np.testing.assert_array_equal(count, [6])


def test_eagle_get_hidden_states_cuda_capacity_below_count():
    """No row >= capacity is written (checked by the guard bytes); the count is clamped."""
    h = rows(7)
    out, count = run_kernel(h, per_slot([3, 2, 0], [3, 0, 0], [1, 2, 1], [3, 2, 2]), capacity=4)
    np.testing.assert_array_equal(out, h[:4])
    np.testing.assert_array_equal(count, [4])


def test_eagle_get_hidden_states_cuda_capacity_above_rows():
    h = rows(3)
    out, count = run_kernel(h, per_slot([2], [0], [2], [3]), capacity=6)
    np.testing.assert_array_equal(out, np.concatenate([h[:2], np.zeros((4, 3), np.float32)]))
    np.testing.assert_array_equal(count, [2])


@pytest.mark.parametrize("case", ["negative_bsz", "negative_capacity", "elem_size_3", "null_scratch",
                                  "null_count", "null_out", "null_lens"])
def test_eagle_get_hidden_states_cuda_launcher_rejects_invalid_arguments(case):
    inp, out = cp.zeros((4, 8), cp.float32), cp.zeros((4, 8), cp.float32)
    lens = cp.asarray([2, 2], dtype=cp.int32)
    scratch, count = cp.zeros(5, cp.int32), cp.zeros(1, cp.int32)
    args = dict(bsz=2, cap=4, esize=4, scratch=scratch, count=count, out=out, lens=lens)
    args.update({
        "negative_bsz": dict(bsz=-1),
        "negative_capacity": dict(cap=-1),
        "elem_size_3": dict(esize=3),
        "null_scratch": dict(scratch=None),
        "null_count": dict(count=None),
        "null_out": dict(out=None),
        "null_lens": dict(lens=None),
    }[case])
    with pytest.raises(RuntimeError, match="returned cudaError 1$"):  # cudaErrorInvalidValue
        launch(ptr(inp), 4, 8, args["esize"], ptr(args["lens"]), ptr(lens), ptr(lens), ptr(lens), args["bsz"],
               ptr(args["scratch"]), ptr(args["out"]), args["cap"], ptr(args["count"]), stream())


def test_draft_round_cuda_preprocess_then_hidden_states():
    """Both kernels chained on the device, as MTPProposer runs them: eagle_get_hidden_states reads
    the draft lengths draft_model_preprocess just wrote; equals the composed references."""
    from tests.gpu.test_draft_model_preprocess_cuda import run_kernel as run_preprocess

    rng = np.random.default_rng(99)
    for bsz, kind in [(3, "mixed"), (256, "mixed"), (5000, "mixed"), (300, "all_prefill")]:
        st = make_round_state(rng, bsz, kind, max_model_len=24)
        new = run_preprocess(st)
        h = make_target_hidden(rng, new, 111)
        assert_matches_reference(h, new)
        want = ref_draft_model_preprocess(st, 1)
        np.testing.assert_array_equal(new["seq_lens_this_time"], want["seq_lens_this_time"])
