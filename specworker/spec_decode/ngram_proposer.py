"""NgramProposer: drafts by prompt lookup (method ngram; docs/spec.md "ngram_match"). No model runs and it
keeps no per-slot state of its own: the history it searches is the target batch's prompt_ids + pre_ids,
PER_SLOT buffers of TARGET_BUFFERS, so every swap, condense and reorder of the batch moves it with the slot.
"""

from __future__ import annotations

from specworker.config import SpeculativeConfig
from specworker.model_executor import ops
from specworker.spec_decode.base import Proposer, feed_last_tokens
from specworker.spec_decode.metadata import ProposerInputs, ProposerOutput

__all__ = ["NgramProposer"]


class NgramProposer(Proposer):
    """Per running decode slot: the tokens that followed the most recent earlier occurrence of the slot's
    last n tokens (n = max_ngram_size down to min_ngram_size) in its prompt + generated tokens, at most
    actual_draft_token_nums[b] of them (the adaptive length speculate_update keeps, <= k) and never past
    max_dec_len, go to draft_tokens[b, 1..]; seq_lens_this_time[b] = 1 + their number. Stopped and paused
    slots get L = 0; prefill rows are left to the host.
    """

    reads_draft_budget = True

    def __init__(self, spec: SpeculativeConfig):
        self.k = spec.num_speculative_tokens
        self.max_ngram_size = spec.max_ngram_size
        self.min_ngram_size = spec.min_ngram_size

    def run(self, inputs: ProposerInputs) -> ProposerOutput:
        t = inputs
        if t.max_draft_len == 0:  # the policy gave every slot k_b = 0: no search, every running slot feeds 1 token
            feed_last_tokens(t)
            return ProposerOutput.of(inputs)
        ops.ngram_match(
            t.prompt_ids, t.prompt_lens, t.pre_ids, t.step_idx, t.actual_draft_token_nums, t.draft_tokens,
            t.seq_lens_this_time, t.seq_lens_encoder, t.seq_lens_decoder, t.max_dec_len, self.max_ngram_size,
            self.k, min_ngram_size=self.min_ngram_size, is_block_step=t.is_block_step)
        return ProposerOutput.of(inputs)
