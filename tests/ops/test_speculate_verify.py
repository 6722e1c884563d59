"""speculate_verify on CPU: literal cases per strategy, randomized comparison with the numpy
reference, seeded determinism and batch invariance, distribution tests, argument errors."""

import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import speculate_verify, top_p_candidates
from tests.cases import all_cases
from tests.reference.speculate_verify import ref_speculate_verify
from tests.chi_square import chi2_pvalue
from tests.verify_cases import (LITERAL_CASES, LITERAL_VARIANTS, OPTION_CASES, OUT_FIELDS, distribution_case, literal_case,
                                make_verify_case, strategy_literal_cases, topp_outside_set_case)

STRATEGIES = ("greedy", "target_match", "topp", "rejection")


def _run(case: dict) -> dict:
    """Runs the op on Paddle CPU tensors built from the case; returns the four updated arrays."""
    args = {k: paddle.to_tensor(v) if isinstance(v, np.ndarray) else v for k, v in case.items()}
    assert speculate_verify(**args) is None
    return {f: args[f].numpy() for f in OUT_FIELDS}


def _assert_outputs(got: dict, want: dict, what: str = ""):
    for f in OUT_FIELDS:
        np.testing.assert_array_equal(got[f].reshape(want[f].shape), want[f], err_msg=f"{what}: {f}")


@pytest.mark.parametrize("variant", [v[0] for v in LITERAL_VARIANTS])
@pytest.mark.parametrize("name", list(LITERAL_CASES))
def test_speculate_verify_literal(name, variant):
    """Three slots worked by hand (tests/verify_cases.py LITERAL_CASES), every strategy."""
    case, expected = literal_case(name, variant)
    _assert_outputs(_run(case), expected, f"{name}/{variant}")


@pytest.mark.parametrize("name", list(strategy_literal_cases()))
def test_speculate_verify_strategy_literal(name):
    """topp candidate set (nothing outside it), target_match's sampled ids, rejection's q == p,
    q(x) == 0 and empty-residual rules, worked by hand."""
    case, expected = strategy_literal_cases()[name]
    _assert_outputs(_run(case), expected, name)


def test_speculate_verify_topp_rejects_second_candidate_outside_top_p_set():
    """Regression (issue 16): top_p_candidates wrote the whole top-C list past
    actual_candidate_lens and speculate_verify's topp verify-window fallback matched a draft with
    the second entry whatever the length, so a draft outside the top-p set followed by top-1
    matches was accepted (accept_num 4) where FastDeploy, which zero-fills past the length,
    rejects it (accept_num 1). Row 0 keeps one candidate (0.7 >= top_p 0.6) and the draft is its
    second most likely token; the correction is sampled from the one-candidate set: token 5."""
    probs, top_p, case = topp_outside_set_case()
    cand = top_p_candidates(paddle.to_tensor(probs), paddle.to_tensor(top_p),
                            paddle.to_tensor(np.zeros(4, np.int32)), 5, 0)
    np.testing.assert_array_equal(cand.actual_candidate_lens.numpy(), [1, 1, 1, 1])
    np.testing.assert_array_equal(cand.verify_tokens.numpy()[0], [5, -1, -1, -1, -1])
    case = dict(case, verify_tokens=cand.verify_tokens.numpy(), verify_scores=cand.verify_scores.numpy(),
                actual_candidate_len=cand.actual_candidate_lens.numpy())
    got = _run(case)
    np.testing.assert_array_equal(got["accept_num"], [1])
    np.testing.assert_array_equal(got["accept_tokens"], [[5, -1, -1, -1]])
    np.testing.assert_array_equal(got["step_idx"], [6])
    # verify reads only the first actual_candidate_len entries: with the whole top-C list (what
    # top_p_candidates used to write) the draft is still rejected.
    order = np.argsort(-probs, axis=1, kind="stable")[:, :5].astype(np.int64)
    full = dict(case, verify_tokens=order, verify_scores=np.take_along_axis(probs, order, axis=1))
    assert _run(full)["accept_num"].tolist() == [1]
    _assert_outputs(got, ref_speculate_verify(**case), "reference")


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("bsz, kind, seed", all_cases())
def test_speculate_verify_matches_reference(bsz, kind, seed, strategy):
    case = make_verify_case(seed, bsz, kind, strategy)
    _assert_outputs(_run(case), ref_speculate_verify(**case), f"{strategy} bsz={bsz} {kind}")


@pytest.mark.parametrize("strategy, options", OPTION_CASES)
def test_speculate_verify_matches_reference_options(strategy, options):
    for bsz, seed in ((3, 5), (17, 6), (256, 7)):
        case = make_verify_case(seed, bsz, "mixed", strategy, **options)
        _assert_outputs(_run(case), ref_speculate_verify(**case), f"{strategy} {options} bsz={bsz}")


@pytest.mark.parametrize(
    "vocab",
    [100, 111, 8193, 151936],  # not multiples of any block/tile size; 8193 = one past 2^13
)
def test_speculate_verify_rejection_vocab_boundary(vocab):
    """vLLM's GHSA-8wr5-jm2h-8r4f: a vocab that is not a multiple of the tile let an all-zero tail
    produce an id >= V. Every row here puts its mass at the vocabulary's ends (ids 0 and V - 1)
    or spreads it so float32 rounding leaves the sum off 1; emitted ids must stay in [0, V)."""
    case = make_verify_case(vocab, 17, "all_decode", "rejection", vocab=vocab)
    p = case["target_probs"]
    p[0::3] = 0.0
    p[0::3, vocab - 1] = 1.0  # all mass on the last id
    p[1::3, :-2] = 0.0
    p[1::3, -2:] = [0.3, 0.6]  # mass 0.9 in the tail: the inverse CDF must renormalise
    got = _run(case)
    _assert_outputs(got, ref_speculate_verify(**case), f"V={vocab}")
    emitted = np.concatenate([got["accept_tokens"][b, :n] for b, n in enumerate(got["accept_num"])])
    assert ((emitted >= 0) & (emitted < vocab)).all()


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_speculate_verify_one_hot_targets_reduce_to_greedy(strategy):
    """docs/spec.md §4.5: with temperature 0 (one-hot target rows) every strategy is greedy."""
    for bsz, seed in ((1, 1), (17, 2), (256, 3)):
        case = make_verify_case(seed, bsz, "mixed", strategy, one_hot=True)
        greedy = dict(case, verify_strategy="greedy", target_probs=None, draft_probs=None)
        _assert_outputs(_run(case), _run(greedy), f"{strategy} bsz={bsz}")


@pytest.mark.parametrize("strategy", ["rejection", "topp"])
def test_speculate_verify_deterministic_when_seeded(strategy):
    """vLLM test_deterministic_when_seeded: 20 repetitions give identical outputs."""
    case = make_verify_case(11, 64, "all_decode", strategy)
    first = _run(case)
    for _ in range(19):
        _assert_outputs(_run(case), first, "repetition")
    other = _run(dict(case, infer_seed=case["infer_seed"] + 1))
    assert not all(np.array_equal(first[f], other[f]) for f in OUT_FIELDS), "seeds are ignored"


ROW_FIELDS = ("sampled_token_ids", "verify_tokens", "verify_scores", "actual_candidate_len", "target_probs")
NOT_PER_SLOT = ROW_FIELDS + ("cu_seqlens_q_output", "end_tokens")


def _slot_of(case: dict, b: int) -> dict:
    """Slot b of a case as a one-slot case (its rows copied out of the packed row tensors)."""
    s, e = int(case["cu_seqlens_q_output"][b]), int(case["cu_seqlens_q_output"][b + 1])
    one = dict(case, cu_seqlens_q_output=np.array([0, e - s], np.int32))
    for k, v in case.items():
        if k in ROW_FIELDS and v is not None:
            one[k] = v[s:e].copy()
        elif isinstance(v, np.ndarray) and k not in NOT_PER_SLOT:
            one[k] = v[b:b + 1].copy()
    return one


def _embed(one: dict, case: dict, b: int) -> dict:
    """`case` with slot b replaced by the one-slot case `one`, rows re-packed in slot order."""
    cu = case["cu_seqlens_q_output"]
    spans = [(one, 0, int(one["cu_seqlens_q_output"][1])) if j == b else (case, int(cu[j]), int(cu[j + 1]))
             for j in range(len(cu) - 1)]
    out = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in case.items()}
    for k in ROW_FIELDS:
        if case[k] is not None:
            out[k] = np.concatenate([src[k][s:e] for src, s, e in spans] + [case[k][cu[-1]:]])
    out["cu_seqlens_q_output"] = np.concatenate([[0], np.cumsum([e - s for _, s, e in spans])]).astype(np.int32)
    for k, v in one.items():
        if isinstance(v, np.ndarray) and k not in NOT_PER_SLOT:
            out[k][b] = v[0]
    return out


@pytest.mark.parametrize("strategy", ["rejection", "topp"])
def test_speculate_verify_seeded_slot_is_batch_invariant(strategy):
    """vLLM test_stochastic_batch_invariance: a seeded slot gives the same tokens alone, among
    other slots, and at another slot position with other row offsets."""
    case = make_verify_case(21, 17, "all_decode", strategy)
    case["is_block_step"][:] = False
    case["stop_flags"][:] = False
    case["reasoning_status"][:] = 0
    b = int(np.argmax(case["seq_lens_this_time"]))  # a slot with the most drafts
    one = _slot_of(case, b)
    alone = _run(one)
    among = _run(case)
    other_pos = 9 if b != 9 else 4
    moved = _run(_embed(one, case, other_pos))
    for f in OUT_FIELDS:
        np.testing.assert_array_equal(among[f][b], alone[f][0], err_msg=f"among others: {f}")
        np.testing.assert_array_equal(moved[f][other_pos], alone[f][0], err_msg=f"moved: {f}")


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("strategy", ["rejection", "target_match"])
def test_speculate_verify_first_token_follows_target_distribution(strategy, k):
    """Lossless strategies: over 120k independent slots (vocab 10, drafts drawn from q), the first
    emitted token is distributed as p (Pearson chi-square, fixed seed, p-value > 1e-3)."""
    case, p = distribution_case(seed=1234 + k, num_slots=120_000, k=k, strategy=strategy)
    got = _run(case)
    counts = np.bincount(got["accept_tokens"][:, 0], minlength=p.shape[0])
    assert got["accept_num"].min() >= 1
    pvalue = chi2_pvalue(counts, p)
    assert pvalue > 1e-3, f"first tokens {counts} do not follow p = {p.round(3)} (p-value {pvalue:.2e})"
    if strategy == "rejection":  # the drafts are actually accepted at a sensible rate
        assert got["accept_num"].mean() > 1.2


def test_speculate_verify_topp_is_lossy():
    """topp accepts any draft in the top candidates, so its first token is not distributed as p:
    here every first token is one of the top-2 ids although p spreads over 10 (documented lossy)."""
    case, p = distribution_case(seed=99, num_slots=120_000, k=3, strategy="topp")
    counts = np.bincount(_run(case)["accept_tokens"][:, 0], minlength=p.shape[0])
    assert chi2_pvalue(counts, p) < 1e-6
    top2 = np.argsort(-p, kind="stable")[:2]
    assert counts[top2].sum() == counts.sum()


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
    _assert_outputs(_run(case), expected, "[N, 1] shapes")


@pytest.mark.parametrize("index, name", list(enumerate(["topp", "greedy", "target_match", "rejection"])))
def test_speculate_verify_strategy_given_as_fastdeploy_int(index, name):
    """FastDeploy's VerifyStrategy values (TOPP 0, GREEDY 1, TARGET_MATCH 2) and ours (3) select
    the same strategy as the names; random cases make every strategy's output distinct."""
    case = make_verify_case(31, 64, "all_decode", name)
    _assert_outputs(_run(dict(case, verify_strategy=index)), ref_speculate_verify(**case), name)


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
        _run(case)
