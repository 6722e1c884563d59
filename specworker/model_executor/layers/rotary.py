"""Rotary position embedding (RoPE, half-rotation layout as in Llama) from a precomputed cos/sin table.

The table is built once on the host at construction; the step path only gathers rows of it by
position, so a row's bits never depend on the batch (no transcendental runs per step).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import paddle


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RopeScaling:
    """Hugging Face's `rope_scaling` for the two supported types (other types are rejected at load).

    linear: every frequency divided by factor (positions stretched).
    llama3: Llama 3.1's band rule over wavelengths 2 pi / f relative to original_max_position_embeddings
    (long wavelengths divided by factor, short ones kept, a linear blend between low_freq_factor and
    high_freq_factor).
    """

    rope_type: str  # "linear" | "llama3"
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def apply(self, inv_freq: np.ndarray) -> np.ndarray:
        """Scaled frequencies (float64 in, float64 out)."""
        if self.rope_type == "linear":
            return inv_freq / self.factor
        old_len = float(self.original_max_position_embeddings)
        wavelen = 2 * np.pi / inv_freq
        scaled = np.where(wavelen > old_len / self.low_freq_factor, inv_freq / self.factor, inv_freq)
        smooth = (old_len / wavelen - self.low_freq_factor) / (self.high_freq_factor - self.low_freq_factor)
        blended = (1 - smooth) * scaled / self.factor + smooth * scaled
        medium = (wavelen >= old_len / self.high_freq_factor) & (wavelen <= old_len / self.low_freq_factor)
        return np.where(medium, blended, scaled)


class RotaryEmbedding:
    """cos/sin of position * f_j, f_j = theta^(-2j / head_dim) (optionally scaled), j < head_dim / 2,
    for positions 0..max_position - 1."""

    def __init__(self, head_dim: int, theta: float, max_position: int, scaling: RopeScaling | None = None):
        if head_dim % 2:
            raise ValueError(f"RotaryEmbedding: head_dim = {head_dim}; allowed: an even number")
        self.head_dim = head_dim
        self.max_position = max_position
        inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
        if scaling is not None:
            inv_freq = scaling.apply(inv_freq)
        angles = np.arange(max_position, dtype=np.float64)[:, None] * inv_freq[None, :]
        cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
        self.cos = paddle.to_tensor(cos)  # [max_position, head_dim / 2]
        self.sin = paddle.to_tensor(sin)
        # The inference path's per-position factors (apply_rotary_factors): [max_position, head_dim] each.
        self.cos_full = paddle.to_tensor(np.concatenate([cos, cos], axis=1))
        self.sin_signed = paddle.to_tensor(np.concatenate([-sin, sin], axis=1))

    def to(self, place) -> RotaryEmbedding:
        self.cos, self.sin = self.cos.to(place), self.sin.to(place)
        self.cos_full, self.sin_signed = self.cos_full.to(place), self.sin_signed.to(place)
        return self

    def tables(self, positions: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
        """cos, sin rows of `positions` (any int shape P, clamped into the table) -> [*P, head_dim / 2] each."""
        pos = paddle.clip(positions.astype("int64"), 0, self.max_position - 1)
        flat = pos.reshape([-1])
        shape = list(positions.shape) + [self.head_dim // 2]
        return paddle.gather(self.cos, flat).reshape(shape), paddle.gather(self.sin, flat).reshape(shape)


    def factors(self, positions: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
        """apply_rotary_factors' cos_full, sin_signed for positions [T] (clamped): [T, 1, head_dim] each,
        gathered once per step and shared by every layer."""
        pos = paddle.clip(positions.astype("int64"), 0, self.max_position - 1).reshape([-1])
        shape = [pos.shape[0], 1, self.head_dim]
        return paddle.gather(self.cos_full, pos).reshape(shape), paddle.gather(self.sin_signed, pos).reshape(shape)


def apply_rotary_factors(x: paddle.Tensor, cos_full: paddle.Tensor, sin_signed: paddle.Tensor) -> paddle.Tensor:
    """apply_rotary in four ops, with its bits: x * [c, c] + roll(x, d/2) * [-s, s], i.e.
    x1 * c + x2 * (-s) == x1 * c - x2 * s and x2 * c + x1 * s exactly (negation is exact in IEEE).
    Attention.forward computes these bits with ops.qkv_norm_rotary (one op, docs/spec.md §4.11).

    Args:
        x: [T, heads, head_dim].
        cos_full, sin_signed: [T, 1, head_dim] from RotaryEmbedding.factors.
    Returns:
        [T, heads, head_dim].
    """
    return x * cos_full + paddle.roll(x, x.shape[-1] // 2, axis=-1) * sin_signed


def apply_rotary(x: paddle.Tensor, cos: paddle.Tensor, sin: paddle.Tensor) -> paddle.Tensor:
    """Rotates pairs (x[j], x[j + d/2]) by the position's angle j.

    Args:
        x: [..., heads, head_dim].
        cos, sin: [..., head_dim / 2], broadcast over the heads axis.
    Returns:
        [..., heads, head_dim].
    """
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos.unsqueeze(-2), sin.unsqueeze(-2)
    return paddle.concat([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)
