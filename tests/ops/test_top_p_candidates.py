import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import top_p_candidates
from reference.cases.step_batch import all_cases, make_step_batch
from tests.sampling_fixtures import output_index, random_probs, random_top_p
from tests.top_p_cases import (  # noqa: F401  written once, also run on the CUDA kernel
    check_against_reference, test_top_p_candidates_length_is_c_when_top_c_mass_below_top_p,
    test_top_p_candidates_literal_three_slots, test_top_p_candidates_matches_reference,
    test_top_p_candidates_matches_reference_qwen_vocab,
)


def _run(probs, top_p, batch_ids, C):
    out = top_p_candidates(paddle.to_tensor(np.asarray(probs, np.float32)), paddle.to_tensor(np.asarray(top_p, np.float32)),
                           paddle.to_tensor(np.asarray(batch_ids, np.int32)), C, 0)
    return out.verify_scores.numpy(), out.verify_tokens.numpy(), out.actual_candidate_lens.numpy()


def _assert_matches_reference(probs, top_p, batch_ids, C):
    check_against_reference(_run(probs, top_p, batch_ids, C), probs, top_p, batch_ids, C)


@pytest.fixture
def run():
    """The backend of the shared tests (tests/top_p_cases.py): the Paddle op."""
    return _run


@pytest.fixture(params=[(*c, C) for c in all_cases() for C in (1, 2, 5, 10)], ids=lambda p: "-".join(map(str, p)))
def reference_grid(request):
    """(bsz, kind, seed, C): every batch size x kind, C = 1, 2, 5, 10."""
    return request.param


@pytest.fixture(params=[(5, 8, 151936, [3, 0, 1, 2])], ids=["C5-rows8"])
def qwen_grid(request):
    """(C, rows, seed, lens): four slots of 3, 0, 1, 2 rows, capacity 8, C = 5."""
    return request.param


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


@pytest.mark.parametrize("C, vocab", [(13, 111), (20, 111), (37, 111), (64, 111), (65, 111), (100, 111), (100, 57)])
def test_top_p_candidates_matches_reference_large_c(C, vocab):
    rng = np.random.default_rng(C * 1000 + vocab)
    batch = make_step_batch(rng, 17, "mixed")
    _, batch_ids, _ = output_index(batch)
    probs = random_probs(rng, batch_ids.shape[0], vocab)
    _assert_matches_reference(probs, random_top_p(rng, 17), batch_ids, C)


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
