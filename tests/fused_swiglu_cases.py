"""fused_swiglu tests written once for both backends: tests/ops (the Paddle op) and tests/gpu (the CUDA kernel) import
the test_* functions below and define the fixture they take:

- run(gate_up) -> out [R, I] float32 numpy, on numpy gate_up [R, 2I] float32.

Every comparison is bit for bit against reference/fused_swiglu.py (docs/spec.md §4.12), except that any NaN matches any
NaN (CUDA writes one canonical NaN, the CPU keeps the input's payload), and the accuracy test, which compares silu
with float64 math.
"""

from __future__ import annotations

import numpy as np
import pytest

from reference.fused_swiglu import ref_fused_swiglu

F32_MAX = np.finfo(np.float32).max
# Max error of silu vs float64, in float32 ulps of the exact value (2^-149 where that is subnormal): the reference's
# exhaustive sweep over every float32 in [-120, 120] measures 2.40 (docs/spec.md §4.12).
MAX_ULPS = 2.5

# R = 0 (empty call), 1, 3, 17, 64; I = 1, 7 (shorter than a SIMD vector), 111 (odd), 1536 (SmolLM2-135M's
# intermediate size), 8192 (Llama-3-8B-like width: many grid-stride blocks per row on the GPU).
ROWS = [0, 1, 3, 17, 64]
INTER = [1, 7, 111, 1536, 8192]


def assert_same_values(got: np.ndarray, want: np.ndarray, what: str):
    """got and want (float32) equal bit for bit, signs of zero included, except that any NaN matches any NaN."""
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    got, want = np.ascontiguousarray(got, np.float32), np.ascontiguousarray(want, np.float32)
    same = np.where(np.isnan(want), np.isnan(got), got.view(np.uint32) == want.view(np.uint32))
    if not same.all():
        idx = tuple(np.argwhere(~same)[0])
        raise AssertionError(f"{what}: {int((~same).sum())} of {same.size} values differ in their bits, first at "
                             f"{list(idx)}: {got[idx]!r} vs {want[idx]!r}")


def pack(gate, up) -> np.ndarray:
    """[R, I] gate and up -> gate_up [R, 2I] float32 (gate columns first)."""
    return np.concatenate([np.asarray(gate, np.float32), np.asarray(up, np.float32)], axis=1)


def fused_swiglu_inputs(rng, rows: int, inter: int) -> np.ndarray:
    """gate_up [rows, 2 * inter]: half of the gates uniform over [-100, 100], half activations of a scale drawn per
    row (1e-3 .. 10), a few +-0, +-inf and NaN among them; up ~ N(0, 1)."""
    gate = rng.uniform(-100, 100, (rows, inter))
    normal = rng.random((rows, inter)) < 0.5
    gate[normal] = (rng.standard_normal((rows, inter)) * 10.0 ** rng.uniform(-3, 1, (rows, 1)))[normal]
    special = rng.random((rows, inter)) < 0.01
    gate[special] = rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan], size=int(special.sum()))
    return pack(gate, rng.standard_normal((rows, inter)))


def test_fused_swiglu_literal_row(run):
    """Worked by hand (float64 math, then one rounding): gate [0, 20, -200, 1, -100], up [5, 0.5, 3, 1, 1].
    silu(0) = 0; silu(20) = 20 / (1 + 2.1e-9) rounds to 20, * 0.5 = 10; silu(-200) = -2.8e-85 rounds to -0, * 3 is
    -0; silu(1) = 1 / (1 + e^-1) = 0.7310585786300049; silu(-100) = -3.720075976020836e-42, a subnormal. Taking the
    second half as the gate would give [silu(5) * 0, silu(0.5) * 20, ...]."""
    out = run(pack([[0, 20, -200, 1, -100]], [[5, 0.5, 3, 1, 1]]))
    want = np.array([[0, 10, -0.0, 0.7310585786300049, -3.720075976020836e-42]], np.float32)
    assert_same_values(out, want, "out")


def test_fused_swiglu_special_values(run):
    """silu(+-0) = +-0, silu(+inf) = +inf, silu(-inf) = -0, silu(NaN) = NaN, silu(+-FLT_MAX) = FLT_MAX and -0,
    silu(g <= -112) = -0 (docs/spec.md §4.12); then one IEEE multiply by up, so -0 * inf and 0 * inf are NaN."""
    gate = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, F32_MAX, -F32_MAX, -112.0, -1e30, 1e30], np.float32)
    silu = np.array([0.0, -0.0, np.inf, -0.0, np.nan, F32_MAX, -0.0, -0.0, -0.0, 1e30], np.float32)
    for up in (2.0, -1.0, np.inf, np.nan, 0.0):
        ups = np.full(gate.shape, up, np.float32)
        with np.errstate(all="ignore"):
            want = silu * ups
        assert_same_values(run(pack(gate[None], ups[None]))[0], want, f"out with up = {up}")


@pytest.mark.parametrize("inter", INTER)
@pytest.mark.parametrize("rows", ROWS)
def test_fused_swiglu_matches_reference(run, rows, inter):
    gate_up = fused_swiglu_inputs(np.random.default_rng([rows, inter]), rows, inter)
    out = run(gate_up)
    assert out.shape == (rows, inter) and out.dtype == np.float32
    assert_same_values(out, ref_fused_swiglu(gate_up), "out")


def float32_ulps(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in float32 ulps of exact (float64); below the normal range the ulp is the subnormal step."""
    magnitude = np.maximum(np.abs(exact), np.finfo(np.float32).tiny)
    ulp = np.ldexp(1.0, np.frexp(magnitude)[1] - 24)  # magnitude in [2^(e-1), 2^e): ulp 2^(e-24)
    return np.abs(got.astype(np.float64) - exact) / ulp


def test_fused_swiglu_silu_within_ulps_of_float64(run):
    """silu (up = 1, so out = silu exactly) against g / (1 + exp(-g)) in float64, within MAX_ULPS, on 2^20 float32
    values spread over [-120, 120] by their bit patterns (every binade; subnormal results for g in [-108, -87]) plus
    2^18 uniform ones in [-20, 20] (where the worst cases are)."""
    rng = np.random.default_rng(7)
    top = int(np.float32(120).view(np.uint32))
    magnitudes = np.linspace(0, top, 1 << 19).astype(np.uint32).view(np.float32)
    g = np.concatenate([magnitudes, -magnitudes, rng.uniform(-20, 20, 1 << 18).astype(np.float32)])
    out = run(pack(g.reshape(-1, 512), np.ones((g.size // 512, 512), np.float32))).reshape(-1)
    g64 = g.astype(np.float64)
    exact = g64 / (1.0 + np.exp(-g64))
    err = float32_ulps(out, exact)
    worst = int(np.argmax(err))
    assert err[worst] <= MAX_ULPS, f"silu({g[worst]!r}) = {out[worst]!r}, exact {exact[worst]!r}: {err[worst]:.2f} ulps"
    assert (np.abs(exact) < np.finfo(np.float32).tiny).sum() > 1000, "the sample must reach the subnormal results"


@pytest.mark.parametrize("inter", [7, 1536])
def test_fused_swiglu_row_bits_independent_of_batch(run, inter):
    """Row 5 of a 257-row call has the bits it has alone, among 3 rows, and among every other row."""
    gate_up = fused_swiglu_inputs(np.random.default_rng(inter), 257, inter)
    full = run(gate_up)
    for rows in ([5], [4, 5, 6], list(range(1, 257, 2))):
        part = run(gate_up[rows])
        assert_same_values(part[rows.index(5)][None], full[5][None], f"row 5 among {len(rows)} rows")
