"""batch_invariant_linear tests written once for both backends: tests/ops (the Paddle op) and tests/gpu
(the CUDA kernel) import the test_* functions below and define the fixtures they take:

- run(x, w, b=None, layout="plain") -> out [M, N] float32 numpy, on numpy x [M, K], w [K, N], b [N]
  (layout: how the backend holds the weight, "plain" [K, N] or pack_linear_weight's "panels" /
  "panels_bf16");
- reference_grid: (M, K, N, with_bias) of the float64 comparison; order_grid: (seed, M, K, N,
  with_bias) of the bit-exact float32 order; row_bits_grid: (K, N, with_bias, layout) and
  batch_edges: (batch sizes of other rows, query positions at tile edges) of batch invariance; each
  parametrized by its backend (tile sizes and batch sizes differ).
"""

from __future__ import annotations

import numpy as np

from reference.batch_invariant_linear import ref_batch_invariant_linear, ref_batch_invariant_linear_fp32_order

RTOL = ATOL = 1e-5


def linear_inputs(rng, M: int, K: int, N: int, with_bias: bool):
    """Activations ~ N(0, 1) and weights ~ N(0, 1 / K), as in a trained model: outputs are O(1)."""
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = (rng.standard_normal((K, N)) / np.sqrt(max(K, 1))).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32) if with_bias else None
    return x, w, b


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def assert_same_bits(got: np.ndarray, want: np.ndarray, what: str):
    same = _bits(got) == _bits(want)
    if not same.all():
        idx = np.argwhere(~same)
        r, n = idx[0]
        raise AssertionError(f"{what}: {len(idx)} of {same.size} outputs differ in their bits, first at "
                             f"[{r}, {n}]: {got[r, n]!r} vs {want[r, n]!r} "
                             f"(max abs diff {np.nanmax(np.abs(got.astype(np.float64) - want)):.3g})")


def test_batch_invariant_linear_k_zero_gives_bias_or_zeros(run):
    x = np.zeros((3, 0), dtype=np.float32)
    w = np.zeros((0, 4), dtype=np.float32)
    b = np.array([1, -2, 3, 0.5], dtype=np.float32)
    np.testing.assert_array_equal(run(x, w), np.zeros((3, 4)))
    np.testing.assert_array_equal(run(x, w, b), np.tile(b, (3, 1)))


def test_batch_invariant_linear_matches_reference(run, reference_grid):
    M, K, N, with_bias = reference_grid
    x, w, b = linear_inputs(np.random.default_rng([M, K, N, with_bias]), M, K, N, with_bias)
    np.testing.assert_allclose(run(x, w, b), ref_batch_invariant_linear(x, w, b), rtol=RTOL, atol=ATOL)


def test_batch_invariant_linear_follows_documented_fp32_order(run, order_grid):
    """Bit-exact against the contract (left-to-right float32 sum of rounded products, then + bias),
    which both backends compute: a fused multiply-add (nvcc contracts a * b + c by default), a second
    accumulator, a pairwise tree or any split of the k loop breaks this test."""
    seed, M, K, N, with_bias = order_grid
    x, w, b = linear_inputs(np.random.default_rng([seed, M, K, N]), M, K, N, with_bias)
    assert_same_bits(run(x, w, b), ref_batch_invariant_linear_fp32_order(x, w, b), "backend vs documented order")


def test_batch_invariant_linear_row_bits_independent_of_batch(run, row_bits_grid, batch_edges):
    """The same query rows computed alone, among other random rows, at the front, the back, tile
    edges and a random place, must give identical bits (np.array_equal of uint32), for every weight
    layout the backend takes."""
    K, N, with_bias, layout = row_bits_grid
    batch_sizes, edges = batch_edges
    rng = np.random.default_rng([K, N, with_bias])
    queries, w, b = linear_inputs(rng, 2, K, N, with_bias)
    alone = np.concatenate([run(queries[i:i + 1], w, b, layout) for i in range(2)])
    for others in batch_sizes:
        filler = rng.standard_normal((others, K)).astype(np.float32)
        for pos in sorted({0, others, *(min(e, others) for e in edges), int(rng.integers(0, others + 1))}):
            batch = np.concatenate([filler[:pos], queries, filler[pos:]])  # queries at rows pos, pos + 1
            out = run(batch, w, b, layout)
            assert_same_bits(out[pos:pos + 2], alone, f"queries at rows {pos}, {pos + 1} of {others + 2}")
