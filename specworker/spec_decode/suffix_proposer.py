"""SuffixProposer: suffix decoding (method suffix) on the host. Each request has a SuffixTree over its prompt and
output, updated from the step's one host copy (the accept_tokens / accept_num mirrors); a global tree holds the
outputs of recent finished requests. Tree work that no draft of the next step waits for (a new request's prompt
tree, adding and evicting finished outputs) runs on a helper thread while the target's forward runs.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
import time
import weakref

import numpy as np

from specworker.config import WorkerConfig
from specworker.spec_decode.base import Proposer
from specworker.slot_request import SlotRequest
from specworker.spec_decode.host_drafts import write_host_drafts
from specworker.spec_decode.metadata import ProposerInputs, ProposerOutput
from specworker.spec_decode.suffix_tree import NO_DRAFT, SuffixTree

__all__ = ["SuffixProposer", "SuffixTimes"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(slots=True)
class SuffixTimes:
    """Host seconds of the proposer, summed over its runs."""

    runs: int = 0  # proposer runs (engine steps)
    step_seconds: float = 0.0  # inside run(): on the step's critical path (tree updates, lookups, the upload)
    wait_seconds: float = 0.0  # part of step_seconds spent waiting for the helper thread
    background_seconds: float = 0.0  # on the helper thread (prompt trees, global tree upkeep)

    def per_step_ms(self) -> dict[str, float]:
        n = max(self.runs, 1)
        return {"step_ms": 1e3 * self.step_seconds / n, "wait_ms": 1e3 * self.wait_seconds / n,
                "background_ms": 1e3 * self.background_seconds / n}


@dataclasses.dataclass(slots=True)
class _Request:
    """The proposer's view of the request in a slot (moves with the slot)."""

    prompt: list[int]
    tree: SuffixTree | None = None  # built on the helper thread; ready once the pending work is done
    output: list[int] = dataclasses.field(default_factory=list)  # emitted tokens the proposer has seen
    prefilling: bool = True  # a middle prefill chunk runs (its sampled token is discarded)

    def context(self, length: int) -> list[int]:
        """The last `length` tokens of prompt + output."""
        out = self.output[-length:]
        if len(out) < length:
            out = self.prompt[max(len(self.prompt) - (length - len(out)), 0):] + out
        return out


class SuffixProposer(Proposer):
    """Per running decode slot: the draft of its own tree or of the global tree, whichever has the higher
    score (expected accepted tokens), at most k tokens (further capped on the device by the adaptive budget and
    max_dec_len, write_host_drafts). Stopped, paused and empty slots get L = 0; prefill rows are left to the
    host. Reads host mirrors only: no device value is read.
    """

    reads_draft_budget = True

    def __init__(self, config: WorkerConfig):
        spec = config.speculative_config
        self.k = spec.num_speculative_tokens
        self.max_depth = spec.suffix_max_depth
        self.spec_factor = spec.suffix_max_spec_factor
        self.min_prob = spec.suffix_min_token_prob
        self.max_cached = spec.suffix_max_cached_requests
        num_slots = config.scheduler.max_num_seqs
        self.slots: list[_Request | None] = [None] * num_slots
        self.global_tree = SuffixTree(self.max_depth) if self.max_cached > 0 else None
        self._cached: collections.deque[list[int]] = collections.deque()  # outputs in the global tree, oldest first
        self.times = SuffixTimes()
        self._drafts = np.full([num_slots, self.k], -1, dtype=np.int64)
        self._num = np.zeros([num_slots], dtype=np.int64)
        self._idle = np.ones([num_slots], dtype=bool)
        self._helper = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="suffix-trees")
        self._pending: concurrent.futures.Future | None = None  # the last task given to the helper (FIFO)
        weakref.finalize(self, self._helper.shutdown, wait=False)

    # ---- helper thread ----
    def _submit(self, fn, *args) -> None:
        def timed():
            start = time.perf_counter()
            fn(*args)
            self.times.background_seconds += time.perf_counter() - start

        self._pending = self._helper.submit(timed)

    def _wait(self) -> None:
        if self._pending is not None:
            self._pending.result()  # the helper runs tasks in order: the last one done means all are
            self._pending = None

    @staticmethod
    def _build_tree(request: _Request, max_depth: int) -> None:
        tree = SuffixTree(max_depth)
        tree.extend(request.prompt)
        request.tree = tree

    def _cache_output(self, output: list[int]) -> None:
        self.global_tree.insert(output)
        self._cached.append(output)
        while len(self._cached) > self.max_cached:
            self.global_tree.remove(self._cached.popleft())

    # ---- row moves (a follower of the target batch) and host writes, between steps ----
    def followers(self):
        return (self,)

    def on_insert(self, slot: int, request: SlotRequest) -> None:
        request = _Request(prompt=list(request.prompt_token_ids))
        self.slots[slot] = request
        self._submit(self._build_tree, request, self.max_depth)  # overlaps the prefill forward

    def write_prefill(self, slot: int, prompt_token_ids: list[int], start: int, length: int, *,
                      draft_less: bool = False) -> None:
        self.slots[slot].prefilling = start + length < len(prompt_token_ids)

    def on_clear(self, slot: int) -> None:
        request, self.slots[slot] = self.slots[slot], None
        if request is not None and request.output and self.global_tree is not None:
            self._submit(self._cache_output, request.output)

    def on_swap(self, i: int, j: int) -> None:
        self.slots[i], self.slots[j] = self.slots[j], self.slots[i]

    def on_move(self, src: int, dst: int) -> None:
        self.slots[dst], self.slots[src] = self.slots[src], None

    # ---- the proposer's part of the step ----
    def run(self, inputs: ProposerInputs) -> ProposerOutput:
        start = time.perf_counter()
        self._wait()
        waited = time.perf_counter() - start
        accept_num = inputs.accept_num_cpu.numpy()  # host mirrors, refreshed by the step's one copy
        accept_tokens = inputs.accept_tokens_cpu.numpy()
        stopped = inputs.stop_flags_cpu.numpy()
        paused = inputs.is_block_step_cpu.numpy()
        drafts, num, idle = self._drafts, self._num, self._idle
        drafts.fill(-1)
        num.fill(0)
        idle.fill(True)
        for slot, request in enumerate(self.slots):
            if request is None or request.prefilling:
                continue
            emitted = accept_tokens[slot, :accept_num[slot]].tolist()
            request.tree.extend(emitted)
            request.output.extend(emitted)
            if stopped[slot] or paused[slot]:
                continue
            idle[slot] = False
            draft = self._propose(request)
            drafts[slot, :len(draft)] = draft
            num[slot] = len(draft)
        write_host_drafts(inputs, drafts, num, idle)
        self.times.runs += 1
        self.times.wait_seconds += waited
        self.times.step_seconds += time.perf_counter() - start
        return ProposerOutput.of(inputs)

    def _propose(self, request: _Request) -> tuple[int, ...]:
        """The higher-scoring of the request's own draft and the global tree's (ties: its own)."""
        own = request.tree.draft(self.k, spec_factor=self.spec_factor, min_prob=self.min_prob)
        other = NO_DRAFT
        if self._cached:
            context = request.context(self.max_depth - self.k)
            other = self.global_tree.draft(self.k, context=context, spec_factor=self.spec_factor,
                                           min_prob=self.min_prob)
        return (other if other.score > own.score else own).tokens
