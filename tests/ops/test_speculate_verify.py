"""speculate_verify on CPU: the tests shared with the CUDA kernel (tests/verify_case_tests.py: literal
cases per strategy, randomized comparison with the numpy reference, seeded determinism and batch
invariance, distribution tests) run on the Paddle op here, plus FastDeploy shapes and argument errors."""

import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import speculate_verify, top_p_candidates
from reference.cases.step_batch import all_cases
from reference.speculate_verify import ref_speculate_verify
from tests.verify_case_tests import (  # noqa: F401  written once, also run on the CUDA kernel
    assert_outputs, test_speculate_verify_deterministic_when_seeded,
    test_speculate_verify_first_token_follows_target_distribution, test_speculate_verify_literal,
    test_speculate_verify_matches_reference, test_speculate_verify_matches_reference_options,
    test_speculate_verify_one_hot_targets_reduce_to_greedy, test_speculate_verify_rejection_vocab_boundary,
    test_speculate_verify_seeded_slot_is_batch_invariant, test_speculate_verify_strategy_literal,
    test_speculate_verify_topp_is_lossy, test_speculate_verify_topp_rejects_second_candidate_outside_top_p_set,
)
from tests.verify_cases import OUT_FIELDS, literal_case, make_verify_case


def run_op(case: dict) -> dict:
    """Runs the op on Paddle CPU tensors built from the case; returns the four updated arrays."""
    args = {k: paddle.to_tensor(v) if isinstance(v, np.ndarray) else v for k, v in case.items()}
    assert speculate_verify(**args) is None
    return {f: args[f].numpy() for f in OUT_FIELDS}


def run_top_p_candidates_op(probs, top_p, candidates_len):
    cand = top_p_candidates(paddle.to_tensor(probs), paddle.to_tensor(top_p),
                            paddle.to_tensor(np.zeros(probs.shape[0], np.int32)), candidates_len, 0)
    return cand.verify_tokens.numpy(), cand.verify_scores.numpy(), cand.actual_candidate_lens.numpy()


@pytest.fixture
def run():
    """The backend of the shared tests (tests/verify_case_tests.py): the Paddle op."""
    return run_op


@pytest.fixture
def run_top_p_candidates():
    return run_top_p_candidates_op


@pytest.fixture(params=all_cases(), ids=lambda p: "-".join(map(str, p)))
def reference_grid(request):
    """(bsz, kind, seed) of test_speculate_verify_matches_reference: the shared randomized grid."""
    return request.param


def test_speculate_verify_chi2_helper_matches_table():
    """The hand-computed chi-square tail used without scipy: table value chi2_{0.001}(9) = 27.877."""
    from tests.chi_square import gamma_q

    assert abs(gamma_q(4.5, 27.877 / 2) - 1e-3) < 1e-5
    assert abs(gamma_q(1.0, 1.0) - np.exp(-1.0)) < 1e-12  # df = 2: sf(x) = exp(-x / 2)


def test_speculate_verify_accepts_fastdeploy_column_shapes():
    """FastDeploy passes per-slot tensors as [N, 1] and sampled ids as [T_out, 1]."""
    case, expected = literal_case("match_and_mismatch", "greedy")
    for k in ("accept_num", "step_idx", "stop_flags", "seq_lens_encoder", "seq_lens_decoder", "max_dec_len",
              "is_block_step", "topp", "seq_lens_this_time", "sampled_token_ids", "actual_candidate_len"):
        case[k] = case[k].reshape(-1, 1)
    assert_outputs(run_op(case), expected, "[N, 1] shapes")


@pytest.mark.parametrize("index, name", list(enumerate(["topp", "greedy", "target_match", "rejection"])))
def test_speculate_verify_strategy_given_as_fastdeploy_int(index, name):
    """FastDeploy's VerifyStrategy values (TOPP 0, GREEDY 1, TARGET_MATCH 2) and ours (3) select
    the same strategy as the names; random cases make every strategy's output distinct."""
    case = make_verify_case(31, 64, "all_decode", name)
    assert_outputs(run_op(dict(case, verify_strategy=index)), ref_speculate_verify(**case), name)


def _literal(**overrides):
    case, _ = literal_case("match_and_mismatch", "rejection_uniform_q")
    case.update(overrides)
    return case


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(accept_num=np.zeros(3, np.int64)), "accept_num has dtype int64, expected int32"),
        (dict(target_probs=np.zeros((12, 16), np.float64)), "target_probs has dtype float64, expected float32"),
        (dict(draft_tokens=np.zeros((3, 5), np.int64)),
         r"draft_tokens has shape \[3, 5\], expected \[max_num_seqs, max_draft_tokens\].* = \[3, 4\]"),
        (dict(verify_scores=np.zeros((11, 2), np.float32)), r"verify_scores has shape \[11, 2\], expected \[rows"),
        (dict(cu_seqlens_q_output=np.zeros(3, np.int32)),
         r"cu_seqlens_q_output has shape \[3\], expected \[bsz \+ 1\]"),
        (dict(step_idx=np.zeros(2, np.int64)), "step_idx has 2 slots .*expected bsz = 3"),
        (dict(draft_probs=np.zeros((3, 2, 16), np.float32)), r"draft_probs has shape \[3, 2, 16\], expected"),
        (dict(target_probs=None), "draft_probs was given without target_probs"),
        (dict(target_probs=None, draft_probs=None), "verify_strategy 'rejection' needs target_probs"),
        (dict(verify_strategy="greedy"), "verify_strategy 'greedy' does not read target_probs"),
        (dict(verify_strategy="typical"), r"verify_strategy = 'typical', expected one of"),
        (dict(accept_policy="some"), r"accept_policy = 'some', expected one of"),
        (dict(verify_strategy=7), r"verify_strategy = 7, expected one of"),
        (dict(verify_window=-1), "verify_window = -1, expected >= 0"),
        (dict(infer_seed=np.zeros(3, np.int32)), "infer_seed has dtype int32, expected int64"),
        (dict(cu_seqlens_q_output=np.array([0, 4, 9, 13], np.int32)),
         r"slot 2 reads output rows \[9, 13\) .*expected within \[0, rows = 12\)"),
        (dict(seq_lens_this_time=np.array([4, 5, 4], np.int32)),
         r"seq_lens_this_time\[1\] = 5 on a decode slot, expected <= max_draft_tokens = 4"),
        (dict(draft_tokens=np.array([[9, 5, 6, 7], [9, 5, 16, 7], [9, 1, 6, 7]], np.int64)),
         r"draft_tokens\[1, 2\] = 16, expected a token id in \[0, V = 16\)"),
    ],
)
def test_speculate_verify_rejects_bad_input(overrides, match):
    case = _literal(**overrides)
    args = {k: paddle.to_tensor(v) if isinstance(v, np.ndarray) else v for k, v in case.items()}
    with pytest.raises(ValueError, match=match):
        speculate_verify(**args)
    for f in OUT_FIELDS:  # every check runs before anything is written
        np.testing.assert_array_equal(args[f].numpy(), case[f], err_msg=f)


def test_speculate_verify_rejects_rows_past_the_capacity():
    """cu_seqlens_q_output built from blank lengths S - L_b (review defect 9) points past T_out:
    the CPU op refuses it instead of reading another slot's rows."""
    case = _literal()
    blank = 64 - case["seq_lens_this_time"]
    case["cu_seqlens_q_output"] = np.concatenate([[0], np.cumsum(blank)]).astype(np.int32)
    with pytest.raises(ValueError, match=r"slot 1 reads output rows \[60, 64\).*rows = 12"):
        run_op(case)
