"""Proposer: what drafts the next step's tokens after the target's step (docs/spec.md §2). `NaiveProposer`
drafts nothing (method none / naive): every running decode slot feeds just its last token next step.
"""

from __future__ import annotations

import abc

import paddle

from specworker.model_executor.slot_buffers import SlotFollower
from specworker.spec_decode.metadata import ProposerInputs, ProposerOutput

__all__ = ["NaiveProposer", "Proposer", "feed_last_tokens"]


class Proposer(abc.ABC):
    """Writes the target's next-step query: draft_tokens[b, 1..] and seq_lens_this_time[b] of every
    running decode slot. Per-slot state of its own follows the target batch (`followers`).
    """

    # [N, D - 1, V] float32: the distribution each draft was sampled from, read by rejection verification;
    # None when drafts are one-hot (greedy drafts, lookup drafts). A buffer fixed for the proposer's life.
    draft_probs: paddle.Tensor | None = None
    # The proposer caps its drafts by actual_draft_token_nums (ngram_match, write_host_drafts), speculate_update's
    # budget, which the runner caps by the policy's k_b (docs/spec.md §2.3). False: it caps by policy_draft_len
    # alone (MTP).
    reads_draft_budget: bool = False

    @abc.abstractmethod
    def run(self, inputs: ProposerInputs) -> ProposerOutput:
        """After the target's verify + update: drafts for the next step (no host read of device values)."""

    def followers(self) -> tuple[SlotFollower, ...]:
        """Per-slot state kept row-aligned with the target batch: the ModelRunner registers each with the
        InputBatch once, so every insert / clear / swap / condense / reorder reaches it."""
        return ()

    def write_prefill(self, slot: int, prompt_token_ids: list[int], start: int, length: int, *,  # noqa: B027
                      draft_less: bool = False) -> None:
        """The target prefills prompt[start:start + length] of `slot` this step. draft_less: the slot never
        drafts (SpeculationPolicy.admit), so what only drafting needs may be skipped."""


def feed_last_tokens(inputs: ProposerInputs) -> None:
    """No drafts: L_b = 1 for every running slot (not stopped, not paused), 0 otherwise (one device assign).
    Prefill rows are rewritten by the host before the next step, so their value here does not matter; columns
    1.. of draft_tokens are not read at L_b = 1."""
    running = paddle.logical_not(paddle.logical_or(inputs.stop_flags, inputs.is_block_step))
    paddle.assign(running.astype("int32"), output=inputs.seq_lens_this_time)


class NaiveProposer(Proposer):
    """No drafts (feed_last_tokens)."""

    def run(self, inputs: ProposerInputs) -> ProposerOutput:
        feed_last_tokens(inputs)
        return ProposerOutput.of(inputs)
