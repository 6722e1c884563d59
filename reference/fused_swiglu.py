"""numpy reference for fused_swiglu, written from docs/spec.md §4.12 (numpy only).

Every step is one numpy float32 operation (IEEE: correctly rounded, never fused), elementwise over all rows at
once. The two steps that scale by 2^k run in float64, where 2^k (k down to -162) and the scaled values are exact,
and round to float32 once, as the spec states them. Valid inputs only. The bfloat16 variant is the same arithmetic
on the widened inputs with each output rounded to bfloat16 once (bfloat16 values are held as float32 arrays).
"""

import numpy as np

from reference.batch_invariant_linear import ref_bf16_round

F = np.float32
G_MIN = F(-112.0)  # silu(g) for g <= G_MIN rounds to -0
X_MIN = F(-64.0)  # exp argument floor: fl(1 + e^x) = 1 below it
LOG2E = F(1.44269504088896341)
LN2_HI = F(0.693359375)  # 355 / 512: n * LN2_HI is exact for |n| < 2^15
LN2_LO = F(-2.12194440e-4)  # ln 2 - LN2_HI, rounded
EXP_POLY = tuple(F(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                                1.6666665459e-1, 5.0000001201e-1))


def ref_silu_f32(g):
    """silu of every element of g (float32 array), in the order of §4.12. Returns float32, g's shape."""
    g = np.asarray(g, dtype=F)
    with np.errstate(all="ignore"):  # NaN inputs go through, their lanes are replaced at the end
        gc = np.maximum(g, G_MIN)  # numerator; np.maximum keeps a NaN, replaced below
        x = np.maximum(-gc, X_MIN)  # exp argument, in [-64, 112]
        n = np.rint(x * LOG2E)  # round half to even; an integer in [-92, 162]
        r = (x - n * LN2_HI) - n * LN2_LO
        poly = EXP_POLY[0]
        for c in EXP_POLY[1:]:
            poly = poly * r + c
        p = ((poly * (r * r)) + r) + F(1)  # e^r; e^x = p * 2^n
        scale = np.ldexp(1.0, -np.nan_to_num(n).astype(np.int64))  # 2^k, k = -n, exact in float64
        d = (p.astype(np.float64) + scale).astype(F)  # fl(p + 2^k): the exact sum rounded once
        v = gc / d
        silu = (v.astype(np.float64) * scale).astype(F)  # fl(v * 2^k): exact product rounded once
    return np.where(np.isnan(g), g, silu)


def ref_fused_swiglu(gate_up):
    """gate_up [R, 2I] float32 (gate columns, then up) -> out [R, I] float32, out = fl(silu(gate) * up)."""
    gate_up = np.asarray(gate_up, dtype=F)
    rows, width = gate_up.shape
    assert width >= 2 and width % 2 == 0, f"gate_up {gate_up.shape}: expected [R, 2I] with I >= 1"
    inter = width // 2
    with np.errstate(all="ignore"):  # 0 * inf and NaN propagate as IEEE says
        out = ref_silu_f32(gate_up[:, :inter]) * gate_up[:, inter:]
    assert out.dtype == F, "float32 order model drifted"
    return out


def ref_fused_swiglu_bf16(gate_up):
    """The bfloat16 variant (§4.12): gate_up holds bfloat16 values (a float32 array); the float32 arithmetic above
    runs on them unchanged and each output is rounded to bfloat16 once. Returns float32 bfloat16 values."""
    assert np.array_equal(ref_bf16_round(gate_up), gate_up, equal_nan=True), "gate_up holds non-bfloat16 values"
    return ref_bf16_round(ref_fused_swiglu(gate_up))
