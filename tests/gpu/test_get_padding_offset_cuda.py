
import numpy as np
import pytest

from reference.cases.step_batch import make_step_batch
from tests.gpu.harness import launcher, ptr, require_gpu, stream
from tests.padding_offset_cases import (  # noqa: F401  written once, also run on the Paddle op
    DRAFTS, ENCODER, INPUT_IDS, LENS, test_get_padding_offset_capacity_exceeds_token_num_literal,
    test_get_padding_offset_index_only_without_input_ids_literal, test_get_padding_offset_matches_reference,
    test_get_padding_offset_mixed_three_slots_literal,
    test_get_padding_offset_without_drafts_reads_input_ids_literal, test_get_padding_offset_zero_slots,
    test_get_padding_offset_zero_tokens,
)
from reference.get_padding_offset import ref_get_padding_offset

cp = require_gpu()
launch = launcher("specworker_get_padding_offset_launch")

CANARY = -7  # outputs start as this, so an unwritten row shows
GUARD = 64  # rows past each output's end that the kernel must leave untouched


def _device(a, dtype):
    return None if a is None else cp.asarray(np.asarray(a, dtype=dtype))


def run_kernel(input_ids, lens, draft_tokens, encoder, cap):
    """Runs the kernel on numpy/list inputs (None = omitted) and returns numpy outputs cut to
    their sizes; checks that the GUARD rows past every output stayed untouched."""
    d_input_ids, d_drafts = _device(input_ids, np.int64), _device(draft_tokens, np.int64)
    d_lens, d_enc = _device(np.reshape(lens, -1), np.int32), _device(encoder, np.int32)
    bsz = d_lens.shape[0]
    d_ids = None if input_ids is None else cp.full(cap + GUARD, CANARY, dtype=cp.int64)
    d_batch = cp.full(cap + GUARD, CANARY, dtype=cp.int32)
    d_cu_q = cp.full(bsz + 1 + GUARD, CANARY, dtype=cp.int32)
    d_cu_k = cp.full(bsz + 1 + GUARD, CANARY, dtype=cp.int32)
    launch(ptr(d_input_ids), 0 if d_input_ids is None else d_input_ids.shape[1], ptr(d_lens), ptr(d_drafts),
           0 if d_drafts is None else d_drafts.shape[1], ptr(d_enc), bsz, cap, ptr(d_ids), ptr(d_batch),
           ptr(d_cu_q), ptr(d_cu_k), stream())
    outs = [None if d_ids is None else cp.asnumpy(d_ids)] + [cp.asnumpy(a) for a in (d_batch, d_cu_q, d_cu_k)]
    for name, a in zip(("ids_remove_padding", "batch_id_per_token", "cu_seqlens_q", "cu_seqlens_k"), outs):
        if a is not None:
            assert (a[-GUARD:] == CANARY).all(), f"{name} written past its end"
    ids, batch_id, cu_q, cu_k = outs
    return None if ids is None else ids[:cap], batch_id[:cap], cu_q[: bsz + 1], cu_k[: bsz + 1]


@pytest.fixture
def run():
    """The backend of the shared tests (tests/padding_offset_cases.py): the kernel, GUARD rows checked."""
    return run_kernel


def assert_matches_reference(input_ids, lens, drafts, encoder, cap):
    got = run_kernel(input_ids, lens, drafts, encoder, cap)
    want = ref_get_padding_offset(input_ids, lens, drafts, encoder, cap)
    assert (got[0] is None) == (want[0] is None)
    for g, w in zip(got, want):
        if w is not None:
            np.testing.assert_array_equal(g, w)


def test_get_padding_offset_cuda_fill_only_blocks_cover_large_capacity():
    """One slot, capacity far above bsz * 1024 rows: the launcher adds fill-only blocks."""
    ids, batch_id, cu_q, _ = run_kernel(INPUT_IDS[:1], [3], None, None, 10_000)
    np.testing.assert_array_equal(ids, [11, 12, 13] + [-1] * 9_997)
    np.testing.assert_array_equal(batch_id, [0, 0, 0] + [-1] * 9_997)
    np.testing.assert_array_equal(cu_q, [0, 3])


@pytest.mark.parametrize("bsz", [1, 2, 31, 255, 256, 257, 1024, 4999, 5000])
def test_get_padding_offset_cuda_any_bsz(bsz):
    """One launch for any bsz (a block per slot), around the 256-thread tile edges."""
    batch = make_step_batch(np.random.default_rng(bsz), bsz, "mixed")
    assert_matches_reference(batch.input_ids, batch.seq_lens_this_time, batch.draft_tokens,
                             batch.seq_lens_encoder, batch.token_num + 1000)


def test_get_padding_offset_cuda_long_prefill():
    """Slots far longer than the block: each thread copies many rows of its slot."""
    batch = make_step_batch(np.random.default_rng(7), 5, "all_prefill", max_model_len=6000)
    assert_matches_reference(batch.input_ids, batch.seq_lens_this_time, batch.draft_tokens,
                             batch.seq_lens_encoder, batch.token_num + 3)


# The CPU op raises for these values; the kernel cannot, so it must stay in bounds.
def test_get_padding_offset_cuda_negative_length_counts_as_zero():
    ids, batch_id, cu_q, cu_k = run_kernel(INPUT_IDS, [3, -4, 2], DRAFTS, ENCODER, 6)
    np.testing.assert_array_equal(ids, [11, 12, 13, 35, 36, -1])
    np.testing.assert_array_equal(batch_id, [0, 0, 0, 2, 2, -1])
    np.testing.assert_array_equal(cu_q, [0, 3, 3, 5])
    np.testing.assert_array_equal(cu_k, [0, 3, 3, 5])


def test_get_padding_offset_cuda_rows_past_capacity_not_written():
    """T = 5 > capacity 4: rows past 4 are dropped (GUARD rows checked), cu keeps the full sums."""
    ids, batch_id, cu_q, cu_k = run_kernel(INPUT_IDS, LENS, DRAFTS, ENCODER, 4)
    np.testing.assert_array_equal(ids, [11, 12, 13, 35])
    np.testing.assert_array_equal(batch_id, [0, 0, 0, 2])
    np.testing.assert_array_equal(cu_q, [0, 3, 3, 5])
    np.testing.assert_array_equal(cu_k, [0, 3, 3, 5])


def test_get_padding_offset_cuda_source_index_past_width_yields_minus_one():
    """Prefill slot 0 asks for 4 of S = 3 tokens, decode slot 2 for 3 of D = 2 drafts."""
    ids, batch_id, cu_q, _ = run_kernel(INPUT_IDS, [4, 0, 3], DRAFTS, [4, 0, 0], 7)
    np.testing.assert_array_equal(ids, [11, 12, 13, -1, 35, 36, -1])
    np.testing.assert_array_equal(batch_id, [0, 0, 0, 0, 2, 2, 2])
    np.testing.assert_array_equal(cu_q, [0, 4, 4, 7])


@pytest.mark.parametrize(
    "case",
    ["negative_bsz", "negative_capacity", "drafts_without_encoder", "encoder_without_drafts", "ids_out_without_input"],
)
def test_get_padding_offset_cuda_launcher_rejects_invalid_arguments(case):
    lens, enc = cp.asarray([1, 1], dtype=cp.int32), cp.asarray([0, 0], dtype=cp.int32)
    input_ids, drafts = cp.ones((2, 3), dtype=cp.int64), cp.ones((2, 2), dtype=cp.int64)
    ids, batch_id = cp.zeros(4, dtype=cp.int64), cp.zeros(4, dtype=cp.int32)
    cu_q, cu_k = cp.zeros(3, dtype=cp.int32), cp.zeros(3, dtype=cp.int32)
    args = dict(input_ids=input_ids, drafts=drafts, enc=enc, bsz=2, cap=4)
    args.update({
        "negative_bsz": dict(bsz=-1),
        "negative_capacity": dict(cap=-1),
        "drafts_without_encoder": dict(enc=None),
        "encoder_without_drafts": dict(drafts=None),
        "ids_out_without_input": dict(input_ids=None, drafts=None, enc=None),
    }[case])
    with pytest.raises(RuntimeError, match="returned cudaError 1$"):  # cudaErrorInvalidValue
        launch(ptr(args["input_ids"]), 3, ptr(lens), ptr(args["drafts"]), 2, ptr(args["enc"]), args["bsz"],
               args["cap"], ptr(ids), ptr(batch_id), ptr(cu_q), ptr(cu_k), stream())
