"""DRAFT_BUFFERS: the MTP proposer's own batch (docs/spec.md §3: "the proposer has its own batch of the same
kind"), declared like the target's and moved row by row with it. FastDeploy's proposer names."""

from __future__ import annotations

import numpy as np

from specworker.model_executor.slot_buffers import (NO_TOKEN, TARGET_BUFFERS, BufferKind, BufferSpec, SlotBuffers,
                                                   check_table)

__all__ = ["DRAFT_BUFFERS", "DraftBatch"]

N, S, D = "max_num_seqs", "max_model_len", "max_draft_token_num"


def _slot(name, dims, dtype, fill, doc) -> BufferSpec:
    return BufferSpec(name, dims, dtype, fill, BufferKind.PER_SLOT, False, doc)


DRAFT_BUFFERS: tuple[BufferSpec, ...] = (
    _slot("input_ids", (N, S), "int64", NO_TOKEN, "draft prompt chunk: the target's shifted left by one"),
    _slot("pre_ids", (N, S), "int64", NO_TOKEN, "draft history"),
    _slot("draft_tokens", (N, D), "int64", NO_TOKEN, "draft decode input: the tokens the target accepted"),
    _slot("seq_lens_this_time", (N,), "int32", 0, "draft L_b of the current substep"),
    _slot("seq_lens_encoder", (N,), "int32", 0, "draft E_b (> 0: the draft prefills this step)"),
    _slot("seq_lens_decoder", (N,), "int32", 0, "draft tokens in the draft KV cache"),
    _slot("step_idx", (N,), "int64", 0, "draft step index"),
    _slot("stop_flags", (N,), "bool", True, "draft slot idle"),
    _slot("draft_probs", (N, "num_speculative_tokens", "vocab_size"), "float32", 0.0,
          "distribution each draft was sampled from (rejection verification); moves with the slot"),
    BufferSpec("last_hidden", (N, "hidden_size"), "float32", 0.0, BufferKind.PER_STEP, False,
               "each slot's last draft hidden row, input of the next substep (rebuilt every substep)"),
    BufferSpec("not_need_stop", (1,), "bool", False, BufferKind.GLOBAL, False, "some draft slot runs"),
    # the draft's own packed index tensors, rebuilt by pre_process every substep (same specs as the target's)
    *(spec for spec in TARGET_BUFFERS if spec.kind is BufferKind.PER_STEP),
)
check_table(DRAFT_BUFFERS)


class DraftBatch(SlotBuffers):
    """The proposer's batch: a SlotBuffers of DRAFT_BUFFERS that follows the target's. Only the proposer writes its
    rows: `write_row` (a draft prefill) and a round of the draft model (`mark_written`, every row). A row nothing
    wrote since its last reset still holds its fills, so resetting it, or swapping or moving two such rows, changes
    nothing and is skipped: a batch of draft-less requests never runs the draft model, and each of its requests cost
    ~9 row writes at insert and ~9 at clear (at 64 slots on the tiny pair ~0.5% of a draft-less step, the largest part
    of that step's cost over a worker without speculation). `clean` is host bookkeeping, no device read.
    """

    def __init__(self, table, dims, place):
        super().__init__(table, dims, place)
        self.clean = np.ones(self.num_slots, dtype=bool)  # [N] the row holds its fills

    def mark_written(self) -> None:
        """Every row may have been written (the draft model ran over the batch)."""
        self.clean[:] = False

    def write_row(self, slot: int, values: dict) -> None:
        self._check_slot(slot, "write_row")
        self.clean[slot] = False  # before the write: a rejected field may follow written ones
        super().write_row(slot, values)

    def _reset_row(self, slot: int) -> None:
        if not self.clean[slot]:
            super()._reset_row(slot)
            self.clean[slot] = True

    def _move_row(self, src: int, dst: int) -> None:
        src_clean = bool(self.clean[src])
        if src_clean and self.clean[dst]:
            return
        super()._move_row(src, dst)  # dst := src, then src reset (skipped when it was clean)
        self.clean[dst] = src_clean

    def _swap_rows(self, i: int, j: int) -> None:
        if self.clean[i] and self.clean[j]:
            return
        super()._swap_rows(i, j)
        self.clean[[i, j]] = self.clean[[j, i]]
