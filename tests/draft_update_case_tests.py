"""draft_model_update tests written once for both backends (the cases live in reference/cases/draft_state.py):
tests/ops (the Paddle op) and tests/gpu (the CUDA kernel) import the test_* functions below and define
the fixtures they take:

- run(state, args) -> the updated numpy state (per-slot buffers as [bsz]);
- postprocess_lens(base_drafts, lens, enc, stop) -> base_model_seq_lens_this_time after the
  backend's draft_model_postprocess;
- reference_grid: (bsz, kind, substep, seed, extra_rows) of the randomized comparison, and
  round_grid: (bsz, kind, seed) of the random rounds, each parametrized by its backend (the GPU
  runs batch sizes past one block).
"""

from __future__ import annotations

import numpy as np
import pytest

from reference.cases import draft_state as dc
from reference.draft_model_postprocess import ref_draft_model_postprocess
from reference.draft_model_update import STATE_KEYS, ref_draft_model_update


def run_ref(state, args, strict=True):
    return ref_draft_model_update(state, args["inter_next_tokens"], args["cu_seqlens_q_output"], args["max_dec_len"],
                                  args["end_ids"], substep=args["substep"], strict=strict)


def assert_state_equal(got, want, keys=STATE_KEYS):
    for key in keys:
        np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(want[key]), err_msg=key)


@pytest.mark.parametrize("name", dc.LITERAL_UPDATE_CASES)
def test_draft_model_update_literal(run, name):
    state, args, expected = dc.literal_update_case(name)
    assert_state_equal(run(state, args), expected)
    assert_state_equal(run_ref(state, args), expected)


def test_draft_model_update_bsz_256_closed_form(run):
    state, args, expected = dc.pattern_case()
    assert_state_equal(run(state, args), expected)


def test_draft_model_update_matches_reference(run, reference_grid):
    bsz, kind, substep, seed, extra_rows = reference_grid
    state, args = dc.make_update_case(np.random.default_rng(seed), bsz, kind, substep, extra_rows=extra_rows)
    assert_state_equal(run(state, args), run_ref(state, args))


def test_draft_model_update_round_of_three_substeps_literal(run, postprocess_lens):
    """Substeps 0, 1, 2 fill target draft_tokens[b, 1..3]; postprocess then sets the target L."""
    state = dc.round_start_state()
    ref_state = state
    for s, tokens in enumerate(dc.ROUND_TOKENS):
        args = dc.update_args(state, tokens, dc.ROUND_MAX_DEC_LEN, substep=s)
        state, ref_state = run(state, args), run_ref(ref_state, args)
        assert_state_equal(state, ref_state)
    np.testing.assert_array_equal(state["base_model_draft_tokens"], dc.ROUND_EXPECTED_BASE)
    np.testing.assert_array_equal(state["seq_lens_this_time"], dc.ROUND_EXPECTED_LENS)
    np.testing.assert_array_equal(state["seq_lens_encoder"], [0, 0, 0])
    np.testing.assert_array_equal(state["seq_lens_decoder"], dc.ROUND_EXPECTED_DEC)
    np.testing.assert_array_equal(state["step_idx"], dc.ROUND_EXPECTED_STEP)
    np.testing.assert_array_equal(state["stop_flags"], dc.ROUND_EXPECTED_STOP)
    for (b, j), token in dc.ROUND_EXPECTED_PRE.items():
        assert state["pre_ids"][b, j] == token, (b, j)
    assert state["not_need_stop"][0]
    lens = postprocess_lens(state["base_model_draft_tokens"], [9, 9, 9], [0, 0, 0], [False] * 3)
    np.testing.assert_array_equal(lens, dc.ROUND_EXPECTED_TARGET_LENS)


def test_draft_model_update_random_rounds_match_reference(run, postprocess_lens, round_grid):
    """k = 3 substeps from a random round start; each substep's output index comes from the current
    draft L/E. The drafts the round leaves are contiguous, so postprocess (strict) accepts them."""
    bsz, kind, seed = round_grid
    rng = np.random.default_rng(seed)
    state, args = dc.make_update_case(rng, bsz, kind, 0)
    for s in range(3):
        if s > 0:
            args = dc.next_substep_args(rng, state, args["max_dec_len"], s, capacity=bsz * 4)
        want = run_ref(state, args)
        state = run(state, args)
        assert_state_equal(state, want)
    target = dict(base_model_draft_tokens=state["base_model_draft_tokens"],
                  base_model_seq_lens_this_time=np.zeros(bsz, np.int32),
                  base_model_seq_lens_encoder=np.zeros(bsz, np.int32), base_model_stop_flags=np.zeros(bsz, bool))
    lens = postprocess_lens(*target.values())
    np.testing.assert_array_equal(lens, ref_draft_model_postprocess(target)["base_model_seq_lens_this_time"])
    assert (lens >= 1).all() and (lens <= 4).all()
