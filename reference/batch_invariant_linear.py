"""numpy references for batch_invariant_linear: out = x @ weight + bias, weight [K, N].

ref_batch_invariant_linear is the mathematical value (float64, compared with a tolerance).
ref_batch_invariant_linear_fp32_order is the op's documented float32 contract, the one thing that
makes it batch invariant: each output is a left-to-right sum over k of products, every product
and every partial sum rounded to float32 (never fused), then + bias. numpy float32 arrays round
each elementwise operation exactly like that, so this is a bit-exact model of the contract
(vectorised across outputs, never across k). Neither imports specworker.
"""

import numpy as np


def ref_batch_invariant_linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """float64 value of x [M, K] @ weight [K, N] (+ bias [N]), one output row at a time."""
    x64 = np.asarray(x, dtype=np.float64)
    w64 = np.asarray(weight, dtype=np.float64)
    M = x64.shape[0]
    N = w64.shape[1]
    out = np.zeros((M, N), dtype=np.float64)
    for r in range(M):
        out[r] = x64[r] @ w64  # [K] @ [K, N] -> [N]
        if bias is not None:
            out[r] += np.asarray(bias, dtype=np.float64)
    return out


def ref_batch_invariant_linear_fp32_order(x: np.ndarray, weight: np.ndarray,
                                          bias: np.ndarray | None = None) -> np.ndarray:
    """The documented float32 order: acc = +0; acc = fl(acc + fl(x[r, k] * w[k, n])) for k = 0..K-1;
    out = fl(acc + bias[n]). Returns float32 [M, N]."""
    x32 = np.asarray(x, dtype=np.float32)
    w32 = np.asarray(weight, dtype=np.float32)
    acc = np.zeros((x32.shape[0], w32.shape[1]), dtype=np.float32)
    with np.errstate(all="ignore"):  # Inf / NaN inputs propagate as IEEE says
        for k in range(x32.shape[1]):
            prod = x32[:, k:k + 1] * w32[k:k + 1, :]  # float32 * float32 -> float32, one rounding
            acc = acc + prod
        if bias is not None:
            acc = acc + np.asarray(bias, dtype=np.float32)[None, :]
    assert acc.dtype == np.float32, f"float32 order model drifted to {acc.dtype}"
    return acc


def ref_bf16_round(weight: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), returned as float32: the values a
    bfloat16 weight holds (widening bfloat16 to float32 is exact). Finite inputs only."""
    bits = np.ascontiguousarray(weight, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)
