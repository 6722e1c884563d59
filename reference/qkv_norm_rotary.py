"""numpy reference for qkv_norm_rotary, written from docs/spec.md §4.11 (numpy only).

Valid inputs only: it asserts what it assumes instead of reproducing the op's error checks. Every step is
one numpy float32 operation (IEEE: correctly rounded, never fused), elementwise over the heads of all rows
at once; the norm's sum runs over k in order. The bfloat16 variant is the same arithmetic on the widened inputs with
each q and k value rounded to bfloat16 once (bfloat16 values are held as float32 arrays; widening is exact).
"""

import numpy as np

from reference.batch_invariant_linear import ref_bf16_round


def _rms_norm_heads(y, weight, eps):
    """y [T, heads, d] float32 -> each head normed as in §4.11 (the arithmetic of fused_rms_norm, §4.10)."""
    d = y.shape[-1]
    inv_d = np.float32(1) / np.float32(d)
    acc = np.zeros(y.shape[:2], np.float32)  # +0.0 per head
    for k in range(d):
        acc = acc + (y[:, :, k] * y[:, :, k]) * inv_d
    r = np.sqrt(acc + np.float32(eps))  # correctly rounded float32 sqrt
    return (y / r[:, :, None]) * np.asarray(weight, np.float32)


def _rotate_heads(y, cos_full, sin_signed):
    """out_j = y_j * cos_full_j + y_{(j + d/2) mod d} * sin_signed_j, each product and the sum rounded."""
    d = y.shape[-1]
    partner = (np.arange(d) + d // 2) % d
    return y * cos_full[:, None, :] + y[:, :, partner] * sin_signed[:, None, :]


def ref_qkv_norm_rotary(qkv, cos_full, sin_signed, q_norm_weight=None, k_norm_weight=None, *, num_heads,
                        num_kv_heads, head_dim, eps=1e-6):
    """Returns (q [T, nh, d], k [T, nkv, d], v [T, nkv, d]) float32."""
    qkv = np.asarray(qkv, np.float32)
    t_num = qkv.shape[0]
    nh, nkv, d = num_heads, num_kv_heads, head_dim
    assert qkv.shape == (t_num, (nh + 2 * nkv) * d), "qkv is [T, (nh + 2 nkv) * d]"
    assert nh % nkv == 0 and d % 2 == 0, "nh % nkv == 0 and an even head_dim"
    assert (q_norm_weight is None) == (k_norm_weight is None), "norm weights come in pairs"
    cos_full = np.asarray(cos_full, np.float32).reshape(t_num, d)
    sin_signed = np.asarray(sin_signed, np.float32).reshape(t_num, d)
    heads = qkv.reshape(t_num, nh + 2 * nkv, d)
    q, k, v = heads[:, :nh], heads[:, nh:nh + nkv], heads[:, nh + nkv:]
    if q_norm_weight is not None:
        q, k = _rms_norm_heads(q, q_norm_weight, eps), _rms_norm_heads(k, k_norm_weight, eps)
    q, k = _rotate_heads(q, cos_full, sin_signed), _rotate_heads(k, cos_full, sin_signed)
    return np.ascontiguousarray(q), np.ascontiguousarray(k), np.ascontiguousarray(v)


def ref_qkv_norm_rotary_bf16(qkv, cos_full, sin_signed, q_norm_weight=None, k_norm_weight=None, *, num_heads,
                             num_kv_heads, head_dim, eps=1e-6):
    """The bfloat16 variant (§4.11): qkv and the norm weights hold bfloat16 values (float32 arrays), the factors are
    float32; the float32 arithmetic above runs on them unchanged (the normed head is not rounded before the rotation),
    then q and k are rounded to bfloat16 once and v is the input's v. Returns (q, k, v) as float32 arrays of bfloat16
    values."""
    for name, a in (("qkv", qkv), ("q_norm_weight", q_norm_weight), ("k_norm_weight", k_norm_weight)):
        assert a is None or np.array_equal(ref_bf16_round(a), a), f"{name} holds values that are not bfloat16"
    q, k, v = ref_qkv_norm_rotary(qkv, cos_full, sin_signed, q_norm_weight, k_norm_weight, num_heads=num_heads,
                                  num_kv_heads=num_kv_heads, head_dim=head_dim, eps=eps)
    return ref_bf16_round(q), ref_bf16_round(k), v
