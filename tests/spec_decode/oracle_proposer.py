"""Test proposers that know the answer: OracleProposer drafts the target's own greedy continuation
(recorded by a non-speculative run), so every draft must be accepted; adversarial=True drafts a wrong
token at every position, so none may be. Both write the target's draft_tokens[b, 1..] and
seq_lens_this_time[b] from host values (uploads), reading only host mirrors."""

from __future__ import annotations

import numpy as np

from specworker.spec_decode.base import Proposer
from specworker.spec_decode.metadata import ProposerOutput


class OracleProposer(Proposer):
    def __init__(self, k: int, continuations: dict[tuple, list[int]], *, adversarial: bool = False):
        self.k = k
        self.continuations = continuations  # prompt tuple -> the target's greedy output
        self.adversarial = adversarial
        self.slots: dict[int, dict] = {}  # slot -> {"ref", "count", "prefilling"}

    def followers(self):
        return (self,)

    def on_insert(self, slot, request):
        ref = self.continuations[tuple(request.prompt_token_ids)]
        self.slots[slot] = {"ref": ref, "count": 0, "prefilling": True}

    def write_prefill(self, slot, prompt_token_ids, start, length, *, draft_less=False):
        self.slots[slot]["prefilling"] = start + length < len(prompt_token_ids)  # a middle chunk

    def on_clear(self, slot):
        self.slots.pop(slot, None)

    def on_swap(self, i, j):
        a, b = self.slots.pop(i, None), self.slots.pop(j, None)
        if a is not None:
            self.slots[j] = a
        if b is not None:
            self.slots[i] = b

    def on_move(self, src, dst):
        if src in self.slots:
            self.slots[dst] = self.slots.pop(src)

    def run(self, inputs):
        accept_num = inputs.accept_num_cpu.numpy()  # host mirrors, filled by the step's copy
        stopped = inputs.stop_flags_cpu.numpy()
        width = inputs.draft_tokens.shape[1]
        for slot, state in self.slots.items():
            if state["prefilling"]:
                continue
            state["count"] += int(accept_num[slot])
            ref, count = state["ref"], state["count"]
            drafts = ref[count:count + self.k] if not stopped[slot] else []
            if self.adversarial:
                drafts = [(t + 1) % 256 for t in drafts]
            row = np.full([width - 1], -1, dtype=np.int64)
            row[:len(drafts)] = drafts
            inputs.draft_tokens[slot, 1:] = row
            inputs.seq_lens_this_time[slot] = 0 if stopped[slot] else 1 + len(drafts)
        return ProposerOutput.of(inputs)
