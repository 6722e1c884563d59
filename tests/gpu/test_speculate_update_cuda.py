
import numpy as np
import pytest

from tests.gpu.harness import GUARD, launcher, ptr, require_gpu, state_to_device, stream, unguarded
from tests.speculate_update_case_tests import (  # noqa: F401  written once, also run on the Paddle op
    test_speculate_update_literal, test_speculate_update_matches_reference, test_speculate_update_not_need_stop_boundary,
    test_speculate_update_without_mask_rollback,
)
from reference.cases.post_verify_state import KINDS, make_post_verify_state
from tests.update_literals import UPDATE_CASES

cp = require_gpu()
launch = launcher("specworker_speculate_update_launch")

# Kernel argument order (state keys); not_need_stop is passed as a byte buffer, see run_kernel.
ARGS = ("seq_lens_encoder", "seq_lens_decoder", "not_need_stop", "draft_tokens", "actual_draft_token_nums",
        "accept_tokens", "accept_num", "stop_flags", "seq_lens_this_time", "is_block_step", "stop_nums",
        "mask_rollback")
WRITES = ("seq_lens_encoder", "seq_lens_decoder", "draft_tokens", "actual_draft_token_nums", "mask_rollback")
FLAG_CANARY = 7  # not_need_stop travels as uint8 so a stray write past byte 0 shows


def run_kernel(state: dict, bsz: int | None = None, num_slots: int | None = None, width: int | None = None) -> dict:
    """Runs the kernel on a numpy state (mask_rollback None = omitted); returns the new state.
    Sizes default to the state's (bsz = len(seq_lens_this_time), N = len(stop_flags))."""
    bsz = len(state["seq_lens_this_time"]) if bsz is None else bsz
    num_slots = len(state["stop_flags"]) if num_slots is None else num_slots
    width = state["draft_tokens"].shape[1] if width is None else width
    d = state_to_device(cp, state, ARGS, WRITES, matrices=("draft_tokens", "accept_tokens"))
    d["not_need_stop"] = cp.asarray(np.array([int(state["not_need_stop"][0])] + [FLAG_CANARY] * GUARD, np.uint8))
    launch(*(ptr(d[k]) for k in ARGS), bsz, num_slots, width, stream())
    out = dict(state)
    for k in WRITES:
        if d[k] is not None:
            out[k] = unguarded(cp, d[k], k)
    flag = cp.asnumpy(d["not_need_stop"])
    assert (flag[1:] == FLAG_CANARY).all() and flag[0] in (0, 1), f"not_need_stop bytes {flag[:4]}"
    out["not_need_stop"] = flag[:1].astype(bool)
    return out


@pytest.fixture
def run():
    """The backend of the shared tests (tests/speculate_update_case_tests.py): the kernel, GUARD and
    the not_need_stop bytes checked."""
    return run_kernel


@pytest.fixture(params=[(bsz, kind, bsz * 100 + KINDS.index(kind) * 10 + extra_rows, extra_rows, num_draft, False)
                        for bsz in (0, 1, 3, 17, 255, 256, 257, 1024, 5000) for kind in KINDS
                        for extra_rows, num_draft in ((0, 3), (2, 1), (300, 5))],
                ids=lambda p: "-".join(map(str, p[:2] + p[3:5])))
def reference_grid(request):
    """(bsz, kind, seed, extra_rows, num_draft, column): batch sizes around the block edges x kind, with
    0, 2 or 300 rows past bsz and D = 3, 1, 5."""
    return request.param


@pytest.mark.parametrize("running_slot", [0, 255, 256, 4999])
def test_speculate_update_cuda_not_need_stop_sees_every_block(running_slot):
    """5000 slots, one running: the count (block 0) must see the slot in any block."""
    N = 5000
    state = make_post_verify_state(np.random.default_rng(running_slot), N, "all_stopped")
    state["stop_flags"][:] = True
    state["stop_flags"][running_slot] = False
    state["is_block_step"][running_slot] = False
    state["stop_nums"][0] = N
    assert run_kernel(state)["not_need_stop"][0]
    state["stop_flags"][running_slot] = True
    assert not run_kernel(state)["not_need_stop"][0]


def test_speculate_update_cuda_clamps_accept_num():
    """CUDA cannot raise: accept_num outside [0, D] is clamped (CPU raises). D = 3: slot 0 n = 5
    -> 3 (all accepted, actual stays at the cap 2), slot 1 n = -2 -> 0 (draft_tokens untouched),
    slot 2 n = 1."""
    state = {
        "seq_lens_encoder": np.zeros(3, np.int32), "seq_lens_decoder": np.full(3, 10, np.int32),
        "not_need_stop": np.array([False]), "draft_tokens": np.full((3, 3), -1, np.int64),
        "actual_draft_token_nums": np.full(3, 2, np.int32),
        "accept_tokens": np.array([[11, 12, 13], [21, 22, 23], [31, 32, 33]], np.int64),
        "accept_num": np.array([5, -2, 1], np.int32), "stop_flags": np.zeros(3, bool),
        "seq_lens_this_time": np.full(3, 3, np.int32), "is_block_step": np.zeros(3, bool),
        "stop_nums": np.array([3], np.int64), "mask_rollback": np.zeros(3, np.int32),
    }
    got = run_kernel(state)
    np.testing.assert_array_equal(got["seq_lens_decoder"], [13, 10, 11])
    np.testing.assert_array_equal(got["mask_rollback"], [0, 3, 2])
    np.testing.assert_array_equal(got["actual_draft_token_nums"], [2, 1, 1])
    np.testing.assert_array_equal(got["draft_tokens"][:, 0], [13, -1, 31])


@pytest.mark.parametrize("bsz, num_slots, width", [(4, 3, 3), (-1, 3, 3), (3, 3, 0)])
def test_speculate_update_cuda_launcher_rejects_bad_sizes(bsz, num_slots, width):
    _, state, _ = UPDATE_CASES[0]
    with pytest.raises(RuntimeError, match="returned cudaError"):
        run_kernel(state, bsz=bsz, num_slots=num_slots, width=width)
