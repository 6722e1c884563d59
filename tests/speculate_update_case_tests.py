"""speculate_update tests written once for both backends (the cases live in tests/update_literals.py
and reference/cases/post_verify_state.py): tests/ops (the Paddle op) and tests/gpu (the CUDA kernel) import the
test_* functions below and define the fixtures they take:

- run(state) -> the new numpy state, on a numpy state dict (mask_rollback None or absent = omitted);
- reference_grid: (bsz, kind, seed, extra_rows, num_draft, column) of the randomized comparison,
  parametrized by its backend (the GPU runs batch sizes past one block; column, FastDeploy's
  [bsz, 1] per-slot shape, is the Paddle op's).
"""

from __future__ import annotations

import numpy as np
import pytest

from reference.speculate_update import ref_speculate_update
from reference.cases.post_verify_state import make_post_verify_state, to_column
from tests.update_literals import UPDATE_CASES


def assert_state_equal(got: dict, want: dict):
    for k in want:
        if want[k] is not None:
            np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(want[k]), err_msg=k)


@pytest.mark.parametrize("name, state, expected", UPDATE_CASES, ids=[c[0] for c in UPDATE_CASES])
def test_speculate_update_literal(run, name, state, expected):
    got = run(state)
    for k, v in expected.items():
        np.testing.assert_array_equal(got[k], np.asarray(v), err_msg=f"{name}: {k}")
    for k in set(state) - set(expected):
        np.testing.assert_array_equal(got[k], state[k], err_msg=f"{name}: {k} changed")
    # The hand-worked values also pin the reference.
    assert_state_equal(ref_speculate_update(state), {**state, **{k: np.asarray(v) for k, v in expected.items()}})


@pytest.mark.parametrize("name, state, expected", UPDATE_CASES[:1], ids=["mixed"])
def test_speculate_update_without_mask_rollback(run, name, state, expected):
    """mask_rollback is optional (FastDeploy's older 11-input form); the rest is identical."""
    got = run({**state, "mask_rollback": None})
    assert got["mask_rollback"] is None
    for k, v in expected.items():
        if k != "mask_rollback":
            np.testing.assert_array_equal(got[k], np.asarray(v), err_msg=k)


# 5 slots, bsz 3: slot 0 stopped, slot 1 paused, slot 2 running, slots 3-4 padding -> 4 stopped.
@pytest.mark.parametrize("stop_nums, want", [(0, False), (3, False), (4, False), (5, True), (6, True)])
def test_speculate_update_not_need_stop_boundary(run, stop_nums, want):
    """not_need_stop = #stopped < stop_nums, counting paused and padding slots as stopped."""
    state = {
        "seq_lens_encoder": np.zeros(5, np.int32), "seq_lens_decoder": np.array([0, 0, 4, 0, 0], np.int32),
        "not_need_stop": np.array([not want]), "draft_tokens": np.full((5, 2), -1, np.int64),
        "actual_draft_token_nums": np.ones(5, np.int32), "accept_tokens": np.full((5, 2), 8, np.int64),
        "accept_num": np.array([0, 0, 1, 0, 0], np.int32), "stop_flags": np.array([True, True, False, False, False]),
        "seq_lens_this_time": np.array([0, 0, 1], np.int32),
        "is_block_step": np.array([False, True, False, False, False]), "stop_nums": np.array([stop_nums], np.int64),
    }
    assert bool(run(state)["not_need_stop"][0]) is want
    assert bool(ref_speculate_update(state)["not_need_stop"][0]) is want


def test_speculate_update_matches_reference(run, reference_grid):
    bsz, kind, seed, extra_rows, num_draft, column = reference_grid
    state = make_post_verify_state(np.random.default_rng(seed), bsz, kind, num_draft=num_draft, extra_rows=extra_rows)
    if column:
        state = to_column(state)
    assert_state_equal(run(state), ref_speculate_update(state))
