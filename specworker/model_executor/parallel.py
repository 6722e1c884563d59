"""TensorParallel: one rank's share of a tensor-parallel model and the two collectives the model path needs
(docs/spec.md §6.3, docs/tensor_parallel.md). Owns the split arithmetic (heads, intermediate, padded vocab) and
the reductions; the layers own which weight is split how. paddle.distributed communicates (gloo, NCCL).
"""

from __future__ import annotations

import dataclasses

import paddle

from specworker.config_checks import ConfigError

__all__ = ["SINGLE_RANK", "TensorParallel", "init_tensor_parallel"]


@dataclasses.dataclass(frozen=True, slots=True)
class TensorParallel:
    """Rank `rank` of `size` ranks. size 1 is the single-rank model: every method is then the identity
    (no collective, no copy), so the single-rank path is the same code with the same bits."""

    rank: int = 0
    size: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"TensorParallel: size = {self.size!r}; allowed: an int >= 1")
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or not 0 <= self.rank < self.size:
            raise ValueError(f"TensorParallel: rank = {self.rank!r}; allowed: 0..size - 1 = {self.size - 1}")

    def part(self, n: int) -> tuple[int, int]:
        """[start, stop) of this rank's equal share of n (heads, KV heads, intermediate columns).
        Example: n 6, size 2 -> rank 0 (0, 3), rank 1 (3, 6)."""
        if n % self.size:
            raise AssertionError(f"TensorParallel.part: {n} does not split over {self.size} ranks (config checks it)")
        share = n // self.size
        return self.rank * share, (self.rank + 1) * share

    def vocab_share(self, vocab_size: int) -> int:
        """Rows of the vocabulary each rank holds: ceil(V / size) (the last rank's tail is zero padding)."""
        return -(-vocab_size // self.size)

    def vocab_part(self, vocab_size: int) -> tuple[int, int]:
        """[start, stop) of the real token ids this rank holds; stop - start may be < vocab_share on the
        last rank. Example: V 259, size 2 -> rank 0 (0, 130), rank 1 (130, 259) of 130 rows each."""
        share = self.vocab_share(vocab_size)
        return min(self.rank * share, vocab_size), min((self.rank + 1) * share, vocab_size)

    def reduce_sum(self, partial: paddle.Tensor) -> paddle.Tensor:
        """Sum of every rank's `partial` (same shape on all ranks), identical bits on every rank, and each
        element's bits independent of the tensor's size (batch invariance). 2 ranks: one all_reduce (a sum
        of two floats is commutative, so any order gives the same bits). More ranks: gloo's ring all_reduce
        sums an element in an order that depends on which chunk of the tensor holds it, hence on the tensor's
        size (measured: docs/tensor_parallel.md), so the partials are all-gathered and added in rank order."""
        if self.size == 1:
            return partial
        import paddle.distributed as dist

        if self.size == 2:
            dist.all_reduce(partial)
            return partial
        parts: list[paddle.Tensor] = []
        dist.all_gather(parts, partial)
        total = parts[0]
        for part in parts[1:]:
            total = total + part  # rank order, left to right
        return total

    def gather_vocab(self, local: paddle.Tensor, vocab_size: int) -> paddle.Tensor:
        """Full-vocabulary rows from every rank's column share. local [R, vocab_share] float32 ->
        [R, vocab_size] (the padding columns dropped), the same on every rank."""
        if self.size == 1:
            return local
        import paddle.distributed as dist

        parts: list[paddle.Tensor] = []
        dist.all_gather(parts, local)
        # drop the padding before the concat: its result is a fresh contiguous [R, V] (a slice after it would be
        # a strided view, which ops that walk rows by V, such as the penalty op, misread)
        tail = vocab_size - (self.size - 1) * local.shape[-1]
        return paddle.concat(parts[:-1] + [parts[-1][:, :tail]], axis=-1)  # [R, V]


SINGLE_RANK = TensorParallel()


def init_tensor_parallel(size: int) -> TensorParallel:
    """This process's TensorParallel for parallel_config.tensor_parallel_size = size: initialises
    paddle.distributed once and checks that the launch started exactly `size` ranks."""
    if size == 1:
        return SINGLE_RANK
    import paddle.distributed as dist

    world = dist.get_world_size()
    if world != size:
        raise ConfigError(f"parallel_config.tensor_parallel_size = {size}, but this process is one of {world} "
                          f"ranks; allowed: {world} here, or start {size} ranks: `specworker run` does it itself, "
                          "an embedding engine through paddle.distributed.launch (docs/tensor_parallel.md)",
                          key="parallel_config.tensor_parallel_size")
    if not dist.is_initialized():
        dist.init_parallel_env()
    return TensorParallel(rank=dist.get_rank(), size=size)
