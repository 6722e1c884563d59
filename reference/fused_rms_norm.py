"""numpy reference for fused_rms_norm, written from docs/spec.md §4.10 (numpy only).

numpy float32 elementwise operations round once each (IEEE), and np.sqrt on float32 is correctly
rounded, so this is a bit-exact model of the op's order: a loop over k (never reassociated) with a
vector of rows. Valid inputs only. The bfloat16 variant is the same arithmetic on the widened inputs with each
output rounded to bfloat16 once (bfloat16 values are held as float32 arrays; widening is exact).
"""

import numpy as np

from reference.batch_invariant_linear import ref_bf16_round


def ref_fused_rms_norm(x, weight, residual=None, eps=1e-6):
    """Returns (out [R, H], residual_out [R, H]) float32; residual_out is h (x when residual is None)."""
    x = np.asarray(x, dtype=np.float32)
    weight = np.asarray(weight, dtype=np.float32)
    rows, hidden = x.shape
    assert hidden >= 1 and weight.shape == (hidden,), f"weight {weight.shape} for x {x.shape}"
    with np.errstate(all="ignore"):  # Inf / NaN propagate as IEEE says
        h = x if residual is None else x + np.asarray(residual, dtype=np.float32)
        inv_h = np.float32(1) / np.float32(hidden)
        acc = np.zeros(rows, dtype=np.float32)
        for k in range(hidden):
            acc = acc + (h[:, k] * h[:, k]) * inv_h  # each product, term and sum rounded to float32
        rs = np.sqrt(acc + np.float32(eps))  # [R]
        out = (h / rs[:, None]) * weight[None, :]
    assert out.dtype == np.float32 and h.dtype == np.float32, "float32 order model drifted"
    return out, h


def ref_fused_rms_norm_bf16(x, weight, residual=None, eps=1e-6):
    """The bfloat16 variant (§4.10): x [R, H], weight [H], residual [R, H] or None hold bfloat16 values (float32
    arrays); the float32 arithmetic above runs on them unchanged (the norm reads the float32 h), then out and
    residual_out are each rounded to bfloat16 once. Returns (out, residual_out) as float32 arrays of bfloat16 values."""
    for name, a in (("x", x), ("weight", weight), ("residual", residual)):
        assert a is None or np.array_equal(ref_bf16_round(a), a), f"{name} holds values that are not bfloat16"
    out, h = ref_fused_rms_norm(x, weight, residual, eps)
    return ref_bf16_round(out), ref_bf16_round(h)
