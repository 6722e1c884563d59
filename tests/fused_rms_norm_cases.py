"""fused_rms_norm tests written once for both backends: tests/ops (the Paddle op) and tests/gpu (the CUDA
kernel) import the test_* functions below and define the fixture they take:

- run(x, weight, residual, eps) -> (out [R, H], residual_out [R, H]) float32 numpy, on numpy x [R, H],
  weight [H], residual [R, H] or None; residual_out is x when residual is None (what the wrapper returns).

Every comparison is bit for bit against reference/fused_rms_norm.py (docs/spec.md §4.10).
"""

from __future__ import annotations

import numpy as np
import pytest

from reference.fused_rms_norm import ref_fused_rms_norm
from tests.linear_cases import assert_same_bits

# R = 0 (empty call), 1, 3, 17, 64; H = 1 (a single term), 7 (shorter than a SIMD vector or a warp),
# 111 (odd, 3 lanes' strides plus a tail), 576 (SmolLM2-135M's hidden size).
ROWS = [0, 1, 3, 17, 64]
HIDDEN = [1, 7, 111, 576]
EPS = 1e-5


def norm_inputs(rng, rows: int, hidden: int, with_residual: bool):
    """Activations of varied scale per row (1e-3 .. 1e3), weights around 1, as in a trained model."""
    scale = np.float32(10.0) ** rng.uniform(-3, 3, size=(rows, 1))
    x = (rng.standard_normal((rows, hidden)) * scale).astype(np.float32)
    w = rng.normal(1.0, 0.3, hidden).astype(np.float32)
    res = (rng.standard_normal((rows, hidden)) * scale).astype(np.float32) if with_residual else None
    return x, w, res


def test_fused_rms_norm_literal_rows(run):
    """Worked by hand: h = x + residual = [[3, 4], [0, 0], [-1, 1]], inv_h = 0.5, eps = 0:
    mean(h^2) = 12.5, 0, 1 -> rs = 3.535534 (float32 sqrt(12.5)), 0, 1; out = h / rs * [1, 2]."""
    x = np.array([[1, 4], [0, 0], [-1, 0]], np.float32)
    res = np.array([[2, 0], [0, 0], [0, 1]], np.float32)
    out, h = run(x, np.array([1, 2], np.float32), res, 0.0)
    np.testing.assert_array_equal(h, [[3, 4], [0, 0], [-1, 1]])
    rs = np.float32(3.535534)  # float32(sqrt(12.5)) = 3.5355339 rounded
    np.testing.assert_array_equal(out[0], [np.float32(3) / rs, np.float32(4) / rs * np.float32(2)])
    assert np.isnan(out[1]).all(), "0 / sqrt(0 + 0) is NaN, as IEEE says"
    np.testing.assert_array_equal(out[2], [-1, 2])


def test_fused_rms_norm_literal_without_residual(run):
    """x = [[2, 2, 2, 2]], eps = 0: mean = 4, rs = 2, out = weight; residual_out is x."""
    x = np.full((1, 4), 2, np.float32)
    out, h = run(x, np.array([1, -1, 0.5, 3], np.float32), None, 0.0)
    np.testing.assert_array_equal(out, [[1, -1, 0.5, 3]])
    np.testing.assert_array_equal(h, x)


@pytest.mark.parametrize("with_residual", [False, True])
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("rows", ROWS)
def test_fused_rms_norm_matches_reference(run, rows, hidden, with_residual):
    x, w, res = norm_inputs(np.random.default_rng([rows, hidden, with_residual]), rows, hidden, with_residual)
    out, h = run(x, w, res, EPS)
    want_out, want_h = ref_fused_rms_norm(x, w, res, EPS)
    assert out.shape == h.shape == (rows, hidden)
    assert_same_bits(h, want_h, "residual_out")
    assert_same_bits(out, want_out, "out")


@pytest.mark.parametrize("with_residual", [False, True])
@pytest.mark.parametrize("hidden", [7, 576])
def test_fused_rms_norm_row_bits_independent_of_batch(run, hidden, with_residual):
    """Row 5 of a 257-row call has the bits it has alone, among 3 rows, and among every other row."""
    x, w, res = norm_inputs(np.random.default_rng(hidden), 257, hidden, with_residual)
    full, _ = run(x, w, res, EPS)
    for rows in ([5], [4, 5, 6], list(range(1, 257, 2))):
        part, _ = run(x[rows], w, None if res is None else res[rows], EPS)
        assert_same_bits(part[rows.index(5)][None], full[5][None], f"row 5 among {len(rows)} rows")


def test_fused_rms_norm_eps_is_added_after_the_sum(run):
    """A zero row gives 0 / sqrt(eps) * w = 0 (not NaN); a tiny row is dominated by eps."""
    x = np.array([[0, 0, 0], [1e-20, -1e-20, 1e-20]], np.float32)
    out, _ = run(x, np.ones(3, np.float32), None, 1e-6)
    want, _ = ref_fused_rms_norm(x, np.ones(3, np.float32), None, 1e-6)
    np.testing.assert_array_equal(out[0], [0, 0, 0])
    assert_same_bits(out, want, "out")
