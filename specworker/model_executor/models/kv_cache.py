"""KVCache: the paged key/value tensors of one model, one (key_cache, value_cache) pair per layer.

Owns allocation only; which block holds which positions is the caller's (block manager's) block_tables.
"""

from __future__ import annotations

import paddle


class KVCache:
    """Per layer key_cache, value_cache: [num_blocks, num_kv_heads, block_size, head_dim], zero-filled."""

    def __init__(self, num_layers: int, num_blocks: int, num_kv_heads: int, block_size: int, head_dim: int,
                 dtype: str = "float32", place=None):
        for name, value in (("num_layers", num_layers), ("num_blocks", num_blocks), ("num_kv_heads", num_kv_heads),
                            ("block_size", block_size), ("head_dim", head_dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"KVCache: {name} = {value!r}; allowed: an int >= 1")
        self.num_layers, self.num_blocks, self.block_size = num_layers, num_blocks, block_size
        self.shape = [num_blocks, num_kv_heads, block_size, head_dim]
        place = place or paddle.CPUPlace()
        self.layers = [
            (paddle.zeros(self.shape, dtype=dtype).to(place), paddle.zeros(self.shape, dtype=dtype).to(place))
            for _ in range(num_layers)
        ]

    def layer(self, i: int) -> tuple[paddle.Tensor, paddle.Tensor]:
        """(key_cache, value_cache) of layer i."""
        return self.layers[i]

    def __len__(self) -> int:
        return self.num_layers
