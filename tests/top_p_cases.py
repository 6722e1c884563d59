"""top_p_candidates tests written once for both backends: tests/ops (the Paddle op) and tests/gpu (the
CUDA kernel) import the test_* functions below and define the fixtures they take:

- run(probs, top_p, batch_ids, C) -> (verify_scores, verify_tokens, actual_candidate_lens) as numpy;
- reference_grid: (bsz, kind, seed, C) of the randomized comparison, and qwen_grid: (C, rows, seed,
  lens) of the V = 151936 one (lens None: drawn from the seed), each parametrized by its backend.
"""

from __future__ import annotations

import numpy as np

from reference.cases.step_batch import make_step_batch, pack_output_index
from reference.top_p_candidates import ref_top_p_candidates
from tests.sampling_fixtures import output_index, random_probs, random_top_p

QWEN_VOCAB = 151936


def check_against_reference(out, probs, top_p, batch_ids, C):
    """out = run(probs, top_p, batch_ids, C) equals the reference exactly."""
    scores, tokens, lens = out
    want_scores, want_tokens, want_lens = ref_top_p_candidates(probs, top_p, batch_ids, C)
    np.testing.assert_array_equal(tokens, want_tokens)
    np.testing.assert_array_equal(lens, want_lens)  # same fp32 additions in the same order
    # The scores are copies of input values, so they compare exactly (rtol = atol = 0).
    np.testing.assert_array_equal(scores, want_scores)


def test_top_p_candidates_literal_three_slots(run):
    """Slot 0 decodes with 2 rows, slot 1 is stopped (0 rows), slot 2 prefills (1 row);
    capacity 5, so rows 3 and 4 have no slot."""
    batch_ids, cu = pack_output_index([2, 0, 1], capacity=5)
    np.testing.assert_array_equal(batch_ids, [0, 0, 2, -1, -1])
    probs = np.array([
        [0.10, 0.40, 0.05, 0.30, 0.15],  # 0.4 + 0.3 >= 0.5 -> 2
        [0.25, 0.25, 0.10, 0.25, 0.15],  # three-way tie: ids 0, 1, 3; 0.25 + 0.25 >= 0.5 -> 2
        [0.50, 0.10, 0.10, 0.20, 0.10],  # tie at 0.1 goes to id 1; 0.8 < 0.95 -> C = 3
        [0.90, 0.05, 0.05, 0.00, 0.00],
        [0.20, 0.20, 0.20, 0.20, 0.20],
    ], dtype=np.float32)
    scores, tokens, lens = run(probs, [0.5, 0.9, 0.95], batch_ids, 3)
    np.testing.assert_array_equal(tokens, [[1, 3, -1], [0, 1, -1], [0, 3, 1], [-1, -1, -1], [-1, -1, -1]])
    np.testing.assert_array_equal(scores, np.array(
        [[0.40, 0.30, 0], [0.25, 0.25, 0], [0.50, 0.20, 0.10], [0, 0, 0], [0, 0, 0]], dtype=np.float32))
    np.testing.assert_array_equal(lens, [2, 2, 3, 0, 0])
    assert scores.dtype == np.float32 and tokens.dtype == np.int64 and lens.dtype == np.int32


def test_top_p_candidates_length_is_c_when_top_c_mass_below_top_p(run):
    """Regression ([ours], docs/spec.md §8.8): FastDeploy's dispatched kernel
    leaves actual_candidate_lens at 0 when the C best probabilities sum to less than top_p, so
    speculate_verify's candidate check (draft among the first min(len, C) candidates) accepts
    nothing and every draft is rejected. A flat 100-token distribution with C = 5 has top-C
    mass 0.05 < top_p = 0.9: the length must be C."""
    probs = np.full((2, 100), 0.01, dtype=np.float32)
    scores, tokens, lens = run(probs, [0.9], [0, 0], 5)
    np.testing.assert_array_equal(lens, [5, 5])
    np.testing.assert_array_equal(tokens, [[0, 1, 2, 3, 4]] * 2)


def test_top_p_candidates_matches_reference(run, reference_grid):
    bsz, kind, seed, C = reference_grid
    rng = np.random.default_rng(seed + C)
    batch = make_step_batch(rng, bsz, kind)
    _, batch_ids, _ = output_index(batch)
    probs = random_probs(rng, batch_ids.shape[0], 111)
    top_p = random_top_p(rng, bsz)
    check_against_reference(run(probs, top_p, batch_ids, C), probs, top_p, batch_ids, C)


def test_top_p_candidates_matches_reference_qwen_vocab(run, qwen_grid):
    """V = 151936 (Qwen), the size the CUDA kernel is tuned for."""
    C, rows, seed, lens = qwen_grid
    rng = np.random.default_rng(seed)
    if lens is None:
        lens = rng.integers(0, 5, size=rows // 4)
    batch_ids, _ = pack_output_index(lens, capacity=rows)
    probs = random_probs(rng, rows, QWEN_VOCAB)
    top_p = random_top_p(rng, len(lens))
    check_against_reference(run(probs, top_p, batch_ids, C), probs, top_p, batch_ids, C)
