"""Scheduler: FCFS continuous batching on the host. Admits waiting requests while a slot and the KV
blocks of their whole budget are free, and splits the step's token budget into decode slots first, then
prefill chunks. Owns queues and block reservations; knows nothing of tensors or slots' contents.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable

from specworker.config import WorkerConfig
from specworker.worker.block_manager import BlockManager
from specworker.worker.request import RequestState, RequestStatus

__all__ = ["PrefillChunk", "Scheduler", "SchedulerOutput"]


@dataclasses.dataclass(frozen=True, slots=True)
class PrefillChunk:
    """Prompt tokens [start, start + length) of `req` run this step; is_last: the prefill ends with it."""

    req: RequestState
    start: int
    length: int

    @property
    def is_last(self) -> bool:
        return self.start + self.length == self.req.num_prompt


@dataclasses.dataclass(slots=True, kw_only=True)
class SchedulerOutput:
    admitted: list[RequestState]  # newly running: give each a slot before the step
    decode: list[RequestState]  # running with the prefill done: one decode (+ drafts) each
    prefill: list[PrefillChunk]  # prefill chunks of this step, FCFS order
    paused: list[RequestState]  # prefilling but no token budget left this step
    token_num: int  # bound on the step's packed tokens: chunk lengths + the decode slots' bound


class Scheduler:
    """FCFS. A request is admitted only when the blocks for prompt + max_tokens + one step's lookahead
    are free, and reserves them all at once: a running request can never run out of KV blocks, so
    exhaustion makes newcomers wait in the queue, never preempts or corrupts. (Reserving up front costs
    capacity versus vLLM-style preemption; it keeps the step path free of block-step recovery.)
    The queue head blocks the ones behind it (strict FCFS: no starvation of long requests)."""

    def __init__(self, config: WorkerConfig, block_manager: BlockManager):
        self.max_num_seqs = config.scheduler.max_num_seqs
        self.max_num_batched_tokens = config.scheduler.max_num_batched_tokens
        self.max_model_len = config.scheduler.max_model_len
        self.lookahead = config.speculative_config.max_draft_token_num  # D = k + 1 positions per step
        self.blocks = block_manager
        self.waiting: deque[RequestState] = deque()
        self.running: list[RequestState] = []

    def blocks_needed(self, req: RequestState) -> int:
        """KV blocks of the request's whole life: every position it can reach, plus one step's lookahead."""
        positions = min(req.num_prompt + req.params.max_tokens, self.max_model_len) + self.lookahead
        return self.blocks.blocks_for(positions)

    def add(self, req: RequestState) -> None:
        req.status = RequestStatus.WAITING
        self.waiting.append(req)

    def remove(self, req: RequestState) -> None:
        """Takes a request out (finished or aborted), returning its blocks."""
        if req.status is RequestStatus.WAITING:
            self.waiting.remove(req)
        elif req in self.running:
            self.running.remove(req)
        self.blocks.free(req.block_ids)
        req.block_ids = []
        req.status = RequestStatus.FINISHED

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self, decode_tokens: Callable[[list[RequestState]], int] | None = None) -> SchedulerOutput:
        """Admissions and this step's token split. Decode slots always fit (config guarantees
        max_num_batched_tokens >= max_num_seqs * D); prefill chunks share what is left, FCFS.

        decode_tokens: the tokens the given decode requests feed this step at most (the runner's bound from the
        policy's k_b); default D each. A policy that drafts less leaves its unused lookahead to the prefills."""
        admitted = []
        while self.waiting and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            need = self.blocks_needed(req)
            if not self.blocks.can_allocate(need):
                break
            self.waiting.popleft()
            req.block_ids = self.blocks.allocate(need)
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            admitted.append(req)
        decode = [r for r in self.running if r.prefill_done]
        reserved = self.lookahead * len(decode) if decode_tokens is None else decode_tokens(decode)
        if not 0 <= reserved <= self.lookahead * len(decode):
            raise AssertionError(f"decode_tokens gave {reserved} for {len(decode)} decode requests; allowed: "
                                 f"0..{self.lookahead} (D) each")
        budget = self.max_num_batched_tokens - reserved
        prefill, paused = [], []
        for req in self.running:
            if req.prefill_done:
                continue
            length = min(req.num_prompt - req.num_prefilled, budget)
            if length <= 0:
                paused.append(req)
                continue
            prefill.append(PrefillChunk(req, req.num_prefilled, length))
            budget -= length
        token_num = self.max_num_batched_tokens - budget
        return SchedulerOutput(admitted=admitted, decode=decode, prefill=prefill, paused=paused, token_num=token_num)
