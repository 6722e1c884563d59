"""ngram_match tests written once for both backends (the cases live in tests/ngram_cases.py): tests/ops
(the Paddle op) and tests/gpu (the CUDA kernel) import the test_* functions below and define the
fixtures they take:

- run(state, max_ngram_size=, max_draft_tokens=, min_ngram_size=1) -> the new numpy state, on a numpy
  state dict (is_block_step absent = not passed);
- reference_grid: (bsz, kind, seed, (max_ngram_size, min_ngram_size), extra_rows, with_paused, column)
  of the randomized comparison, parametrized by its backend (the GPU runs batch sizes past one block;
  column, FastDeploy's [bsz, 1] per-slot shape, is the Paddle op's).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.ngram_cases import NGRAM_CASES, make_ngram_state, to_column
from reference.ngram_match import ref_ngram_match

WRITES = ("draft_tokens", "seq_lens_this_time")


def assert_state_equal(got: dict, want: dict):
    for k in WRITES:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.mark.parametrize("name, state, attrs, expected", NGRAM_CASES, ids=[c[0] for c in NGRAM_CASES])
def test_ngram_match_literal(run, name, state, attrs, expected):
    got = run(state, **attrs)
    for k, v in expected.items():
        np.testing.assert_array_equal(got[k], np.asarray(v), err_msg=f"{name}: {k}")
    # The hand-worked values also pin the reference.
    assert_state_equal(ref_ngram_match(state, **attrs), {k: np.asarray(v) for k, v in expected.items()})


def test_ngram_match_matches_reference(run, reference_grid):
    bsz, kind, seed, (max_n, min_n), extra_rows, with_paused, column = reference_grid
    state = make_ngram_state(np.random.default_rng(seed), bsz, kind, extra_rows=extra_rows, with_paused=with_paused)
    if column:
        state = to_column(state)
    attrs = dict(max_ngram_size=max_n, min_ngram_size=min_n, max_draft_tokens=3)
    assert_state_equal(run(state, **attrs), ref_ngram_match(state, **attrs))
