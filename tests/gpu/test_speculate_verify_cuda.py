"""speculate_verify CUDA kernels (standalone, through CuPy) against the numpy reference: the tests
shared with tests/ops/test_speculate_verify.py (tests/verify_case_tests.py) on the kernels, with a
larger randomized grid, and the CUDA-only bound checks."""


import numpy as np
import pytest

from reference.cases.step_batch import BATCH_SIZES, KINDS
from tests.gpu.harness import launcher, ptr, require_gpu, stream
from kernel_harness.speculate_verify import launch_args, raw_launcher, run_verify_cuda, to_device
from reference.speculate_verify import ref_speculate_verify
from tests.verify_case_tests import (  # noqa: F401  written once, also run on the Paddle op
    STRATEGIES, assert_outputs, test_speculate_verify_deterministic_when_seeded,
    test_speculate_verify_first_token_follows_target_distribution, test_speculate_verify_literal,
    test_speculate_verify_matches_reference, test_speculate_verify_matches_reference_options,
    test_speculate_verify_one_hot_targets_reduce_to_greedy, test_speculate_verify_rejection_vocab_boundary,
    test_speculate_verify_seeded_slot_is_batch_invariant, test_speculate_verify_strategy_literal,
    test_speculate_verify_topp_is_lossy, test_speculate_verify_topp_rejects_second_candidate_outside_top_p_set,
)
from tests.verify_cases import OUT_FIELDS, make_verify_case

cp = require_gpu()
GPU_BATCH_SIZES = BATCH_SIZES + (1024,)
# (bsz, kind, seed) of the randomized comparison: every GPU batch size x kind
GPU_REFERENCE_GRID = [(bsz, kind, 100 * bsz + KINDS.index(kind)) for bsz in GPU_BATCH_SIZES for kind in KINDS]


def run_kernel(case):
    return run_verify_cuda(cp, case)


def run_top_p_candidates_kernel(probs, top_p, candidates_len):
    """The top_p_candidates kernel over rows of slot 0; its outputs start as 7 / -7 so entries it
    leaves unwritten show."""
    top_p_launch = launcher("specworker_top_p_candidates_launch")
    rows = probs.shape[0]
    d_probs, d_top_p = cp.asarray(probs), cp.asarray(top_p)
    d_bid = cp.zeros(rows, dtype=cp.int32)
    d_scores = cp.full((rows, candidates_len), 7.0, dtype=cp.float32)
    d_tokens = cp.full((rows, candidates_len), 7, dtype=cp.int64)
    d_lens = cp.full(rows, -7, dtype=cp.int32)
    top_p_launch(ptr(d_probs), ptr(d_top_p), ptr(d_bid), rows, probs.shape[1], top_p.shape[0], candidates_len,
                 ptr(d_scores), ptr(d_tokens), ptr(d_lens), stream())
    cp.cuda.get_current_stream().synchronize()
    return cp.asnumpy(d_tokens), cp.asnumpy(d_scores), cp.asnumpy(d_lens)


@pytest.fixture
def run():
    """The backend of the shared tests (tests/verify_case_tests.py): the verify kernel."""
    return run_kernel


@pytest.fixture
def run_top_p_candidates():
    return run_top_p_candidates_kernel


@pytest.fixture(params=GPU_REFERENCE_GRID, ids=lambda p: "-".join(map(str, p)))
def reference_grid(request):
    return request.param


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
        got = run_kernel(case)
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
    assert_outputs(run_kernel(case), ref_speculate_verify(**case), "out-of-range drafts")


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
