"""Counter-based random numbers and the exact inverse-CDF draw of the non-speculative sampler.

A draw is a pure function of (seed, counter), so a row's randomness depends on its slot's seed and
generated-token index only, never on its neighbours, its row, or state carried between calls.
Paddle ops only (same code on CPU and GPU); no value ever exceeds 2**63, so int64 never overflows.

The hash (all words are 32-bit, held in int64 tensors):
    hash32(x):  x ^= x >> 16;  x = (x * 0x21F0AAAD) mod 2**32;  x ^= x >> 15;
                x = (x * 0x735A2D97) mod 2**32;  x ^= x >> 15
    (the "lowbias32" layout of C. Wellons' hash-prospector, with its improved constants; both
    multipliers are below 2**31, so x * c < 2**63 and needs no 16-bit split.)
    bits(seed, counter) = hash32((hash32(seed_lo ^ 0x9E3779B9) + hash32(counter_lo ^ 0x85EBCA6B)) mod 2**32)
    uniform = (2 * bits + 1) / 2**33, a float64 in (0, 1), exact.
seed_lo / counter_lo are the low 32 bits (seeds are 0 .. 2**32 - 1, SamplingParams.seed; counters
are generated-token indices). hash32 is a bijection, so one seed never repeats a value over 2**32
counters, and two seeds' streams are not shifts of each other (the seed and counter are mixed
separately and only then combined).
"""

from __future__ import annotations

import paddle

__all__ = ["MASK32", "hash32", "counter_bits", "counter_uniform", "inverse_cdf_sample"]

MASK32 = 0xFFFFFFFF
SEED_KEY = 0x9E3779B9
COUNTER_KEY = 0x85EBCA6B
MUL_1 = 0x21F0AAAD
MUL_2 = 0x735A2D97


def _xor(x: paddle.Tensor, value: int) -> paddle.Tensor:
    return paddle.bitwise_xor(x, paddle.full_like(x, value))


def _low32(x: paddle.Tensor) -> paddle.Tensor:
    return paddle.bitwise_and(x, paddle.full_like(x, MASK32))


def _shift_right(x: paddle.Tensor, amount: int) -> paddle.Tensor:
    # A tensor shift amount: Paddle 3.3.1 leaks one Python list per `tensor >> int` (issue 16).
    return paddle.bitwise_right_shift(x, paddle.full_like(x, amount))


def hash32(x: paddle.Tensor) -> paddle.Tensor:
    """The 32-bit mixer above, elementwise.

    Args:
        x: int64 tensor of any shape with values in [0, 2**32).
    Returns:
        int64 tensor of the same shape, values in [0, 2**32).
    """
    x = paddle.bitwise_xor(x, _shift_right(x, 16))
    x = _low32(x * MUL_1)  # < 2**32 * 2**31
    x = paddle.bitwise_xor(x, _shift_right(x, 15))
    x = _low32(x * MUL_2)
    return paddle.bitwise_xor(x, _shift_right(x, 15))


def counter_bits(seed: paddle.Tensor, counter: paddle.Tensor) -> paddle.Tensor:
    """32 random bits per element for the pair (seed, counter).

    Args:
        seed: [R] int64 per-row seed (only the low 32 bits are used).
        counter: [R] int64 per-row counter (only the low 32 bits are used).
    Returns:
        [R] int64 in [0, 2**32).
    """
    mixed_seed = hash32(_xor(_low32(seed), SEED_KEY))
    mixed_counter = hash32(_xor(_low32(counter), COUNTER_KEY))
    return hash32(_low32(mixed_seed + mixed_counter))


def counter_uniform(seed: paddle.Tensor, counter: paddle.Tensor) -> paddle.Tensor:
    """(2 * bits + 1) / 2**33: [R] float64 in (0, 1), exactly representable (33 significant bits)."""
    bits = counter_bits(seed, counter)
    return (bits * 2 + 1).astype("float64") * (2.0**-33)


def inverse_cdf_sample(weights: paddle.Tensor, uniform: paddle.Tensor) -> paddle.Tensor:
    """Draws one index per row from integer weights, in vocabulary order.

    With T = sum(weights[r]) and the threshold t = min(floor(uniform[r] * T), T - 1) (float64
    product; T < 2**53 is exact), the index is the smallest i with weights[r, 0] + ... +
    weights[r, i] > t. Integer prefix sums are exact in any order, so the draw depends only on the
    row's weights and uniform. The chosen entry has a nonzero weight whenever T > 0.

    Args:
        weights: [R, V] int64 non-negative, each row's total below 2**53.
        uniform: [R] float64 in (0, 1).
    Returns:
        [R] int64 indices in [0, V) (0 for a row whose weights are all zero).
    """
    cdf = paddle.cumsum(weights, axis=-1)  # [R, V], inclusive
    total = cdf[:, -1:]  # [R, 1]
    threshold = paddle.floor(uniform.unsqueeze(-1) * total.astype("float64")).astype("int64")
    threshold = paddle.clip(paddle.minimum(threshold, total - 1), min=0)
    index = paddle.searchsorted(cdf, threshold, right=True)  # [R, 1]: first i with cdf[i] > t
    return paddle.clip(index.squeeze(-1), max=weights.shape[-1] - 1)
