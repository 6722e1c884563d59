"""qkv_norm_rotary tests written once for both backends: tests/ops (the Paddle op) and tests/gpu (the CUDA
kernel) import the test_* functions below and define the fixture they take:

- run(qkv, cos_full, sin_signed, q_norm_weight, k_norm_weight, num_heads, num_kv_heads, head_dim, eps)
  -> (q, k, v) float32 numpy, on numpy inputs (factors [T, 1, d] or [T, d]; norm weights [d] or None).

Exact bits throughout: both backends compute docs/spec.md §4.11 one float32 operation at a time.
"""

from __future__ import annotations

import numpy as np
import pytest

from reference.qkv_norm_rotary import ref_qkv_norm_rotary

TOKENS = [0, 1, 3, 17, 64]
# (num_heads, num_kv_heads, head_dim): the smallest head; GQA 3:1 with d = 8; SmolLM2-135M's 9:3 x 64; 4:2 x 128;
# d = 6 and 96 are not powers of two, so fl(1 / d) is inexact and a fused fl(y * y) * inv_d would show.
HEAD_SHAPES = [(1, 1, 2), (3, 1, 8), (9, 3, 64), (4, 2, 128), (2, 2, 6), (6, 2, 96)]
EPS = 1e-6
# The literal cases' factors: row 0 angle 0 (cos 1, sin 0), row 1 a quarter turn (cos 0, sin 1); head_dim 4,
# so the rotation pairs (0, 2) and (1, 3): a swap of neighbours or a roll by one would show.
QUARTER_COS = np.array([[1, 1, 1, 1], [0, 0, 0, 0]], np.float32)
QUARTER_SIN = np.array([[0, 0, 0, 0], [-1, -1, 1, 1]], np.float32)
# (num_heads, num_kv_heads, head_dim, eps, norms) that both launchers refuse with cudaErrorInvalidValue.
BAD_LAUNCH_ARGUMENTS = [
    (2, 1, 3, 1e-6, False),   # odd head_dim
    (3, 2, 4, 1e-6, False),   # num_heads % num_kv_heads != 0
    (0, 1, 4, 1e-6, False),   # no q heads
    (2, 1, 8194, 1e-6, False),  # head_dim over 8192
    (2, 1, 4, -1.0, True),    # negative eps
    (2, 1, 4, float("inf"), True),  # non-finite eps
]


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def assert_same_bits(got, want, what: str):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    same = _bits(got) == _bits(want)
    if not same.all():
        idx = tuple(np.argwhere(~same)[0])
        raise AssertionError(f"{what}: {int((~same).sum())} of {same.size} values differ in their bits, first at "
                             f"{list(idx)}: {got[idx]!r} vs {want[idx]!r}")


def qkv_inputs(rng, t_num: int, nh: int, nkv: int, d: int, norms: bool, factor_rank: int = 3):
    """Heads at magnitudes 1e-3 .. 1e4 (the norm's sum and the rotation's products at several exponents),
    factors of real angles as RotaryEmbedding builds them, norm weights ~ N(1, 0.5)."""
    heads = nh + 2 * nkv
    scale = np.array([1e-3, 1.0, 3.0, 1e4, 0.25])[np.arange(heads) % 5]
    qkv = (rng.standard_normal((t_num, heads, d)) * scale[None, :, None]).astype(np.float32).reshape(t_num, heads * d)
    angles = rng.uniform(0, 4096, (t_num, 1)) * 10000.0 ** (-np.arange(0, d, 2) / d)[None, :]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    cos_full, sin_signed = np.concatenate([cos, cos], 1), np.concatenate([-sin, sin], 1)
    if factor_rank == 3:
        cos_full, sin_signed = cos_full[:, None, :], sin_signed[:, None, :]
    weights = [(1 + 0.5 * rng.standard_normal(d)).astype(np.float32) for _ in range(2)] if norms else [None, None]
    return qkv, cos_full, sin_signed, weights[0], weights[1]


def test_qkv_norm_rotary_literal_rotation(run):
    """Two rows, two q heads, one kv head, head_dim 4, no norms: row 0 unrotated, row 1 a quarter turn
    (out = [-y2, -y3, y0, y1]); v is copied."""
    qkv = np.tile(np.arange(1, 17, dtype=np.float32), (2, 1))  # q0 1..4, q1 5..8, k 9..12, v 13..16
    q, k, v = run(qkv, QUARTER_COS, QUARTER_SIN, None, None, 2, 1, 4, EPS)
    np.testing.assert_array_equal(q, [[[1, 2, 3, 4], [5, 6, 7, 8]], [[-3, -4, 1, 2], [-7, -8, 5, 6]]])
    np.testing.assert_array_equal(k, [[[9, 10, 11, 12]], [[-11, -12, 9, 10]]])
    np.testing.assert_array_equal(v, [[[13, 14, 15, 16]], [[13, 14, 15, 16]]])


def test_qkv_norm_rotary_literal_norms(run):
    """eps 3, head_dim 4: q [1, -1, 1, -1] and k [1, 1, 1, 1] have mean square 1, so r = sqrt(1 + 3) = 2;
    q / 2 * [2, 4, 6, 8] = [1, -2, 3, -4], k / 2 * [2, 4, 6, 8] = [1, 2, 3, 4]; row 1 then turns a quarter."""
    qkv = np.tile(np.array([1, -1, 1, -1, 1, 1, 1, 1, 7, 8, 9, 10], np.float32), (2, 1))
    w = np.array([2, 4, 6, 8], np.float32)
    q, k, v = run(qkv, QUARTER_COS[:, None, :], QUARTER_SIN[:, None, :], w, w, 1, 1, 4, 3.0)
    np.testing.assert_array_equal(q, [[[1, -2, 3, -4]], [[-3, 4, 1, -2]]])
    np.testing.assert_array_equal(k, [[[1, 2, 3, 4]], [[-3, -4, 1, 2]]])
    np.testing.assert_array_equal(v, [[[7, 8, 9, 10]], [[7, 8, 9, 10]]])


@pytest.mark.parametrize("factor_rank", [3, 2])
@pytest.mark.parametrize("norms", [False, True], ids=["plain", "norms"])
@pytest.mark.parametrize("nh, nkv, d", HEAD_SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("t_num", TOKENS)
def test_qkv_norm_rotary_matches_reference(run, t_num, nh, nkv, d, norms, factor_rank):
    rng = np.random.default_rng([t_num, nh, nkv, d, norms, factor_rank])
    qkv, cos_full, sin_signed, qw, kw = qkv_inputs(rng, t_num, nh, nkv, d, norms, factor_rank)
    got = run(qkv, cos_full, sin_signed, qw, kw, nh, nkv, d, EPS)
    want = ref_qkv_norm_rotary(qkv, cos_full, sin_signed, qw, kw, num_heads=nh, num_kv_heads=nkv, head_dim=d,
                               eps=EPS)
    for name, g, w in zip("qkv", got, want):
        assert_same_bits(g, w, name)


@pytest.mark.parametrize("norms", [False, True], ids=["plain", "norms"])
def test_qkv_norm_rotary_rows_are_batch_invariant(run, norms):
    """Each row of a 64-row call has the bits of the same row run alone and of the same row among 16."""
    nh, nkv, d = 9, 3, 64
    qkv, cos_full, sin_signed, qw, kw = qkv_inputs(np.random.default_rng(7), 64, nh, nkv, d, norms)
    full = run(qkv, cos_full, sin_signed, qw, kw, nh, nkv, d, EPS)
    for lo, hi in [(0, 1), (5, 6), (63, 64), (40, 56)]:
        part = run(qkv[lo:hi], cos_full[lo:hi], sin_signed[lo:hi], qw, kw, nh, nkv, d, EPS)
        for name, f, p in zip("qkv", full, part):
            assert_same_bits(p, f[lo:hi], f"{name} rows {lo}..{hi - 1}")
