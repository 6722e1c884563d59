"""speculate_set_value_by_flags_and_idx tests written once for both backends (the cases live in
tests/update_literals.py and reference/cases/post_verify_state.py): tests/ops (the Paddle op) and tests/gpu (the CUDA
kernel) import the test_* functions below and define the fixtures they take:

- run(state) -> the new numpy state, on a numpy state dict;
- reference_grid: (bsz, kind, seed, extra_rows, num_draft, after_update, column) of the randomized
  comparison, parametrized by its backend (the GPU runs batch sizes past one block; after_update runs
  ref_speculate_update first; column, FastDeploy's [bsz, 1] per-slot shape, is the Paddle op's).
"""

from __future__ import annotations

import numpy as np
import pytest

from reference.speculate_set_value_by_flags_and_idx import ref_speculate_set_value_by_flags_and_idx
from reference.speculate_update import ref_speculate_update
from reference.cases.post_verify_state import make_post_verify_state, to_column
from tests.update_literals import SET_VALUE_CASES

WRITES = ("pre_ids", "accept_num", "seq_lens_decoder")


def assert_state_equal(got: dict, want: dict):
    for k in WRITES:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.mark.parametrize("name, state, expected", SET_VALUE_CASES, ids=[c[0] for c in SET_VALUE_CASES])
def test_speculate_set_value_by_flags_and_idx_literal(run, name, state, expected):
    got = run(state)
    for k, v in expected.items():
        np.testing.assert_array_equal(got[k], np.asarray(v), err_msg=f"{name}: {k}")
    want = ref_speculate_set_value_by_flags_and_idx(state)  # the hand-worked values pin the reference too
    for k, v in expected.items():
        np.testing.assert_array_equal(want[k], np.asarray(v), err_msg=f"reference {name}: {k}")


def test_speculate_set_value_by_flags_and_idx_matches_reference(run, reference_grid):
    bsz, kind, seed, extra_rows, num_draft, after_update, column = reference_grid
    state = make_post_verify_state(np.random.default_rng(seed), bsz, kind, num_draft=num_draft, extra_rows=extra_rows)
    if after_update:
        state = ref_speculate_update(state)
    if column:
        state = to_column(state)
    assert_state_equal(run(state), ref_speculate_set_value_by_flags_and_idx(state))
