import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import top_p_candidates
from tests.cases import all_cases, make_step_batch, pack_output_index
from tests.reference.top_p_candidates import ref_top_p_candidates
from tests.sampling_fixtures import output_index, random_probs, random_top_p


def _run(probs, top_p, batch_ids, C):
    out = top_p_candidates(paddle.to_tensor(np.asarray(probs, np.float32)), paddle.to_tensor(np.asarray(top_p, np.float32)),
                           paddle.to_tensor(np.asarray(batch_ids, np.int32)), C, 0)
    return out.verify_scores.numpy(), out.verify_tokens.numpy(), out.actual_candidate_lens.numpy()


def _assert_matches_reference(probs, top_p, batch_ids, C):
    scores, tokens, lens = _run(probs, top_p, batch_ids, C)
    want_scores, want_tokens, want_lens = ref_top_p_candidates(probs, top_p, batch_ids, C)
    np.testing.assert_array_equal(tokens, want_tokens)
    np.testing.assert_array_equal(lens, want_lens)
    # The scores are copies of input values, so they compare exactly (rtol = atol = 0).
    np.testing.assert_array_equal(scores, want_scores)


def test_top_p_candidates_literal_three_slots():
    """Slot 0 decodes with 2 rows, slot 1 is stopped (0 rows), slot 2 prefills (1 row);
    capacity 5, so rows 3 and 4 have no slot."""
    batch_ids, cu = pack_output_index([2, 0, 1], capacity=5)
    np.testing.assert_array_equal(batch_ids, [0, 0, 2, -1, -1])
    probs = np.array([
        [0.10, 0.40, 0.05, 0.30, 0.15],  # 0.4 + 0.3 >= 0.5 -> 2
        [0.25, 0.25, 0.10, 0.25, 0.15],  # three-way tie: ids 0, 1, 3; 0.25 + 0.25 >= 0.5 -> 2
        [0.50, 0.10, 0.10, 0.20, 0.10],  # tie at 0.1 goes to id 1; 0.8 < 0.95 -> C = 3
        [0.90, 0.05, 0.05, 0.00, 0.00],
        [0.20, 0.20, 0.20, 0.20, 0.20],
    ], dtype=np.float32)
    scores, tokens, lens = _run(probs, [0.5, 0.9, 0.95], batch_ids, 3)
    np.testing.assert_array_equal(tokens, [[1, 3, -1], [0, 1, -1], [0, 3, 1], [-1, -1, -1], [-1, -1, -1]])
    np.testing.assert_array_equal(scores, np.array(
        [[0.40, 0.30, 0], [0.25, 0.25, 0], [0.50, 0.20, 0.10], [0, 0, 0], [0, 0, 0]], dtype=np.float32))
    np.testing.assert_array_equal(lens, [2, 2, 3, 0, 0])
    assert scores.dtype == np.float32 and tokens.dtype == np.int64 and lens.dtype == np.int32


def test_top_p_candidates_length_is_c_when_top_c_mass_below_top_p():
    """Regression ([ours], docs/spec.md §8.8): FastDeploy's dispatched kernel
    leaves actual_candidate_lens at 0 when the C best probabilities sum to less than top_p, so
    speculate_verify's candidate check (draft among the first min(len, C) candidates) accepts
    nothing and every draft is rejected. A flat 100-token distribution with C = 5 has top-C
    mass 0.05 < top_p = 0.9: the length must be C."""
    probs = np.full((2, 100), 0.01, dtype=np.float32)
    scores, tokens, lens = _run(probs, [0.9], [0, 0], 5)
    np.testing.assert_array_equal(lens, [5, 5])
    np.testing.assert_array_equal(tokens, [[0, 1, 2, 3, 4]] * 2)


def test_top_p_candidates_ties_go_to_the_smaller_id():
    probs = np.array([[0.2, 0.3, 0.2, 0.3, 0.0]], dtype=np.float32)
    scores, tokens, lens = _run(probs, [0.55], [0], 4)
    np.testing.assert_array_equal(tokens, [[1, 3, -1, -1]])
    np.testing.assert_array_equal(lens, [2])


def test_top_p_candidates_all_equal_row():
    """V = 111 equal probabilities: the candidates are ids 0..C-1; 2/111 < 0.02 <= 3/111."""
    probs = np.full((2, 111), np.float32(1.0 / 111), dtype=np.float32)
    scores, tokens, lens = _run(probs, [0.02, 0.5], [0, 1], 10)
    np.testing.assert_array_equal(tokens, [[0, 1, 2] + [-1] * 7, list(range(10))])
    np.testing.assert_array_equal(lens, [3, 10])


def test_top_p_candidates_nan_ranks_as_minus_inf():
    probs = np.array([[np.nan, 0.2, np.nan, 0.5], [np.nan, 0.2, np.nan, 0.5]], dtype=np.float32)
    scores, tokens, lens = _run(probs, [0.6, 0.9], [0, 1], 4)
    np.testing.assert_array_equal(tokens, [[3, 1, -1, -1], [3, 1, 0, 2]])
    np.testing.assert_array_equal(scores, np.array([[0.5, 0.2, 0, 0], [0.5, 0.2, -np.inf, -np.inf]], dtype=np.float32))
    np.testing.assert_array_equal(lens, [2, 4])  # 0.7 < 0.9 and the -inf entries never add up


def test_top_p_candidates_vocab_smaller_than_c_pads():
    """V = 3 < C = 5: entries past V are 0 / -1 and the length counts only the V real ones."""
    probs = np.array([[0.2, 0.5, 0.3], [0.2, 0.5, 0.3]], dtype=np.float32)
    scores, tokens, lens = _run(probs, [0.6, 1.5], [0, 1], 5)
    np.testing.assert_array_equal(tokens, [[1, 2, -1, -1, -1], [1, 2, 0, -1, -1]])
    np.testing.assert_array_equal(scores, np.array([[0.5, 0.3, 0, 0, 0], [0.5, 0.3, 0.2, 0, 0]], dtype=np.float32))
    np.testing.assert_array_equal(lens, [2, 3])


def test_top_p_candidates_zero_top_p_keeps_one():
    scores, tokens, lens = _run(np.array([[0.3, 0.7]], np.float32), [0.0], [0], 2)
    np.testing.assert_array_equal(lens, [1])


def test_top_p_candidates_accepts_fastdeploy_column_top_p():
    probs = np.array([[0.1, 0.6, 0.3], [0.5, 0.2, 0.3]], dtype=np.float32)
    out = top_p_candidates(paddle.to_tensor(probs), paddle.to_tensor([[0.5], [0.7]], dtype="float32"),
                           paddle.to_tensor([0, 1], dtype="int32"), 2, 0)
    np.testing.assert_array_equal(out.actual_candidate_lens.numpy(), [1, 2])


def test_top_p_candidates_fewer_rows_than_batch_ids():
    """probs may be sliced to T_out rows while batch_id_per_token_output keeps its capacity."""
    probs = np.array([[0.1, 0.6, 0.3]], dtype=np.float32)
    scores, tokens, lens = _run(probs, [0.5], [0, -1, -1], 2)
    np.testing.assert_array_equal(tokens, [[1, -1]])  # 0.6 >= 0.5: one candidate
    np.testing.assert_array_equal(lens, [1])
    assert scores.shape == (1, 2) and lens.shape == (1,)


@pytest.mark.parametrize("C", [1, 2, 5, 10])
@pytest.mark.parametrize("bsz, kind, seed", all_cases())
def test_top_p_candidates_matches_reference(bsz, kind, seed, C):
    rng = np.random.default_rng(seed + C)
    batch = make_step_batch(rng, bsz, kind)
    _, batch_ids, _ = output_index(batch)
    probs = random_probs(rng, batch_ids.shape[0], 111)
    _assert_matches_reference(probs, random_top_p(rng, bsz), batch_ids, C)


@pytest.mark.parametrize("C, vocab", [(13, 111), (20, 111), (37, 111), (64, 111), (65, 111), (100, 111), (100, 57)])
def test_top_p_candidates_matches_reference_large_c(C, vocab):
    rng = np.random.default_rng(C * 1000 + vocab)
    batch = make_step_batch(rng, 17, "mixed")
    _, batch_ids, _ = output_index(batch)
    probs = random_probs(rng, batch_ids.shape[0], vocab)
    _assert_matches_reference(probs, random_top_p(rng, 17), batch_ids, C)


def test_top_p_candidates_matches_reference_qwen_vocab():
    """V = 151936 (Qwen), the size the CUDA kernel is tuned for."""
    rng = np.random.default_rng(151936)
    batch_ids, _ = pack_output_index([3, 0, 1, 2], capacity=8)
    probs = random_probs(rng, 8, 151936)
    _assert_matches_reference(probs, random_top_p(rng, 4), batch_ids, 5)


def _good_inputs():
    return dict(probs=paddle.to_tensor(np.full((3, 4), 0.25, np.float32)),
                top_p=paddle.to_tensor([0.5, 0.5], dtype="float32"),
                batch_id_per_token_output=paddle.to_tensor([0, 1, -1], dtype="int32"),
                candidates_len=2, max_seq_len=0)


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("probs", paddle.to_tensor(np.full((3, 4), 0.25)), "probs has dtype float64, expected float32"),
        ("probs", paddle.to_tensor(np.full(4, 0.25, np.float32)), r"probs has shape \[4\], expected a 2-D tensor"),
        ("probs", paddle.zeros([3, 0], dtype="float32"), r"probs has shape \[3, 0\], expected a vocab dimension >= 1"),
        ("top_p", paddle.to_tensor([1, 1], dtype="int32"), "top_p has dtype int32, expected float32"),
        ("top_p", paddle.to_tensor([[0.5, 0.5]], dtype="float32"), r"top_p has shape \[1, 2\], expected a per-slot"),
        ("batch_id_per_token_output", paddle.to_tensor([0, 1, -1], dtype="int64"),
         "batch_id_per_token_output has dtype int64, expected int32"),
        ("batch_id_per_token_output", paddle.to_tensor([0, 1], dtype="int32"),
         r"batch_id_per_token_output has 2 entries, expected at least one per probs row \(3\)"),
        ("batch_id_per_token_output", paddle.to_tensor([0, 2, -1], dtype="int32"),
         r"batch_id_per_token_output\[1\] = 2, expected -1 \(no slot\) or a slot in \[0, 2\)"),
        ("batch_id_per_token_output", paddle.to_tensor([0, -2, -1], dtype="int32"),
         r"batch_id_per_token_output\[1\] = -2, expected -1"),
        ("candidates_len", 0, "candidates_len = 0, expected 1 <= candidates_len <= 100"),
        ("candidates_len", 101, "candidates_len = 101, expected 1 <= candidates_len <= 100"),
    ],
)
def test_top_p_candidates_rejects_bad_input(field, value, match):
    args = _good_inputs()
    args[field] = value
    with pytest.raises(ValueError, match=match):
        top_p_candidates(**args)


def test_top_p_candidates_rejects_non_int_candidates_len():
    args = _good_inputs()
    args["candidates_len"] = 5.0
    with pytest.raises(TypeError, match="candidates_len must be a host int, got float"):
        top_p_candidates(**args)
