import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import speculate_get_token_penalty_multi_scores
from reference.cases.step_batch import all_cases
from tests.penalty_case_tests import (  # noqa: F401  written once, also run on the CUDA kernel
    ref, test_penalty_row_i_equals_nonspeculative_with_drafts_appended,
    test_speculate_get_token_penalty_multi_scores_half_precision_matches_reference,
    test_speculate_get_token_penalty_multi_scores_matches_reference,
    test_speculate_get_token_penalty_multi_scores_without_drafts_rows_share_one_history,
)
from tests.penalty_cases import (
    EXPECTED_WITH_DRAFTS,
    EXPECTED_WITHOUT_DRAFTS,
    MASK,
    PenaltyCase,
    make_penalty_case,
    three_slot_case,
)


def run_op(case: PenaltyCase, dtype: str = "float32", drafts=True) -> np.ndarray:
    """Runs the op on paddle CPU tensors made from the case; returns the updated logits (float32)."""
    args = [paddle.to_tensor(a) for a in case.args()]
    args[1] = paddle.to_tensor(case.logits).astype(dtype)
    draft = None if (case.draft_tokens is None or not drafts) else paddle.to_tensor(case.draft_tokens)
    out = speculate_get_token_penalty_multi_scores(*args, case.max_seq_len, draft)
    assert out is args[1], "the op updates logits in place and returns it"
    return out.astype("float32").numpy()


@pytest.fixture
def run():
    """The backend of the shared tests (tests/penalty_case_tests.py): the Paddle op."""
    return run_op


@pytest.fixture(params=[(bsz, kind, seed, V, drafts) for bsz, kind, seed in all_cases() for V in (111, 1000)
                        for drafts in (True, False)], ids=lambda p: "-".join(map(str, p)))
def reference_grid(request):
    """(bsz, kind, seed, V, drafts): every batch size x kind, V = 111 and 1000, with and without drafts."""
    return request.param


@pytest.fixture(params=[(dtype, *c) for c in all_cases() if c[0] in (3, 17) for dtype in ("float16", "bfloat16")],
                ids=lambda p: "-".join(map(str, p)))
def half_grid(request):
    """(dtype, bsz, kind, seed): 3 and 17 slots x kind, float16 and bfloat16."""
    return request.param


def test_speculate_get_token_penalty_multi_scores_literal_three_slots_with_drafts():
    case = three_slot_case()
    np.testing.assert_array_equal(run_op(case), EXPECTED_WITH_DRAFTS)
    np.testing.assert_array_equal(ref(case), EXPECTED_WITH_DRAFTS)


def test_speculate_get_token_penalty_multi_scores_literal_three_slots_without_drafts():
    """FastDeploy's behaviour: every row of slot 0 counts the same history {3: 2}."""
    case = three_slot_case()
    np.testing.assert_array_equal(run_op(case, drafts=False), EXPECTED_WITHOUT_DRAFTS)
    np.testing.assert_array_equal(ref(case, drafts=False), EXPECTED_WITHOUT_DRAFTS)


def test_speculate_get_token_penalty_multi_scores_accepts_fastdeploy_column_shapes():
    case = three_slot_case()
    for name in ("penalty_scores", "frequency_scores", "presence_scores", "temperatures", "bad_tokens_len",
                 "cur_len", "min_len", "eos_token_id", "seq_lens_this_time"):
        setattr(case, name, getattr(case, name).reshape(-1, 1))
    np.testing.assert_array_equal(run_op(case), EXPECTED_WITH_DRAFTS)


def test_speculate_get_token_penalty_multi_scores_many_rows_no_single_block_limit():
    """FastDeploy's min-length kernel is one block of roundup32(T_out) threads, so T_out > 1024
    fails; here 1000 decode slots of 1-4 rows (about 2500), all with min length active."""
    rng = np.random.default_rng(5)
    case = make_penalty_case(rng, 1000, "all_decode", vocab_size=37, pad_rows=False)
    case.min_len[:] = 10 ** 6
    assert case.logits.shape[0] > 2000
    out = run_op(case)
    np.testing.assert_array_equal(out, ref(case))


def test_speculate_get_token_penalty_multi_scores_skips_rows_without_slot_and_empty_batch():
    case = three_slot_case()
    case.batch_id_per_token_output[:5] = -1
    np.testing.assert_array_equal(run_op(case), case.logits)
    case.logits = case.logits[:0]
    assert run_op(case).shape == (0, 8)


def test_speculate_get_token_penalty_multi_scores_negative_cur_len_only_scales_and_bans():
    """cur_len < 0 (FastDeploy: no min length, no counts): only temperature and bad words apply."""
    case = three_slot_case()
    case.cur_len[2] = -1
    expected = EXPECTED_WITH_DRAFTS.copy()
    expected[3] = [MASK, MASK, 0, 0.5, 1, 1.5, 2, 2.5]
    np.testing.assert_array_equal(run_op(case), expected)
    np.testing.assert_array_equal(ref(case), expected)


def test_speculate_get_token_penalty_multi_scores_rejects_padding_offsets_as_batch_ids():
    """Defect 8 (docs/spec.md §7): FastDeploy's [B] penalty test stored the old padding offsets
    (0, S - O_0, ...) under the name batch_id_per_token_output, so every row but the first was
    skipped by kernel and reference alike. Given such a fixture our op fails loudly."""
    case = three_slot_case()
    S = case.pre_ids.shape[1]
    padding_offsets = np.array([0, 0, 0, S - 3, S - 3], np.int32)  # old [A] encoding of O = [3, 0, 1]
    case.batch_id_per_token_output = np.concatenate([padding_offsets, np.full(4, -1, np.int32)])
    with pytest.raises(ValueError, match=r"batch_id_per_token_output\[3\] = 3, expected -1 or a slot in \[0, bsz = 3\)"):
        run_op(case)


def _bad(case_fn):
    case = three_slot_case()
    case_fn(case)
    return case


ERRORS = [
    ("logits int32", lambda c: setattr(c, "logits", c.logits.astype(np.int32)), "logits has dtype int32, expected float32, float16 or bfloat16"),
    ("pre_ids int32", lambda c: setattr(c, "pre_ids", c.pre_ids.astype(np.int32)), "pre_ids has dtype int32, expected int64"),
    ("temperatures f64", lambda c: setattr(c, "temperatures", c.temperatures.astype(np.float64)), "temperatures has dtype float64, expected float32"),
    ("cu int64", lambda c: setattr(c, "cu_seqlens_q_output", c.cu_seqlens_q_output.astype(np.int64)), "cu_seqlens_q_output has dtype int64, expected int32"),
    ("logits 1-D", lambda c: setattr(c, "logits", c.logits.reshape(-1)), r"logits has shape \[40\], expected a 2-D tensor"),
    ("cu bsz - 1", lambda c: setattr(c, "cu_seqlens_q_output", c.cu_seqlens_q_output[:2]), r"cu_seqlens_q_output has shape \[2\], expected \[bsz \+ 1\] = \[4\]"),
    ("cu column", lambda c: setattr(c, "cu_seqlens_q_output", c.cu_seqlens_q_output.reshape(-1, 1)), r"cu_seqlens_q_output has shape \[4, 1\], expected \[bsz \+ 1\] = \[4\]"),
    ("alpha N+1", lambda c: setattr(c, "penalty_scores", np.ones(4, np.float32)), r"penalty_scores has 4 slots \(shape \[4\]\), expected bsz = 3"),
    ("bad_tokens rows", lambda c: setattr(c, "bad_tokens", c.bad_tokens[:2]), r"bad_tokens has shape \[2, 2\], expected \[N = 3, W\]"),
    ("eos matrix", lambda c: setattr(c, "eos_token_id", np.zeros((2, 2), np.int64)), r"eos_token_id has shape \[2, 2\], expected a 1-D tensor"),
    ("bsz > N", lambda c: setattr(c, "seq_lens_this_time", np.array([3, 0, 4, 0], np.int32)), "seq_lens_this_time has 4 slots but the per-slot buffers .* N = 3"),
    ("batch ids short", lambda c: setattr(c, "batch_id_per_token_output", c.batch_id_per_token_output[:4]), r"batch_id_per_token_output has 4 entries, expected at least one per logits row \(5\)"),
    ("drafts rows", lambda c: setattr(c, "draft_tokens", c.draft_tokens[:2]), r"draft_tokens has shape \[2, 3\], expected \[N = 3, D\]"),
    ("drafts int32", lambda c: setattr(c, "draft_tokens", c.draft_tokens.astype(np.int32)), "draft_tokens has dtype int32, expected int64"),
    # values that would index out of range
    ("row outside slot", lambda c: c.cu_seqlens_q_output.__setitem__(1, 2), r"row 2 has slot 0 but cu_seqlens_q_output gives slot 0 the rows \[0, 2\)"),
    ("cur_len past S", lambda c: c.cur_len.__setitem__(0, 6), r"cur_len\[0\] = 6 but pre_ids has positions up to S - 1 = 5"),
    ("drafts too narrow", lambda c: setattr(c, "draft_tokens", c.draft_tokens[:, :2]), r"row 2 is draft position 2 of slot 0 .* only D = 2 columns"),
    ("temperature 0", lambda c: c.temperatures.__setitem__(2, 0.0), r"temperatures\[2\] = 0, expected > 0"),
    ("temperature nan", lambda c: c.temperatures.__setitem__(0, np.nan), r"temperatures\[0\] = nan, expected > 0"),
]


def _logits_rows(case, rows):
    case.logits = case.logits[:rows]


OUTPUT_ROWS_ERRORS = [
    # slot 2's row 3 is not in a 3-row logits tensor: it would silently stay unpenalised
    ("T_out past logits", lambda c: _logits_rows(c, 3),
     r"cu_seqlens_q_output\[bsz = 3\] = 4 output rows but logits has 3 rows; expected cu_seqlens_q_output\[bsz\] <= rows"),
    ("decreasing cu", lambda c: c.cu_seqlens_q_output.__setitem__(2, 2),
     r"cu_seqlens_q_output\[2\] = 2 < cu_seqlens_q_output\[1\] = 3, expected a non-decreasing prefix sum"),
    ("cu[0] != 0", lambda c: (c.cu_seqlens_q_output.__setitem__(0, 1), c.batch_id_per_token_output.__setitem__(0, -1)),
     r"cu_seqlens_q_output\[0\] = 1, expected 0"),
]


@pytest.mark.parametrize("what, mutate, match", OUTPUT_ROWS_ERRORS, ids=[e[0] for e in OUTPUT_ROWS_ERRORS])
def test_speculate_get_token_penalty_multi_scores_rejects_output_index_inconsistent_with_rows(what, mutate, match):
    """Regression (issue 16): cu_seqlens_q_output was not checked against the logits rows, so an
    index describing more rows than logits has (T_out = cu[bsz] > rows) left the missing rows
    unpenalised without a word. The CPU op now requires cu[0] = 0, a non-decreasing cu and
    cu[bsz] <= rows (rows may exceed T_out: capacity buffers), before any row is written."""
    case = _bad(mutate)
    args = [paddle.to_tensor(a) for a in case.args()]
    with pytest.raises(ValueError, match=match):
        speculate_get_token_penalty_multi_scores(*args, case.max_seq_len, paddle.to_tensor(case.draft_tokens))
    np.testing.assert_array_equal(args[1].numpy(), case.logits)  # nothing written


def test_speculate_get_token_penalty_multi_scores_logits_sliced_to_t_out():
    """The allowed relation's edge: logits with exactly T_out = cu[bsz] rows (sliced from the
    capacity buffer) is fine; batch_id_per_token_output keeps its capacity."""
    case = three_slot_case()
    case.logits = case.logits[:4]
    np.testing.assert_array_equal(run_op(case), EXPECTED_WITH_DRAFTS[:4])


@pytest.mark.parametrize("what, mutate, match", ERRORS, ids=[e[0] for e in ERRORS])
def test_speculate_get_token_penalty_multi_scores_rejects_bad_input(what, mutate, match):
    case = _bad(mutate)
    args = [paddle.to_tensor(a) for a in case.args()]
    with pytest.raises(ValueError, match=match):
        speculate_get_token_penalty_multi_scores(*args, case.max_seq_len, paddle.to_tensor(case.draft_tokens))
