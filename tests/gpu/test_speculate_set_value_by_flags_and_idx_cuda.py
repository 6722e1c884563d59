
import numpy as np
import pytest

from tests.gpu.harness import launcher, ptr, require_gpu, state_to_device, stream, unguarded
from tests.gpu.test_speculate_update_cuda import run_kernel as run_update_kernel
from reference.speculate_set_value_by_flags_and_idx import ref_speculate_set_value_by_flags_and_idx
from reference.speculate_update import ref_speculate_update
from tests.set_value_case_tests import (  # noqa: F401  written once, also run on the Paddle op
    WRITES, test_speculate_set_value_by_flags_and_idx_literal, test_speculate_set_value_by_flags_and_idx_matches_reference,
)
from reference.cases.post_verify_state import KINDS, run_rounds, start_batch
from tests.update_literals import SET_VALUE_CASES

cp = require_gpu()
launch = launcher("specworker_speculate_set_value_by_flags_and_idx_launch")

# Kernel argument order (state keys; "pre_ids" is the kernel's pre_ids_all).
ARGS = ("pre_ids", "accept_tokens", "accept_num", "stop_flags", "seq_lens_encoder", "seq_lens_decoder", "step_idx")


def run_kernel(state: dict, bsz: int | None = None) -> dict:
    """Runs the kernel on a numpy state; returns the new state (bsz = len(seq_lens_this_time))."""
    bsz = len(np.reshape(state["seq_lens_this_time"], -1)) if bsz is None else bsz
    d = state_to_device(cp, state, ARGS, WRITES, matrices=("pre_ids", "accept_tokens"))
    launch(*(ptr(d[k]) for k in ARGS), bsz, state["pre_ids"].shape[1], state["accept_tokens"].shape[1], stream())
    out = dict(state)
    for k in WRITES:
        out[k] = unguarded(cp, d[k], k, like=state[k])
    return out


@pytest.fixture
def run():
    """The backend of the shared tests (tests/set_value_case_tests.py): the kernel, GUARD checked."""
    return run_kernel


@pytest.fixture(params=[(bsz, kind, bsz * 100 + KINDS.index(kind) * 10 + extra_rows, extra_rows, num_draft, after_update,
                         False)
                        for bsz in (0, 1, 3, 17, 255, 256, 257, 1024, 5000) for kind in KINDS
                        for extra_rows, num_draft, after_update in ((0, 3, False), (2, 1, True), (300, 5, True))],
                ids=lambda p: "-".join(map(str, p[:2] + p[3:5])))
def reference_grid(request):
    """(bsz, kind, seed, extra_rows, num_draft, after_update, column): batch sizes around the block edges
    x kind, with 0, 2 or 300 rows past bsz, D = 3, 1, 5, the last two after speculate_update."""
    return request.param


def test_speculate_set_value_by_flags_and_idx_cuda_clamps_accept_num():
    """CUDA cannot raise: accept_num outside [0, D] is clamped (CPU raises). D = 3, S = 8:
    slot 0 n = 5 -> 3 tokens end at 6 (accept_num keeps 5: running slots are not rewritten);
    slot 1 n = -1 -> 0, stopped -> cleared; slot 2 n = 2 ends at 2."""
    state = {
        "pre_ids": np.full((3, 8), -1, np.int64),
        "accept_tokens": np.array([[11, 12, 13], [21, 22, 23], [31, 32, 33]], np.int64),
        "accept_num": np.array([5, -1, 2], np.int32), "stop_flags": np.array([False, True, False]),
        "seq_lens_this_time": np.ones(3, np.int32), "seq_lens_encoder": np.zeros(3, np.int32),
        "seq_lens_decoder": np.full(3, 9, np.int32), "step_idx": np.array([6, 3, 2], np.int64),
    }
    got = run_kernel(state)
    _ = -1
    np.testing.assert_array_equal(got["pre_ids"], [[_, _, _, _, 11, 12, 13, _], [_] * 8, [_, 31, 32, _, _, _, _, _]])
    np.testing.assert_array_equal(got["accept_num"], [5, 0, 2])
    np.testing.assert_array_equal(got["seq_lens_decoder"], [9, 0, 9])


def test_speculate_set_value_by_flags_and_idx_cuda_launcher_rejects_negative_bsz():
    _, state, _ = SET_VALUE_CASES[0]
    with pytest.raises(RuntimeError, match="returned cudaError"):
        run_kernel(state, bsz=-1)


@pytest.mark.parametrize("num_slots, num_draft, seed", [(3, 2, 1), (257, 3, 2), (5000, 4, 3)])
def test_speculate_state_rounds_cuda_history_matches_emitted_tokens(num_slots, num_draft, seed):
    """Both kernels over 12 engine steps, checked each round against the composed references
    and SPEC's invariants (reference/cases/post_verify_state.py check_round_invariants)."""
    state, meta = start_batch(np.random.default_rng(seed), num_slots, num_draft, max_model_len=24, max_dec_len=40)
    ref_state, ref_meta = start_batch(np.random.default_rng(seed), num_slots, num_draft, max_model_len=24,
                                      max_dec_len=40)
    got_rounds = run_rounds(np.random.default_rng(seed + 100), run_update_kernel, run_kernel, state, meta, 12)
    want_rounds = run_rounds(np.random.default_rng(seed + 100), ref_speculate_update,
                             ref_speculate_set_value_by_flags_and_idx, ref_state, ref_meta, 12)
    for (got, _), (want, _) in zip(got_rounds, want_rounds):
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
