"""Proposer: what drafts the next step's tokens after the target's step (docs/spec.md §2). `NaiveProposer`
drafts nothing (method none / naive): every running decode slot feeds just its last token next step.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping

import paddle

from specworker.model_executor.forward_meta import ForwardMeta

__all__ = ["NaiveProposer", "Proposer"]


class Proposer(abc.ABC):
    """Writes the target's next-step query: draft_tokens[b, 1..] and seq_lens_this_time[b] of every
    running decode slot. Per-slot state of its own moves with the target batch (swap / condense hooks).
    """

    @abc.abstractmethod
    def run(self, *, target_hidden: paddle.Tensor, meta: ForwardMeta, share_inputs: Mapping[str, paddle.Tensor]
            ) -> None:
        """After the target's verify + update: drafts for the next step (no host read of device values)."""

    def insert(self, slot: int, prompt_token_ids: list[int]) -> None:  # noqa: B027 (optional hook)
        """A request entered `slot` (its prefill is next)."""

    def write_prefill(self, slot: int, prompt_token_ids: list[int], start: int, length: int) -> None:  # noqa: B027
        """The target prefills prompt[start:start + length] of `slot` this step."""

    def clear_slot(self, slot: int) -> None:  # noqa: B027
        """The request in `slot` left."""

    def swap_states(self, i: int, j: int) -> None:  # noqa: B027
        """The target batch swapped slots i and j."""

    def move_slot(self, src: int, dst: int) -> None:  # noqa: B027
        """The target batch moved slot src to the empty slot dst (condense)."""


class NaiveProposer(Proposer):
    """No drafts: L_b = 1 for every running slot (not stopped, not paused), 0 otherwise. Prefill rows are
    rewritten by the host before the next step, so their value here does not matter."""

    def run(self, *, target_hidden, meta, share_inputs) -> None:
        idle = paddle.logical_or(share_inputs["stop_flags"], share_inputs["is_block_step"])
        lens = paddle.where(idle, paddle.zeros_like(share_inputs["seq_lens_this_time"]),
                            paddle.ones_like(share_inputs["seq_lens_this_time"]))
        paddle.assign(lens, output=share_inputs["seq_lens_this_time"])
