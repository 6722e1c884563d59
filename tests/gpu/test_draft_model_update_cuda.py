"""draft_model_update's CUDA kernel against the numpy reference, on the cases the CPU tests use
(tests/draft_cases.py) plus batch sizes past one block and the kernel's bounds-check fallback."""


import numpy as np
import pytest

from tests import draft_cases as dc
from tests.gpu.harness import launcher, ptr, require_gpu, stream
from tests.reference.draft_model_update import STATE_KEYS, ref_draft_model_update

cp = require_gpu()
launch = launcher("specworker_draft_model_update_launch")

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


def run_ref(state, args, strict=True):
    return ref_draft_model_update(state, args["inter_next_tokens"], args["cu_seqlens_q_output"], args["max_dec_len"],
                                  args["end_ids"], substep=args["substep"], strict=strict)


def assert_state_equal(got, want):
    for key in STATE_KEYS:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


@pytest.mark.parametrize("name", dc.LITERAL_UPDATE_CASES)
def test_draft_model_update_cuda_literal(name):
    state, args, expected = dc.literal_update_case(name)
    assert_state_equal(run_kernel(state, args), expected)


def test_draft_model_update_cuda_bsz_256_closed_form():
    state, args, expected = dc.pattern_case()
    assert_state_equal(run_kernel(state, args), expected)


@pytest.mark.parametrize("bsz, kind, substep, seed", dc.update_grid(BATCH_SIZES))
def test_draft_model_update_cuda_matches_reference(bsz, kind, substep, seed):
    state, args = dc.make_update_case(np.random.default_rng(seed), bsz, kind, substep, extra_rows=seed % 3)
    assert_state_equal(run_kernel(state, args), run_ref(state, args))


def test_draft_model_update_cuda_round_of_three_substeps_literal():
    state = dc.round_start_state()
    for s, tokens in enumerate(dc.ROUND_TOKENS):
        state = run_kernel(state, dc.update_args(state, tokens, dc.ROUND_MAX_DEC_LEN, substep=s))
    np.testing.assert_array_equal(state["base_model_draft_tokens"], dc.ROUND_EXPECTED_BASE)
    np.testing.assert_array_equal(state["seq_lens_this_time"], dc.ROUND_EXPECTED_LENS)
    np.testing.assert_array_equal(state["seq_lens_decoder"], dc.ROUND_EXPECTED_DEC)
    np.testing.assert_array_equal(state["step_idx"], dc.ROUND_EXPECTED_STEP)
    np.testing.assert_array_equal(state["stop_flags"], dc.ROUND_EXPECTED_STOP)
    for (b, j), token in dc.ROUND_EXPECTED_PRE.items():
        assert state["pre_ids"][b, j] == token, (b, j)


@pytest.mark.parametrize("bsz, kind", [(3, "mixed"), (1000, "near_max_dec_len"), (5000, "mixed"), (5000, "stopped")])
def test_draft_model_update_cuda_random_rounds_match_reference(bsz, kind):
    rng = np.random.default_rng(bsz + len(kind))
    state, args = dc.make_update_case(rng, bsz, kind, 0)
    for s in range(3):
        if s > 0:
            args = dc.next_substep_args(rng, state, args["max_dec_len"], s, capacity=bsz * 4)
        want = run_ref(state, args)
        state = run_kernel(state, args)
        assert_state_equal(state, want)


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
