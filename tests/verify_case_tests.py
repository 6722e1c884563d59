"""speculate_verify tests written once for both backends (the cases live in tests/verify_cases.py):
tests/ops (the Paddle op) and tests/gpu (the CUDA kernel) import the test_* functions below and define
the fixtures they take:

- run(case) -> {field: numpy array} for OUT_FIELDS, the four arrays the op updates;
- run_top_p_candidates(probs, top_p, candidates_len) -> (verify_tokens, verify_scores,
  actual_candidate_lens) as numpy, the backend's top_p_candidates over rows of slot 0;
- reference_grid: (bsz, kind, seed) of the randomized comparison, parametrized by each backend
  (the GPU runs a larger grid).
Sizes that differed between the two former copies are both run on both backends."""

from __future__ import annotations

import numpy as np
import pytest

from tests.chi_square import chi2_pvalue
from reference.speculate_verify import ref_speculate_verify
from tests.verify_cases import (LITERAL_CASES, LITERAL_VARIANTS, OPTION_CASES, OUT_FIELDS, distribution_case,
                                literal_case, make_verify_case, strategy_literal_cases, topp_outside_set_case)

STRATEGIES = ("greedy", "target_match", "topp", "rejection")
ROW_FIELDS = ("sampled_token_ids", "verify_tokens", "verify_scores", "actual_candidate_len", "target_probs")
NOT_PER_SLOT = ROW_FIELDS + ("cu_seqlens_q_output", "end_tokens")


def assert_outputs(got: dict, want: dict, what: str = ""):
    for f in OUT_FIELDS:
        np.testing.assert_array_equal(got[f].reshape(want[f].shape), want[f], err_msg=f"{what}: {f}")


@pytest.mark.parametrize("variant", [v[0] for v in LITERAL_VARIANTS])
@pytest.mark.parametrize("name", list(LITERAL_CASES))
def test_speculate_verify_literal(run, name, variant):
    """Three slots worked by hand (tests/verify_cases.py LITERAL_CASES), every strategy."""
    case, expected = literal_case(name, variant)
    assert_outputs(run(case), expected, f"{name}/{variant}")


@pytest.mark.parametrize("name", list(strategy_literal_cases()))
def test_speculate_verify_strategy_literal(run, name):
    """topp candidate set (nothing outside it), target_match's sampled ids, rejection's q == p,
    q(x) == 0 and empty-residual rules, worked by hand."""
    case, expected = strategy_literal_cases()[name]
    assert_outputs(run(case), expected, name)


def test_speculate_verify_topp_rejects_second_candidate_outside_top_p_set(run, run_top_p_candidates):
    """Regression (issue 16): top_p_candidates wrote the whole top-C list past
    actual_candidate_lens and speculate_verify's topp verify-window fallback matched a draft with
    the second entry whatever the length, so a draft outside the top-p set followed by top-1
    matches was accepted (accept_num 4) where FastDeploy, which zero-fills past the length,
    rejects it (accept_num 1). Row 0 keeps one candidate (0.7 >= top_p 0.6) and the draft is its
    second most likely token; the correction is sampled from the one-candidate set: token 5.
    Both ops of the backend are chained as in the sampler."""
    probs, top_p, case = topp_outside_set_case()
    tokens, scores, lens = run_top_p_candidates(probs, top_p, 5)
    np.testing.assert_array_equal(lens, [1, 1, 1, 1])
    np.testing.assert_array_equal(tokens[0], [5, -1, -1, -1, -1])
    case = dict(case, verify_tokens=tokens, verify_scores=scores, actual_candidate_len=lens)
    got = run(case)
    np.testing.assert_array_equal(got["accept_num"], [1])
    np.testing.assert_array_equal(got["accept_tokens"], [[5, -1, -1, -1]])
    np.testing.assert_array_equal(got["step_idx"], [6])
    # verify reads only the first actual_candidate_len entries: with the whole top-C list (what
    # top_p_candidates used to write) the draft is still rejected.
    order = np.argsort(-probs, axis=1, kind="stable")[:, :5].astype(np.int64)
    full = dict(case, verify_tokens=order, verify_scores=np.take_along_axis(probs, order, axis=1))
    assert run(full)["accept_num"].tolist() == [1]
    assert_outputs(got, ref_speculate_verify(**case), "reference")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_speculate_verify_matches_reference(run, reference_grid, strategy):
    bsz, kind, seed = reference_grid
    case = make_verify_case(seed, bsz, kind, strategy)
    assert_outputs(run(case), ref_speculate_verify(**case), f"{strategy} bsz={bsz} {kind}")


@pytest.mark.parametrize("strategy, options", OPTION_CASES)
def test_speculate_verify_matches_reference_options(run, strategy, options):
    for bsz, seed in ((3, 5), (17, 6), (256, 7), (1024, 7)):
        case = make_verify_case(seed, bsz, "mixed", strategy, **options)
        assert_outputs(run(case), ref_speculate_verify(**case), f"{strategy} {options} bsz={bsz}")


@pytest.mark.parametrize(
    "vocab",
    # not multiples of any block/tile size; the CUDA block splits V into 512 chunks, so 511/512/513
    # put the threshold in a ragged last chunk, an empty chunk, or past a chunk boundary; 8193 = one
    # past 2^13
    [100, 111, 511, 512, 513, 8193, 151936],
)
def test_speculate_verify_rejection_vocab_boundary(run, vocab):
    """vLLM's GHSA-8wr5-jm2h-8r4f: a vocab that is not a multiple of the tile let an all-zero tail
    produce an id >= V. Every row here puts its mass at the vocabulary's ends (ids 0 and V - 1)
    or spreads it so float32 rounding leaves the sum off 1; emitted ids must stay in [0, V)."""
    case = make_verify_case(vocab, 17, "all_decode", "rejection", vocab=vocab)
    p = case["target_probs"]
    p[0::3] = 0.0
    p[0::3, vocab - 1] = 1.0  # all mass on the last id
    p[1::3, :-2] = 0.0
    p[1::3, -2:] = [0.3, 0.6]  # mass 0.9 in the tail: the inverse CDF must renormalise
    got = run(case)
    assert_outputs(got, ref_speculate_verify(**case), f"V={vocab}")
    emitted = np.concatenate([got["accept_tokens"][b, :n] for b, n in enumerate(got["accept_num"])])
    assert ((emitted >= 0) & (emitted < vocab)).all()


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_speculate_verify_one_hot_targets_reduce_to_greedy(run, strategy):
    """docs/spec.md §4.5: with temperature 0 (one-hot target rows) every strategy is greedy."""
    for bsz, seed in ((1, 1), (17, 2), (256, 3), (1024, 3)):
        case = make_verify_case(seed, bsz, "mixed", strategy, one_hot=True)
        greedy = dict(case, verify_strategy="greedy", target_probs=None, draft_probs=None)
        assert_outputs(run(case), run(greedy), f"{strategy} bsz={bsz}")


@pytest.mark.parametrize("bsz", [64, 256])
@pytest.mark.parametrize("strategy", ["rejection", "topp"])
def test_speculate_verify_deterministic_when_seeded(run, strategy, bsz):
    """vLLM test_deterministic_when_seeded: 20 repetitions give identical outputs."""
    case = make_verify_case(11, bsz, "all_decode", strategy)
    first = run(case)
    for _ in range(19):
        assert_outputs(run(case), first, "repetition")
    other = run(dict(case, infer_seed=case["infer_seed"] + 1))
    assert not all(np.array_equal(first[f], other[f]) for f in OUT_FIELDS), "seeds are ignored"


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


def _tile_slot(case: dict, b: int, n: int) -> dict:
    """n copies of slot b of `case` (each with its own copy of the slot's rows)."""
    s, e = int(case["cu_seqlens_q_output"][b]), int(case["cu_seqlens_q_output"][b + 1])
    out = {}
    for k, v in case.items():
        if k in ROW_FIELDS:
            out[k] = None if v is None else np.concatenate([v[s:e]] * n)
        elif k == "cu_seqlens_q_output":
            out[k] = (np.arange(n + 1) * (e - s)).astype(np.int32)
        elif isinstance(v, np.ndarray) and k != "end_tokens":
            out[k] = np.repeat(v[b:b + 1], n, axis=0)
        else:
            out[k] = v
    return out


@pytest.mark.parametrize("strategy", ["rejection", "topp"])
def test_speculate_verify_seeded_slot_is_batch_invariant(run, strategy):
    """vLLM test_stochastic_batch_invariance: a seeded slot gives the same tokens alone, among
    other slots, at another slot position with other row offsets, and copied into all 1024
    positions of a batch (different row offsets, blocks and neighbours)."""
    case = make_verify_case(21, 17, "all_decode", strategy)
    case["is_block_step"][:] = False
    case["stop_flags"][:] = False
    case["reasoning_status"][:] = 0
    b = int(np.argmax(case["seq_lens_this_time"]))  # a slot with the most drafts
    one = _slot_of(case, b)
    alone = run(one)
    among = run(case)
    other_pos = 9 if b != 9 else 4
    moved = run(_embed(one, case, other_pos))
    for f in OUT_FIELDS:
        np.testing.assert_array_equal(among[f][b], alone[f][0], err_msg=f"among others: {f}")
        np.testing.assert_array_equal(moved[f][other_pos], alone[f][0], err_msg=f"moved: {f}")
    tiled_alone, tiled = run(_tile_slot(case, b, 1)), run(_tile_slot(case, b, 1024))
    for f in OUT_FIELDS:
        assert (tiled[f] == tiled_alone[f][0]).all(), f"{f} differs across positions"


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("strategy", ["rejection", "target_match"])
def test_speculate_verify_first_token_follows_target_distribution(run, strategy, k):
    """Lossless strategies: over 120k independent slots (vocab 10, drafts drawn from q), the first
    emitted token is distributed as p (Pearson chi-square, fixed seed, p-value > 1e-3)."""
    case, p = distribution_case(seed=1234 + k, num_slots=120_000, k=k, strategy=strategy)
    got = run(case)
    counts = np.bincount(got["accept_tokens"][:, 0], minlength=p.shape[0])
    assert got["accept_num"].min() >= 1
    pvalue = chi2_pvalue(counts, p)
    assert pvalue > 1e-3, f"first tokens {counts} do not follow p = {p.round(3)} (p-value {pvalue:.2e})"
    if strategy == "rejection":  # the drafts are actually accepted at a sensible rate
        assert got["accept_num"].mean() > 1.2


def test_speculate_verify_topp_is_lossy(run):
    """topp accepts any draft in the top candidates, so its first token is not distributed as p:
    here every first token is one of the top-2 ids although p spreads over 10 (documented lossy)."""
    case, p = distribution_case(seed=99, num_slots=120_000, k=3, strategy="topp")
    counts = np.bincount(run(case)["accept_tokens"][:, 0], minlength=p.shape[0])
    assert chi2_pvalue(counts, p) < 1e-6
    top2 = np.argsort(-p, kind="stable")[:2]
    assert counts[top2].sum() == counts.sum()
