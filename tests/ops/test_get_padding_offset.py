import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import PaddingOffsetOutput, get_padding_offset
from reference.cases.step_batch import all_cases, make_step_batch, pack_output_index
from tests.padding_offset_cases import (  # noqa: F401  written once, also run on the CUDA kernel
    DRAFTS, ENCODER, INPUT_IDS, LENS, test_get_padding_offset_capacity_exceeds_token_num_literal,
    test_get_padding_offset_index_only_without_input_ids_literal, test_get_padding_offset_matches_reference,
    test_get_padding_offset_mixed_three_slots_literal,
    test_get_padding_offset_without_drafts_reads_input_ids_literal, test_get_padding_offset_zero_slots,
    test_get_padding_offset_zero_tokens,
)
from reference.speculate_get_seq_lens_output import ref_speculate_get_seq_lens_output


def tensor(x, dtype):
    """paddle tensor of x; a numpy array keeps its own dtype (so tests can pass a wrong one)."""
    return None if x is None else paddle.to_tensor(x if isinstance(x, np.ndarray) else np.asarray(x, dtype=dtype))


def run_op(input_ids, lens, draft_tokens, encoder, token_num_cpu):
    """Calls the op on numpy/list inputs (None stays None); returns numpy outputs."""
    out = get_padding_offset(tensor(input_ids, np.int64), tensor(lens, np.int32), tensor(draft_tokens, np.int64),
                             tensor(encoder, np.int32), token_num_cpu)
    ids = None if out.ids_remove_padding is None else out.ids_remove_padding.numpy()
    return ids, out.batch_id_per_token.numpy(), out.cu_seqlens_q.numpy(), out.cu_seqlens_k.numpy()


@pytest.fixture
def run():
    """The backend of the shared tests (tests/padding_offset_cases.py): the Paddle op."""
    return run_op


def test_get_padding_offset_ignores_buffer_rows_past_bsz():
    """FastDeploy passes [max_num_seqs, *] buffers with only the first bsz slots live."""
    drafts = [[-1, -1], [25, 26], [35, 36], [95, 96]]
    ids, batch_id, cu_q, _ = run_op(INPUT_IDS + [[91, 92, 93]], [2, 2], drafts, [2, 0], 4)
    np.testing.assert_array_equal(ids, [11, 12, 25, 26])
    np.testing.assert_array_equal(batch_id, [0, 0, 1, 1])
    np.testing.assert_array_equal(cu_q, [0, 2, 4])


def test_get_padding_offset_accepts_fastdeploy_column_shape():
    lens, enc = np.array(LENS, np.int32).reshape(3, 1), np.array(ENCODER, np.int32).reshape(3, 1)
    ids, batch_id, cu_q, _ = run_op(INPUT_IDS, lens, DRAFTS, enc, 5)
    np.testing.assert_array_equal(ids, [11, 12, 13, 35, 36])
    np.testing.assert_array_equal(batch_id, [0, 0, 0, 2, 2])
    np.testing.assert_array_equal(cu_q, [0, 3, 3, 5])


def test_get_padding_offset_returns_typed_outputs():
    out = get_padding_offset(tensor(INPUT_IDS, np.int64), tensor(LENS, np.int32), tensor(DRAFTS, np.int64),
                             tensor(ENCODER, np.int32), 6)
    assert isinstance(out, PaddingOffsetOutput)
    ids, batch_id, cu_q, cu_k = out  # unpacks like FastDeploy's four outputs
    assert (ids.shape, ids.dtype) == ([6], paddle.int64)
    assert (batch_id.shape, batch_id.dtype) == ([6], paddle.int32)
    assert (cu_q.shape, cu_q.dtype) == ([4], paddle.int32)
    assert (cu_k.shape, cu_k.dtype) == ([4], paddle.int32)


@pytest.mark.parametrize("bsz, kind, seed", all_cases())
def test_get_padding_offset_output_side_matches_definition(bsz, kind, seed):
    """pre_process's output side: get_padding_offset(None, seq_lens_output, None, None, N * D)
    equals the per-token slot ids and prefix sum built from their definition (docs/spec.md §7 item 7)."""
    batch = make_step_batch(np.random.default_rng(seed), bsz, kind)
    seq_lens_output = ref_speculate_get_seq_lens_output(
        batch.seq_lens_this_time, batch.seq_lens_encoder, batch.seq_lens_decoder)
    capacity = bsz * batch.draft_tokens.shape[1]
    _, batch_id, cu_q, _ = run_op(None, seq_lens_output, None, None, capacity)
    want_batch_id, want_cu = pack_output_index(seq_lens_output, capacity)
    np.testing.assert_array_equal(batch_id, want_batch_id)
    np.testing.assert_array_equal(cu_q, want_cu)


def _bad(name, args, match):
    return pytest.param(args, match, id=name)


# (input_ids, lens, draft_tokens, encoder, token_num_cpu) with one thing wrong each, and the error.
BAD_INPUTS = [
    _bad("drafts_without_encoder", (INPUT_IDS, LENS, DRAFTS, None, 5),
         r"draft_tokens and seq_lens_encoder must be given together.*draft_tokens=given, seq_lens_encoder=None"),
    _bad("encoder_without_drafts", (INPUT_IDS, LENS, None, ENCODER, 5),
         r"draft_tokens=None, seq_lens_encoder=given"),
    _bad("drafts_without_input_ids", (None, LENS, DRAFTS, ENCODER, 5),
         r"draft_tokens was given but input_ids is None"),
    _bad("input_ids_int32", (np.array(INPUT_IDS, np.int32), LENS, None, None, 5),
         r"input_ids has dtype int32, expected int64"),
    _bad("lens_int64", (INPUT_IDS, np.array(LENS, np.int64), None, None, 5),
         r"seq_lens_this_time has dtype int64, expected int32"),
    _bad("drafts_int32", (INPUT_IDS, LENS, np.array(DRAFTS, np.int32), ENCODER, 5),
         r"draft_tokens has dtype int32, expected int64"),
    _bad("encoder_int64", (INPUT_IDS, LENS, DRAFTS, np.array(ENCODER, np.int64), 5),
         r"seq_lens_encoder has dtype int64, expected int32"),
    _bad("input_ids_1d", ([1, 2, 3], LENS, None, None, 5), r"input_ids has shape \[3\], expected a 2-D tensor"),
    _bad("input_ids_too_few_rows", (INPUT_IDS[:2], LENS, None, None, 5),
         r"input_ids has shape \[2, 3\], expected at least bsz = 3 rows"),
    _bad("drafts_too_few_rows", (INPUT_IDS, LENS, DRAFTS[:1], ENCODER, 5),
         r"draft_tokens has shape \[1, 2\], expected at least bsz = 3 rows"),
    _bad("encoder_wrong_slots", (INPUT_IDS, LENS, DRAFTS, [3, 0], 5),
         r"seq_lens_encoder has 2 slots \(shape \[2\]\), expected bsz = 3"),
    _bad("lens_not_per_slot", (INPUT_IDS, [LENS], None, None, 5),
         r"seq_lens_this_time has shape \[1, 3\], expected a per-slot tensor"),
    _bad("capacity_negative", (INPUT_IDS, [0, 0, 0], None, None, -1),
         r"token_num_cpu = -1, expected 0 <= token_num_cpu"),
    _bad("negative_length", (INPUT_IDS, [3, -2, 2], DRAFTS, ENCODER, 5),
         r"seq_lens_this_time\[1\] = -2, expected >= 0"),
    _bad("tokens_exceed_capacity", (INPUT_IDS, LENS, DRAFTS, ENCODER, 4),
         r"sum\(seq_lens_this_time\) = 5 exceeds token_num_cpu = 4"),
    _bad("decode_exceeds_draft_width", (INPUT_IDS, [3, 0, 3], DRAFTS, ENCODER, 6),
         r"seq_lens_this_time\[2\] = 3 exceeds the draft_tokens width D = 2 on decode slot 2 "
         r"\(seq_lens_encoder\[2\] = 0\)"),
    _bad("prefill_exceeds_input_width", (INPUT_IDS, [4, 0, 2], DRAFTS, [4, 0, 0], 6),
         r"seq_lens_this_time\[0\] = 4 exceeds the input_ids width S = 3 on slot 0"),
    _bad("no_drafts_exceeds_input_width", (INPUT_IDS, [1, 0, 5], None, None, 6),
         r"seq_lens_this_time\[2\] = 5 exceeds the input_ids width S = 3 on slot 2"),
]


@pytest.mark.parametrize("args, match", BAD_INPUTS)
def test_get_padding_offset_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        run_op(*args)


def test_get_padding_offset_rejects_non_int_token_num():
    with pytest.raises(TypeError, match="token_num_cpu must be a host int, got Tensor"):
        get_padding_offset(tensor(INPUT_IDS, np.int64), tensor(LENS, np.int32), None, None, paddle.to_tensor(5))
