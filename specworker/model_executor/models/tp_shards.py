"""Which slice of each full checkpoint tensor one tensor-parallel rank loads (docs/tensor_parallel.md).

A Shard is a list of spans along one axis, concatenated and zero-padded: the fused q/k/v columns of this
rank's heads, the gate and up columns of its intermediate share, its vocabulary rows. Tensors without a
Shard are replicated. Reading goes through SafetensorsFile.float32_slice, so a rank reads only its bytes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from specworker.model_executor.models.safetensors_io import SafetensorsFile
from specworker.model_executor.parallel import TensorParallel

__all__ = ["Shard", "heads_span", "our_layout_shard", "read_shard", "vocab_shard"]


@dataclasses.dataclass(frozen=True, slots=True)
class Shard:
    """spans [(start, stop), ...] along `axis` of a tensor `full` long there, concatenated; then zero rows /
    columns up to `padded`."""

    axis: int
    full: int
    spans: tuple[tuple[int, int], ...]
    padded: int | None = None

    def shape(self, local_shape: list[int]) -> list[int]:
        """The full tensor's shape, given the shape of this rank's parameter."""
        out = list(local_shape)
        out[self.axis] = self.full
        return out

    def apply(self, full: np.ndarray) -> np.ndarray:
        """This shard of an in-memory tensor (the reference the file reader is tested against)."""
        index = [slice(None)] * full.ndim
        parts = []
        for start, stop in self.spans:
            index[self.axis] = slice(start, stop)
            parts.append(full[tuple(index)])
        return _pad(np.concatenate(parts, axis=self.axis), self.axis, self.padded)


def heads_span(tp: TensorParallel, heads: int, head_dim: int, offset: int = 0) -> tuple[int, int]:
    """[start, stop) of this rank's heads' rows / columns in a [heads * head_dim] block starting at offset."""
    first, last = tp.part(heads)
    return offset + first * head_dim, offset + last * head_dim


def vocab_shard(tp: TensorParallel, vocab_size: int, axis: int) -> Shard:
    """This rank's vocabulary rows (axis 0: an embedding [V, H]) or columns (axis 1: an lm_head [H, V])."""
    return Shard(axis, vocab_size, (tp.vocab_part(vocab_size),), tp.vocab_share(vocab_size))


def our_layout_shard(name: str, arch, tp: TensorParallel) -> Shard | None:
    """The Shard of parameter `name` of LlamaModel / MTPDraft (our [in, out] layout, the tiny checkpoints'
    names) for `arch` (LlamaArch); None: replicated (norms, o / down biases, eh_proj)."""
    hd, i = arch.head_dim, arch.intermediate_size
    q, kv = arch.num_heads * hd, arch.num_kv_heads * hd
    qkv = (heads_span(tp, arch.num_heads, hd), heads_span(tp, arch.num_kv_heads, hd, q),
           heads_span(tp, arch.num_kv_heads, hd, q + kv))
    first, last = tp.part(i)
    gate_up = ((first, last), (i + first, i + last))
    leaf = name.rsplit(".", 2)[-2:]  # e.g. ["attn", "qkv_proj"]
    plans = {
        ("attn", "qkv_proj"): Shard(1, q + 2 * kv, qkv), ("attn", "qkv_bias"): Shard(0, q + 2 * kv, qkv),
        ("attn", "o_proj"): Shard(0, q, (heads_span(tp, arch.num_heads, hd),)),
        ("mlp", "gate_up_proj"): Shard(1, 2 * i, gate_up), ("mlp", "gate_up_bias"): Shard(0, 2 * i, gate_up),
        ("mlp", "down_proj"): Shard(0, i, ((first, last),)),
    }
    if name == "embed_tokens":
        return vocab_shard(tp, arch.vocab_size, 0)
    if name == "lm_head":
        return vocab_shard(tp, arch.vocab_size, 1)
    return plans.get(tuple(leaf))


def read_shard(f: SafetensorsFile, name: str, shard: Shard | None) -> np.ndarray:
    """Tensor `name` of `f`, whole (shard None) or only this rank's shard, float32."""
    if shard is None:
        return f.float32(name)
    parts = [f.float32_slice(name, shard.axis, start, stop) for start, stop in shard.spans]
    return _pad(np.concatenate(parts, axis=shard.axis), shard.axis, shard.padded)


def _pad(array: np.ndarray, axis: int, padded: int | None) -> np.ndarray:
    if padded is None or array.shape[axis] == padded:
        return array
    widths = [(0, 0)] * array.ndim
    widths[axis] = (0, padded - array.shape[axis])
    return np.pad(array, widths)  # zeros: padding embedding rows / lm_head columns, dropped after the gather
