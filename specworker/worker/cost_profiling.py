"""profile_step_costs: the adaptive policy's step costs, measured on the worker itself before it serves
(docs/adaptive.md, "Profiled step costs"). At each batch size of profile_batch_sizes, B greedy requests of a fixed
synthetic prompt run through the real engine step while a ProfilePolicy holds K = 0..k_max in turns (`rounds`
rounds, each holding every K `hold` steps, the order reversed every other round, and more while a K's ratio to K = 0
is known only to more than TARGET_ERROR); the steady steps give the CostProfile. Afterwards the requests are aborted
and the worker is as it was: no request, no statistics, the runner's own policy back.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from specworker.sampling_params import SamplingParams
from specworker.spec_decode.base import Proposer
from specworker.spec_decode.cost_profile import (CostProfile, ProfilePolicy, ProfileRow, build_profile,
                                                 profile_batch_sizes, ratio_errors)
from specworker.spec_decode.host_drafts import write_host_drafts
from specworker.spec_decode.metadata import ProposerInputs, ProposerOutput

__all__ = ["EXTRA_SECONDS", "PROFILE_PROMPT_LEN", "TARGET_ERROR", "profile_step_costs"]

logger = logging.getLogger(__name__)

PROFILE_PROMPT_LEN = 8  # tokens of each synthetic prompt
TARGET_ERROR = 0.05  # past profile_rounds, rounds go on while a K's ratio error exceeds it: up to twice as many, then
# up to four times as many while the rounds past profile_rounds at the batch size have taken less than EXTRA_SECONDS (a
# cheap step, the tiny pair's, can afford the rounds a noisy machine needs; a dear one cannot)
EXTRA_SECONDS = 6.0
_PREFIX = "__specworker_profile"  # request ids of the profile's requests


class _FullDrafts(Proposer):
    """A lookup proposer (n-gram, suffix) under profiling: its own search runs (its cost is the step's), then every
    live slot's drafts are filled up to the K held (token 0, which verification rejects like any wrong draft), so a
    step held at K feeds K drafts a slot whatever the synthetic text lets the lookup find. The policy scales the
    profile by the share of drafts the lookup finds while serving (ProfiledCosts.fill)."""

    reads_draft_budget = True

    def __init__(self, inner: Proposer, policy: ProfilePolicy, occupied):
        self.inner, self.policy, self.occupied = inner, policy, occupied
        self.draft_probs = inner.draft_probs

    def run(self, inputs: ProposerInputs) -> ProposerOutput:
        # the budget the lookup and write_host_drafts cap by is K itself: the runner caps speculate_update's budget
        # by k_b, and that budget shrinks with every rejected filler
        inputs.actual_draft_token_nums.fill_(self.policy.k)
        out = self.inner.run(inputs)
        if inputs.max_draft_len > 0:
            num_slots, width = inputs.draft_tokens.shape
            idle = ~self.occupied()
            write_host_drafts(inputs, np.zeros((num_slots, width - 1), dtype=np.int64),
                              np.where(idle, 0, self.policy.k), idle)
        return out

    def followers(self):
        return self.inner.followers()

    def write_prefill(self, slot, prompt_token_ids, start, length, *, draft_less=False):
        self.inner.write_prefill(slot, prompt_token_ids, start, length, draft_less=draft_less)


def profile_step_costs(worker, *, rounds: int, hold: int = 3, max_rounds: int | None = None,
                       target_error: float = TARGET_ERROR, extra_seconds: float = EXTRA_SECONDS) -> CostProfile | None:
    """The worker's CostProfile (None when no batch size could be measured: too few KV blocks or tokens of
    max_model_len for the steps), measured with `rounds` rounds of `hold` steps per K at each batch size, and more
    while a K's ratio to K = 0 is known only to more than target_error (relative standard error,
    cost_profile.ratio_errors): up to 2 x rounds, then up to max_rounds (default 4 x rounds) while the rounds past
    `rounds` at that size have taken less than extra_seconds. The worker must hold no request."""
    if worker.has_unfinished():
        raise RuntimeError("profile_step_costs: the worker holds requests; allowed: an idle worker (profile at start)")
    runner = worker.runner
    own_policy, own_proposer = runner.policy, runner.proposer
    k_max = own_policy.k_max
    probe = ProfilePolicy(runner.input_batch.num_slots, k_max)
    batch = runner.input_batch
    runner.policy = probe
    if own_proposer.reads_draft_budget:
        runner.proposer = _FullDrafts(own_proposer, probe,
                                      lambda: np.array([r is not None for r in batch.req_ids], dtype=bool))
    sizes = profile_batch_sizes(batch.num_slots)
    max_rounds = 4 * rounds if max_rounds is None else max(max_rounds, rounds)
    start = time.perf_counter()
    try:
        for size in sizes:
            _measure(worker, probe, size, hold, least=rounds, most=max_rounds, target=target_error,
                     extra_seconds=extra_seconds)
    finally:
        # (aborting the last requests emptied the batch: ModelRunner.clear_slot drops the last step's cost, so the
        # first served step's does not span the profile)
        runner.policy, runner.proposer = own_policy, own_proposer
        worker.reset_stats()
    rows = [row for row in probe.rows if row.cost.num_slots in sizes]
    profile = build_profile(rows, k_max, probe.prefills)
    logger.info("cost profile: %d batch sizes, %d steady steps in %.1f s", 0 if profile is None else
                len(profile.batch_sizes), len(rows), time.perf_counter() - start)
    return profile


def _measure(worker, probe: ProfilePolicy, size: int, hold: int, *, least: int, most: int, target: float,
             extra_seconds: float) -> None:
    """`size` requests, prefilled at K = 0, then `least` rounds holding each K `hold` steps, and another while a K's
    ratio error at `size` exceeds `target` (_unsettled): up to 2 x least, then up to `most` while the rounds past
    `least` have taken less than `extra_seconds`. Six profiles of the tiny pair at 16 slots read T(16, 1) / T(16, 0)
    1.66-1.74; one of 12 rounds read 1.50 with an error of 0.058 (served: 1.63-1.69), and its worker drafted K = 1
    where K = 2 was 9% faster. A request that reaches its max_tokens
    (max_model_len) is replaced with the others by a fresh batch and the hold starts over; stops early when a batch
    cannot be admitted (KV blocks) or cannot finish one hold."""
    k_max = probe.k_max
    steps = most * (k_max + 1) * hold + 2
    max_tokens = min(steps * (k_max + 1), worker.config.scheduler.max_model_len - PROFILE_PROMPT_LEN)
    if max_tokens < hold:
        return
    rng = np.random.default_rng(size)
    prompt = rng.integers(0, worker.vocab_size, PROFILE_PROMPT_LEN).tolist()
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, seed=0)
    batches = 0
    ids = _admit(worker, probe, size, batches, prompt, params)
    try:
        r, extra_from = 0, None
        while r < least or (r < most and (r < 2 * least or time.perf_counter() - extra_from < extra_seconds)
                            and _unsettled(probe, size, target)):
            if r == least:
                extra_from = time.perf_counter()
            for k in (range(k_max + 1) if r % 2 == 0 else range(k_max, -1, -1)):
                done = 0
                while ids is not None and done < hold:
                    if len(worker.scheduler.running) < size:  # a request ended: a fresh batch, the hold anew
                        _abort(worker, ids)
                        batches += 1
                        ids = _admit(worker, probe, size, batches, prompt, params) if batches <= steps else None
                        done = 0
                        continue
                    probe.k, probe.round = k, r
                    worker.step()
                    done += 1
                if ids is None:
                    return
            r += 1
        probe.k, probe.round = 0, -1
        if len(worker.scheduler.running) == size:
            worker.step()  # files the last hold's last steady step
    finally:
        if ids is not None:
            _abort(worker, ids)


def _unsettled(probe: ProfilePolicy, size: int, target: float) -> bool:
    """Whether a K's T(size, K) / T(size, 0) is known only to more than `target` relative error from the rows so far
    (the last round's last steady step is filed by the next step: the error lags a round by one step). A load swing
    during a few of 6 rounds read K = 1 at 32 slots on the tiny pair 1.66x K = 0 (+-13%; 1.85-1.94x in quiet
    profiles), and the admission's regret rule then kept drafts where they cost 10%."""
    return bool(ratio_errors([row for row in probe.rows if row.cost.num_slots == size], probe.k_max).max() > target)


def _abort(worker, ids: list[str]) -> None:
    """Aborts the profile's requests. The batch is then empty, so ModelRunner.clear_slot drops the last step's cost:
    no step cost spans the bookkeeping between batches."""
    for req_id in ids:
        if req_id in worker.requests:
            worker.abort(req_id)


def _admit(worker, probe: ProfilePolicy, size: int, batch: int, prompt: list[int],
           params: SamplingParams) -> list[str] | None:
    """`size` fresh requests, run at K = 0 until every one is prefilled (their ids), or None (nothing admitted
    left running) when the KV cache cannot hold them all at once."""
    ids = [f"{_PREFIX}_{size}_{batch}_{i}" for i in range(size)]
    probe.k, probe.round = 0, -1
    probe.forget()
    try:
        for req_id in ids:
            worker.add_request(req_id, prompt, params)
    except ValueError:  # a request larger than the whole KV cache: nothing to measure at this size
        _abort(worker, ids)
        return None

    def prefilled() -> int:
        return sum(worker.requests[r].num_prefilled for r in ids if r in worker.requests)

    for _ in range(4 * size + 8):  # admission and prefill (chunks share the token budget)
        if len(worker.scheduler.running) == size and not worker.scheduler.waiting and all(
                worker.requests[r].num_prefilled >= len(prompt) for r in ids):
            return ids
        before, seconds = prefilled(), worker.phase_seconds["proposer"]
        worker.step()
        written = prefilled() - before
        if written > 0:  # the proposer's share of a step that wrote prompt tokens (the MTP draft prefill)
            probe.prefills.append((written, worker.phase_seconds["proposer"] - seconds))
    _abort(worker, ids)
    return None
