"""hybrid_mtp_ngram tests written once for both backends (the cases live in tests/hybrid_cases.py): tests/ops
(the Paddle op) and tests/gpu (the CUDA kernel) import the test_* functions below and define the fixtures
they take:

- run(state, max_ngram_size=, min_ngram_size=, max_draft_tokens=, num_model_steps=) -> the new numpy state,
  on a numpy state dict (seq_lens_encoder absent = not passed);
- reference_grid: (bsz, kind, sizes, seed, with_encoder, column) of the randomized comparison, parametrized
  by its backend (column, FastDeploy's [bsz, 1] per-slot shape, is the Paddle op's).
"""

from __future__ import annotations

import numpy as np
import pytest

from reference.hybrid_mtp_ngram import ref_hybrid_mtp_ngram
from tests.hybrid_cases import HYBRID_CASES, WIDTHS, make_hybrid_state, to_column
from tests.ngram_case_tests import WRITES, assert_state_equal  # the same two outputs as ngram_match


@pytest.mark.parametrize("name, state, attrs, expected", HYBRID_CASES, ids=[c[0] for c in HYBRID_CASES])
def test_hybrid_mtp_ngram_literal(run, name, state, attrs, expected):
    got = run(state, **attrs)
    for k, v in expected.items():
        np.testing.assert_array_equal(got[k], np.asarray(v), err_msg=f"{name}: {k}")
    # The hand-worked values also pin the reference.
    assert_state_equal(ref_hybrid_mtp_ngram(state, **attrs), {k: np.asarray(v) for k, v in expected.items()})


def test_hybrid_mtp_ngram_matches_reference(run, reference_grid):
    bsz, kind, sizes, seed, with_encoder, column = reference_grid
    state = make_hybrid_state(np.random.default_rng(seed), bsz, kind, extra_rows=seed % 3, with_encoder=with_encoder)
    if column:
        state = to_column(state)
    attrs = dict(max_ngram_size=sizes[0], min_ngram_size=sizes[1], max_draft_tokens=3, num_model_steps=2)
    assert_state_equal(run(state, **attrs), ref_hybrid_mtp_ngram(state, **attrs))


@pytest.mark.parametrize("num_draft, steps", WIDTHS, ids=[f"k{k}_s{s}" for k, s in WIDTHS])
@pytest.mark.parametrize("max_draft_tokens", [None, 1, 7])
def test_hybrid_mtp_ngram_matches_reference_other_widths(run, num_draft, steps, max_draft_tokens):
    """D = 1 (no draft column), MTP drafts already at k (s = k: nothing to add), s = 0, wide rows, and
    max_draft_tokens below s, at k, or above D - 1."""
    for seed, kind in enumerate(("mixed", "repetitive", "near_max_dec_len", "chains_cut_short")):
        state = make_hybrid_state(np.random.default_rng(seed), 17, kind, num_draft=num_draft, num_model_steps=steps,
                                  extra_rows=2)
        attrs = dict(max_ngram_size=3, min_ngram_size=1, num_model_steps=steps,
                     max_draft_tokens=num_draft if max_draft_tokens is None else max_draft_tokens)
        assert_state_equal(run(state, **attrs), ref_hybrid_mtp_ngram(state, **attrs))
