"""speculate_verify CUDA kernels (standalone, through CuPy) against the numpy reference: the same
literal and randomized cases as tests/ops/test_speculate_verify.py, larger batches, the exact
CPU/GPU/reference agreement of the random strategies, and the CUDA-only bound checks."""


import numpy as np
import pytest

from tests.cases import BATCH_SIZES, KINDS
from tests.gpu.harness import launcher, ptr, require_gpu, stream
from kernel_harness.speculate_verify import launch_args, raw_launcher, run_verify_cuda, to_device
from tests.reference.speculate_verify import ref_speculate_verify
from tests.chi_square import chi2_pvalue
from tests.verify_cases import (LITERAL_CASES, LITERAL_VARIANTS, OPTION_CASES, OUT_FIELDS, distribution_case, literal_case,
                                make_verify_case, strategy_literal_cases, topp_outside_set_case)

cp = require_gpu()
STRATEGIES = ("greedy", "target_match", "topp", "rejection")
GPU_BATCH_SIZES = BATCH_SIZES + (1024,)


def _run(case):
    return run_verify_cuda(cp, case)


def _assert_outputs(got, want, what=""):
    for f in OUT_FIELDS:
        np.testing.assert_array_equal(got[f].reshape(want[f].shape), want[f], err_msg=f"{what}: {f}")


@pytest.mark.parametrize("variant", [v[0] for v in LITERAL_VARIANTS])
@pytest.mark.parametrize("name", list(LITERAL_CASES))
def test_speculate_verify_cuda_literal(name, variant):
    case, expected = literal_case(name, variant)
    _assert_outputs(_run(case), expected, f"{name}/{variant}")


@pytest.mark.parametrize("name", list(strategy_literal_cases()))
def test_speculate_verify_cuda_strategy_literal(name):
    case, expected = strategy_literal_cases()[name]
    _assert_outputs(_run(case), expected, name)


def test_speculate_verify_cuda_topp_rejects_second_candidate_outside_top_p_set():
    """Regression (issue 16), both CUDA kernels chained as in the sampler: top_p_candidates now
    writes -1 / 0 past the top-p length and the verify kernel reads only the first
    actual_candidate_len entries, so the draft outside the set is rejected (accept_num 1, was 4
    through the verify-window fallback); the correction comes from the one-candidate set."""
    probs, top_p, case = topp_outside_set_case()
    top_p_launch = launcher("specworker_top_p_candidates_launch")
    d_probs, d_top_p = cp.asarray(probs), cp.asarray(top_p)
    d_bid = cp.zeros(4, dtype=cp.int32)
    d_scores = cp.full((4, 5), 7.0, dtype=cp.float32)
    d_tokens = cp.full((4, 5), 7, dtype=cp.int64)
    d_lens = cp.full(4, -7, dtype=cp.int32)
    top_p_launch(ptr(d_probs), ptr(d_top_p), ptr(d_bid), 4, probs.shape[1], 1, 5, ptr(d_scores), ptr(d_tokens),
                 ptr(d_lens), stream())
    cp.cuda.get_current_stream().synchronize()
    np.testing.assert_array_equal(cp.asnumpy(d_tokens)[0], [5, -1, -1, -1, -1])
    case = dict(case, verify_tokens=cp.asnumpy(d_tokens), verify_scores=cp.asnumpy(d_scores),
                actual_candidate_len=cp.asnumpy(d_lens))
    got = _run(case)
    np.testing.assert_array_equal(got["accept_num"], [1])
    np.testing.assert_array_equal(got["accept_tokens"], [[5, -1, -1, -1]])
    order = np.argsort(-probs, axis=1, kind="stable")[:, :5].astype(np.int64)
    full = dict(case, verify_tokens=order, verify_scores=np.take_along_axis(probs, order, axis=1))
    assert _run(full)["accept_num"].tolist() == [1]  # entries past the length are never read


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bsz", GPU_BATCH_SIZES)
def test_speculate_verify_cuda_matches_reference(bsz, kind, strategy):
    case = make_verify_case(100 * bsz + KINDS.index(kind), bsz, kind, strategy)
    _assert_outputs(_run(case), ref_speculate_verify(**case), f"{strategy} bsz={bsz} {kind}")


@pytest.mark.parametrize("strategy, options", OPTION_CASES)
def test_speculate_verify_cuda_matches_reference_options(strategy, options):
    for bsz, seed in ((3, 5), (17, 6), (1024, 7)):
        case = make_verify_case(seed, bsz, "mixed", strategy, **options)
        _assert_outputs(_run(case), ref_speculate_verify(**case), f"{strategy} {options} bsz={bsz}")


@pytest.mark.parametrize("vocab", [100, 111, 511, 512, 513, 8193, 151936])
def test_speculate_verify_cuda_rejection_vocab_boundary(vocab):
    """vLLM's GHSA-8wr5-jm2h-8r4f: the block splits V into 512 chunks; 511/512/513 and V not a
    multiple of anything put the threshold in a ragged last chunk, an empty chunk, or past a
    chunk boundary. Rows with all mass on id V - 1, or mass 0.9 in the last two ids, must still
    give ids in [0, V), equal to the reference."""
    case = make_verify_case(vocab, 17, "all_decode", "rejection", vocab=vocab)
    p = case["target_probs"]
    p[0::3] = 0.0
    p[0::3, vocab - 1] = 1.0
    p[1::3, :-2] = 0.0
    p[1::3, -2:] = [0.3, 0.6]
    got = _run(case)
    _assert_outputs(got, ref_speculate_verify(**case), f"V={vocab}")
    emitted = np.concatenate([got["accept_tokens"][b, :n] for b, n in enumerate(got["accept_num"])])
    assert ((emitted >= 0) & (emitted < vocab)).all()


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_speculate_verify_cuda_one_hot_targets_reduce_to_greedy(strategy):
    for bsz, seed in ((1, 1), (17, 2), (1024, 3)):
        case = make_verify_case(seed, bsz, "mixed", strategy, one_hot=True)
        greedy = dict(case, verify_strategy="greedy", target_probs=None, draft_probs=None)
        _assert_outputs(_run(case), _run(greedy), f"{strategy} bsz={bsz}")


@pytest.mark.parametrize("strategy", ["rejection", "topp"])
def test_speculate_verify_cuda_deterministic_when_seeded(strategy):
    case = make_verify_case(11, 256, "all_decode", strategy)
    first = _run(case)
    for _ in range(19):
        _assert_outputs(_run(case), first, "repetition")


ROW_FIELDS = ("sampled_token_ids", "verify_tokens", "verify_scores", "actual_candidate_len", "target_probs")


def _tile_slot(case, b, n):
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
def test_speculate_verify_cuda_seeded_slot_is_batch_invariant(strategy):
    """A seeded slot's tokens do not depend on the batch: the slot copied into all 1024
    positions of a batch (different row offsets, blocks and neighbours) gives the same tokens
    everywhere as alone."""
    case = make_verify_case(21, 17, "all_decode", strategy)
    case["is_block_step"][:] = False
    case["stop_flags"][:] = False
    case["reasoning_status"][:] = 0
    b = int(np.argmax(case["seq_lens_this_time"]))
    alone, batch = _run(_tile_slot(case, b, 1)), _run(_tile_slot(case, b, 1024))
    for f in OUT_FIELDS:
        assert (batch[f] == alone[f][0]).all(), f"{f} differs across positions"


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("strategy", ["rejection", "target_match"])
def test_speculate_verify_cuda_first_token_follows_target_distribution(strategy, k):
    case, p = distribution_case(seed=1234 + k, num_slots=120_000, k=k, strategy=strategy)
    got = _run(case)
    counts = np.bincount(got["accept_tokens"][:, 0], minlength=p.shape[0])
    pvalue = chi2_pvalue(counts, p)
    assert pvalue > 1e-3, f"first tokens {counts} do not follow p = {p.round(3)} (p-value {pvalue:.2e})"


def test_speculate_verify_cuda_topp_is_lossy():
    case, p = distribution_case(seed=99, num_slots=120_000, k=3, strategy="topp")
    counts = np.bincount(_run(case)["accept_tokens"][:, 0], minlength=p.shape[0])
    assert chi2_pvalue(counts, p) < 1e-6


def test_speculate_verify_cuda_out_of_range_slots_are_skipped():
    """The CPU op raises on these; the kernel cannot, so it bounds every access: a slot whose rows
    lie past the row capacity, or whose decode length exceeds D, is not verified (accept_num 0,
    nothing else written) and the other slots are unaffected."""
    for strategy in STRATEGIES:
        case = make_verify_case(5, 17, "all_decode", strategy)
        case["is_block_step"][:3] = False
        case["stop_flags"][:3] = False
        case["cu_seqlens_q_output"][1] = case["sampled_token_ids"].shape[0] - 1  # rows past the end
        case["seq_lens_this_time"][1] = 2
        case["seq_lens_this_time"][2] = case["accept_tokens"].shape[1] + 1  # L > D
        got = _run(case)
        assert got["accept_num"][1] == 0 and got["accept_num"][2] == 0, strategy
        for f in ("accept_tokens", "step_idx", "stop_flags"):
            assert (got[f][1:3] == case[f][1:3]).all(), f"{strategy}: {f} written for a skipped slot"
        others = dict(case, stop_flags=case["stop_flags"].copy())
        others["stop_flags"][1:3] = True  # the reference skips them too
        want = ref_speculate_verify(**others)
        keep = np.r_[0, 3:17]
        for f in OUT_FIELDS:
            np.testing.assert_array_equal(got[f][keep], want[f][keep], err_msg=f"{strategy}: {f}")


def test_speculate_verify_cuda_rejection_out_of_range_draft_matches_reference():
    case = make_verify_case(8, 17, "all_decode", "rejection")
    case["draft_tokens"][:, 1] = np.where(np.arange(17) % 2 == 0, -1, 10_000_000)
    _assert_outputs(_run(case), ref_speculate_verify(**case), "out-of-range drafts")


def test_speculate_verify_cuda_zero_slots_and_invalid_arguments():
    case = make_verify_case(3, 3, "mixed", "rejection")
    dev = to_device(cp, case)
    args = launch_args(case, dev)
    fn = raw_launcher()
    zero = list(args)
    zero[20] = 0  # bsz = 0 launches nothing
    assert fn(*zero) == 0
    for index, value in ((20, -1), (21, 0), (24, 0), (26, -1), (27, 4), (28, 3)):
        bad = list(args)
        bad[index] = value  # bsz < 0, D < 1, V < 1 for rejection, window < 0, bad modes
        assert fn(*bad) != 0, f"argument {index} = {value} was accepted"
    no_probs = list(args)
    no_probs[16] = None  # rejection without target_probs
    assert fn(*no_probs) != 0
    cp.cuda.get_current_stream().synchronize()
    np.testing.assert_array_equal(cp.asnumpy(dev["accept_num"]), case["accept_num"])
