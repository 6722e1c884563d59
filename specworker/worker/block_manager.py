"""BlockManager: the free list of the paged KV cache's blocks (host side). Owns block ids only; the
cache tensors live in the model's KVCache and a slot's blocks reach the kernels through block_tables.
"""

from __future__ import annotations

from collections import deque

__all__ = ["BlockManager"]


class BlockManager:
    """Hands out KV block ids 0..num_blocks - 1 and takes them back. Allocation is all or nothing."""

    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"BlockManager(num_blocks={num_blocks}, block_size={block_size}); allowed: both >= 1")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: deque[int] = deque(range(num_blocks))
        self._used: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    def blocks_for(self, num_positions: int) -> int:
        """Blocks that hold num_positions KV positions: ceil(num_positions / block_size)."""
        return -(-num_positions // self.block_size)

    def can_allocate(self, num_blocks: int) -> bool:
        return num_blocks <= len(self._free)

    def allocate(self, num_blocks: int) -> list[int]:
        """num_blocks free ids (lowest first). Raises RuntimeError when fewer are free: callers check
        can_allocate first, so reaching it is a scheduler bug, never a corrupted cache."""
        if not 0 <= num_blocks <= len(self._free):
            raise RuntimeError(f"BlockManager.allocate({num_blocks}): {len(self._free)} of {self.num_blocks} free")
        ids = [self._free.popleft() for _ in range(num_blocks)]
        self._used.update(ids)
        return ids

    def free(self, block_ids) -> None:
        """Returns ids to the free list. Raises ValueError for an id that is not allocated (double free)."""
        for block_id in block_ids:
            if block_id not in self._used:
                raise ValueError(f"BlockManager.free: block {block_id} is not allocated (double free?)")
            self._used.remove(block_id)
            self._free.append(block_id)
