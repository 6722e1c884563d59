"""numpy reference for batch_invariant_linear_bf16 (docs/spec.md §4.8): out = x @ weight + bias on
bfloat16 values, and the error bound the op promises against it. Neither imports specworker.

bfloat16 arrays are held as float32 arrays of bfloat16 values (widening is exact) or as their uint16
bits (what a device buffer holds; numpy has no bfloat16 dtype).
"""

import numpy as np

from reference.batch_invariant_linear import ref_batch_invariant_linear, ref_bf16_round

__all__ = ["bf16_bits", "bf16_from_bits", "ref_batch_invariant_linear_bf16", "ref_batch_invariant_linear_bf16_chunks",
           "ref_batch_invariant_linear_bf16_error_bound", "ref_bf16_round"]

# float32 accumulation over K terms in 16-wide MMA steps: 2^-16 of sum |x w| covers the MMA's
# internal rounding (truncating adders included) with room for K up to ~2^16 at typical cancellation.
ACC_REL = 2.0 ** -16
BF16_OUT_REL = 2.0 ** -8  # rounding the float32 result to bfloat16: half an ulp is <= 2^-8 relative
# The GPU's k chunks (docs/spec.md §4.8, "Arithmetic (GPU)").
CHUNK_ALIGN, SPLIT_MIN_CHUNK, SPLIT_TARGET, MAX_SPLITS = 128, 1024, 384, 4


def bf16_bits(a: np.ndarray) -> np.ndarray:
    """uint16 bits of float32 values that are already bfloat16 values (ref_bf16_round's output)."""
    return (np.ascontiguousarray(a, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def bf16_from_bits(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 bits (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def ref_batch_invariant_linear_bf16(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """float64 value of x [M, K] @ weight [K, N] (+ bias [N]) on bfloat16 values (the float32 op's
    float64 reference: the value does not depend on the input type). Returns float64 [M, N]."""
    return ref_batch_invariant_linear(x, weight, bias)


def ref_batch_invariant_linear_bf16_chunks(K: int, N: int) -> list[tuple[int, int]]:
    """The GPU kernel's k chunks [start, end) for in_features K and out_features N, as §4.8 defines them:
    S = 1 unless K >= 2 * SPLIT_MIN_CHUNK and N has fewer than SPLIT_TARGET 64-column tiles; then S is the
    largest power of two <= min(MAX_SPLITS, K // SPLIT_MIN_CHUNK, ceil(SPLIT_TARGET / tiles)); each chunk is
    ceil(K / S) rounded up to a multiple of CHUNK_ALIGN long (the last one shorter).
    E.g. (4096, 64) -> 4 chunks of 1024; (2100, 40) -> [(0, 1152), (1152, 2100)]; (576, 576) -> [(0, 576)]."""
    tiles = -(-N // 64)
    s = 1
    if K >= 2 * SPLIT_MIN_CHUNK and tiles < SPLIT_TARGET:
        s = min(MAX_SPLITS, K // SPLIT_MIN_CHUNK, -(-SPLIT_TARGET // tiles))
        s = 1 << (s.bit_length() - 1)
    length = -(-(-(-max(K, 1) // s)) // CHUNK_ALIGN) * CHUNK_ALIGN
    return [(a, min(K, a + length)) for a in range(0, max(K, 1), length)] if K > 0 else [(0, 0)]


def ref_batch_invariant_linear_bf16_error_bound(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None,
                                                out_bf16: bool) -> np.ndarray:
    """The op's documented bound on |out - ref_batch_invariant_linear_bf16| per output, float64 [M, N]:
    ACC_REL * (|x| @ |w| + |bias|) for the float32 accumulation, plus BF16_OUT_REL * |ref| (and the
    smallest normal float32) when the output is bfloat16."""
    mag = np.abs(np.asarray(x, dtype=np.float64)) @ np.abs(np.asarray(weight, dtype=np.float64))
    if bias is not None:
        mag = mag + np.abs(np.asarray(bias, dtype=np.float64))[None, :]
    bound = ACC_REL * mag + np.finfo(np.float32).tiny
    if out_bf16:
        bound = bound + BF16_OUT_REL * np.abs(ref_batch_invariant_linear_bf16(x, weight, bias))
    return bound
