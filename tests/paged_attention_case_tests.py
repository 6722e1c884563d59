"""paged_attention tests written once for both backends (the cases live in reference/cases/paged_attention.py):
tests/ops (the Paddle op) and tests/gpu (the CUDA kernel) import the test_* functions below and define
the fixtures they take:

- run(case, dtype="float32") -> (out, key_cache, value_cache) after the call, as float32 numpy;
- tol: {dtype: dict(rtol=, atol=)} of the output against the reference;
- reference_grid: (grid case, dtype) of the randomized comparison, and invariance_grid: (block_size,
  head_dim, heads, dec, length, dtype) of the batch-invariance check, each parametrized by its backend.
"""

from __future__ import annotations

import numpy as np
import pytest

from reference.cases.paged_attention import (
    LITERAL_OUT,
    AttentionCase,
    invariance_runs,
    literal_case,
    literal_caches_after,
    make_attention_case,
)
from reference.paged_attention import ref_paged_attention


def check_against_reference(got, case: AttentionCase, tol: dict, want=None):
    """got = run(case, dtype): the output within tol, the caches bit for bit."""
    out, key_cache, value_cache = got
    want_out, want_k, want_v = want or ref_paged_attention(*case.args(), case.block_size, case.scale)
    np.testing.assert_allclose(out, want_out, **tol)
    # Written positions hold this step's k/v, every other entry keeps its garbage bits (NaN included).
    np.testing.assert_array_equal(key_cache, want_k)
    np.testing.assert_array_equal(value_cache, want_v)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_paged_attention_literal_three_slots(run, dtype):
    """Decode with two queries (causal within the step), a stopped slot, a two-token prefill with GQA
    heads that disagree, a padding row (reference/cases/paged_attention.py works it out by hand)."""
    case = literal_case()
    out, key_cache, value_cache = run(case, dtype)
    np.testing.assert_array_equal(out, LITERAL_OUT)
    want_k, want_v = literal_caches_after(case)
    np.testing.assert_array_equal(key_cache, want_k)
    np.testing.assert_array_equal(value_cache, want_v)


def test_paged_attention_matches_reference(run, tol, reference_grid):
    (seed, bsz, kind, block_size, head_dim, heads, garbage), dtype = reference_grid
    case = make_attention_case(seed, bsz, kind, block_size=block_size, head_dim=head_dim, heads=heads,
                               garbage=garbage, dtype=dtype)
    check_against_reference(run(case, dtype), case, tol[dtype])


def test_paged_attention_is_batch_invariant(run, invariance_grid):
    """A query's output bits depend on its slot's keys only: alone, one query per step (1-token
    decode on the backend's own cache writes), among its slot's verify queries, at any slot index of
    a batch of 17 random neighbours, with T_cap padding, split into two chunks: all bit-identical."""
    block_size, head_dim, heads, dec, length, dtype = invariance_grid
    runs = invariance_runs(lambda case: run(case, dtype), seed=block_size + head_dim + dec, block_size=block_size,
                           head_dim=head_dim, heads=heads, dtype=dtype, dec=dec, length=length)
    base = runs.pop("alone")
    assert base.shape == (length, heads[0], head_dim) and np.isfinite(base).all()
    for name, rows in runs.items():
        assert np.array_equal(rows, base), f"{name}: max |diff| {np.abs(rows - base).max()}"
