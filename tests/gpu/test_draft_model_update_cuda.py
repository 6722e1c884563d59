"""draft_model_update's CUDA kernel against the numpy reference, on the cases the CPU tests use
(reference/cases/draft_state.py) plus batch sizes past one block and the kernel's bounds-check fallback."""


import numpy as np
import pytest

from reference.cases import draft_state as dc
from tests.draft_update_case_tests import (  # noqa: F401  written once, also run on the Paddle op
    assert_state_equal, run_ref, test_draft_model_update_bsz_256_closed_form, test_draft_model_update_literal,
    test_draft_model_update_matches_reference, test_draft_model_update_random_rounds_match_reference,
    test_draft_model_update_round_of_three_substeps_literal,
)
from tests.gpu.harness import launcher, ptr, require_gpu, stream
from reference.draft_model_update import STATE_KEYS

cp = require_gpu()
launch = launcher("specworker_draft_model_update_launch")
postprocess_launch = launcher("specworker_draft_model_postprocess_launch")

GUARD = 64  # elements past each buffer's end that the kernel must leave untouched
CANARY = {np.dtype(np.int64): -7777, np.dtype(np.int32): -7777, np.dtype(np.uint8): 0xAB}
BATCH_SIZES = (1, 3, 17, 256, 1000, 5000)


def _to_device(a):
    a = np.asarray(a)
    a = a.astype(np.uint8) if a.dtype == bool else a  # bool buffers travel as bytes so the guard can hold 0xAB
    return cp.asarray(np.concatenate([a.reshape(-1), np.full(GUARD, CANARY[a.dtype], a.dtype)]))


def _from_device(d, like, name):
    h = cp.asnumpy(d)
    assert (h[-GUARD:] == CANARY[h.dtype]).all(), f"{name} written past its end"
    h = h[:-GUARD].reshape(np.shape(like))
    return h.astype(bool) if np.asarray(like).dtype == bool else h


def run_kernel(state, args, substep=None):
    """Runs the kernel on a numpy state dict; returns the new numpy state."""
    d = {key: _to_device(state[key]) for key in STATE_KEYS}
    d_tokens, d_cu, d_max = (_to_device(args[key]) for key in ("inter_next_tokens", "cu_seqlens_q_output", "max_dec_len"))
    bsz = int(np.asarray(state["seq_lens_this_time"]).shape[0])
    launch(ptr(d_tokens), int(np.asarray(args["inter_next_tokens"]).shape[0]), ptr(d["draft_tokens"]),
           state["draft_tokens"].shape[1], ptr(d["pre_ids"]), state["pre_ids"].shape[1], ptr(d["seq_lens_this_time"]),
           ptr(d["seq_lens_encoder"]), ptr(d["seq_lens_decoder"]), ptr(d["step_idx"]), ptr(d_cu), ptr(d["stop_flags"]),
           ptr(d["not_need_stop"]), ptr(d_max), ptr(d["base_model_draft_tokens"]),
           state["base_model_draft_tokens"].shape[1], bsz, args["substep"] if substep is None else substep, stream())
    for name, dev, host in (("inter_next_tokens", d_tokens, args["inter_next_tokens"]),
                            ("cu_seqlens_q_output", d_cu, args["cu_seqlens_q_output"]),
                            ("max_dec_len", d_max, args["max_dec_len"])):
        np.testing.assert_array_equal(_from_device(dev, host, name), host, err_msg=f"{name} is read-only")
    return {key: _from_device(d[key], state[key], key) for key in STATE_KEYS}


def postprocess_lens_kernel(base_drafts, lens, enc, stop):
    """draft_model_postprocess's kernel (no paused flags); returns the new target seq_lens_this_time."""
    drafts = np.asarray(base_drafts, np.int64)
    d_lens = cp.asarray(np.asarray(lens, np.int32))
    d_drafts, d_enc = cp.asarray(drafts), cp.asarray(np.asarray(enc, np.int32))
    d_stop = cp.asarray(np.asarray(stop, bool))
    postprocess_launch(ptr(d_drafts), drafts.shape[1], ptr(d_lens), ptr(d_enc), ptr(d_stop), ptr(None), d_lens.shape[0],
                       stream())
    return cp.asnumpy(d_lens)


@pytest.fixture
def run():
    """The backend of the shared tests (tests/draft_update_case_tests.py): the kernel, GUARD checked."""
    return run_kernel


@pytest.fixture
def postprocess_lens():
    return postprocess_lens_kernel


@pytest.fixture(params=[(*case, case[3] % 3) for case in dc.update_grid(BATCH_SIZES)],
                ids=lambda p: "-".join(map(str, p[:4])))
def reference_grid(request):
    """(bsz, kind, substep, seed, extra_rows): every GPU batch size x kind x substep, 0-2 rows past bsz."""
    return request.param


@pytest.fixture(params=[(3, "mixed"), (1000, "near_max_dec_len"), (5000, "mixed"), (5000, "stopped")],
                ids=lambda p: "-".join(map(str, p)))
def round_grid(request):
    """(bsz, kind, seed) of the random rounds."""
    bsz, kind = request.param
    return bsz, kind, bsz + len(kind)


@pytest.mark.parametrize("running, initial", [([4999], False), ([0], False), ([2600, 4000], False), ([], True)])
def test_draft_model_update_cuda_not_need_stop_across_blocks(running, initial):
    """not_need_stop is zeroed then OR-ed over 20 blocks: one running slot in any block sets it."""
    bsz = 5000
    state, args = dc.make_update_case(np.random.default_rng(1), bsz, "all_stopped", 1)
    state["not_need_stop"][0] = initial
    for b in running:
        state["stop_flags"][b] = False
        state["seq_lens_this_time"][b] = 1
        state["seq_lens_encoder"][b] = 0
    args = dc.next_substep_args(np.random.default_rng(2), state, np.full(bsz, 10**6), 1, capacity=4 * bsz)
    got = run_kernel(state, args)
    assert got["not_need_stop"][0] == bool(running)
    assert_state_equal(got, run_ref(state, args))


@pytest.mark.parametrize("cu", [[0, 2, 2, 2], [0, 2, 2, 10], [0, 2, 3, 3]])
def test_draft_model_update_cuda_running_slot_without_row_proposes_nothing(cu):
    """The CPU op raises here; the kernel cannot, so the slot proposes -1 and stops (no read
    outside inter_next_tokens)."""
    state, args, _ = dc.literal_update_case("mixed_three_slots")
    args["cu_seqlens_q_output"] = np.asarray(cu, np.int32)
    args["inter_next_tokens"] = args["inter_next_tokens"][:3]
    with pytest.raises(ValueError):
        run_ref(state, args)
    got = run_kernel(state, args)
    assert_state_equal(got, run_ref(state, args, strict=False))
    assert got["base_model_draft_tokens"][2, 1] == -1 and got["stop_flags"][2]


@pytest.mark.parametrize("substep", [-1, 3])
def test_draft_model_update_cuda_rejects_substep_past_target_width(substep):
    state, args, _ = dc.literal_update_case("mixed_three_slots")
    with pytest.raises(RuntimeError, match="returned cudaError"):
        run_kernel(state, args, substep=substep)
