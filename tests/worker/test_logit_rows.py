"""The step computes logits over ForwardMeta.logit_rows = min(token_num, B * (k + 1)) rows, the host bound on
T_out (docs/spec.md §4.3): a decode step whose slots feed one token each costs the lm_head and the sampler of
those rows, not of the k + 1 capacity per slot, and the output is the same tokens."""

import dataclasses

import numpy as np
import pytest

from specworker.worker.worker import Worker
from tests.worker.worker_harness import drive, make_config, random_requests


def _rows_per_step(worker: Worker) -> list[tuple[int, int]]:
    """(logit rows, output capacity) of every target compute_logits call of the worker from now on."""
    calls, model = [], worker.runner.model
    compute_logits, pre_process = model.compute_logits, worker.runner._pre_process
    capacity = []

    def record_meta(token_num):
        meta = pre_process(token_num)
        capacity.append(meta.output_capacity)
        return meta

    def record_logits(hidden):
        calls.append((hidden.shape[0], capacity[-1]))
        return compute_logits(hidden)

    worker.runner._pre_process, model.compute_logits = record_meta, record_logits
    return calls


@pytest.mark.parametrize("policy,schedule,rows_per_slot", [("schedule", {1: 0}, 1), ("fixed", None, 4)])
def test_logit_rows_follow_the_tokens_fed_not_the_capacity(policy, schedule, rows_per_slot):
    """k = 3 MTP buffers: under k_b = 0 every pure decode step has one logit row per running slot (4 slots:
    4 rows, not the 16 of the capacity); under fixed k = 3 the rows are the 1 + 3 tokens per slot. Both emit
    the non-speculative tokens."""
    reqs = random_requests(6, seed=3, max_prompt=12, max_tokens=(8, 16))
    worker = Worker(make_config("mtp", k=3, steps=3, policy=policy, schedule=schedule))
    calls = _rows_per_step(worker)
    out = drive(worker, reqs)
    assert out == drive(Worker(make_config()), reqs)
    full = [rows for rows, capacity in calls if capacity == 16 and rows == 4 * rows_per_slot]
    assert full, f"no step with 4 running decode slots: {calls}"
    assert all(rows <= capacity for rows, capacity in calls)
    assert max(rows for rows, _ in calls) == 4 * rows_per_slot  # never the capacity when k_b = 0


def test_paused_slots_add_no_logit_rows():
    """Prompts longer than the token budget are admitted over several steps; the slots waiting for budget are
    paused and feed nothing, so they add no logit row (they were counted at 1 + k_b, the policy's cap: 13 rows
    for one prompt chunk and three waiting prompts under k = 3). Every step's rows stay within 1 + 3 per slot
    that feeds tokens, and the output is the non-speculative one."""
    reqs = random_requests(6, seed=5, max_prompt=40, max_tokens=(8, 16))
    reqs = [dataclasses.replace(r, prompt=(r.prompt * 30)[:30 + i]) for i, r in enumerate(reqs)]  # 30-35 tokens
    worker = Worker(make_config("mtp", k=3, steps=3, policy="fixed", max_num_batched_tokens=16))
    runner, steps = worker.runner, []
    pre_process = runner._pre_process

    def record_meta(token_num):
        meta = pre_process(token_num)  # its logit_rows: the rows the lm_head and the sampler run over
        fed = runner._buffers.seq_lens_this_time.numpy()  # a test may read the device
        steps.append((meta.logit_rows, int((fed > 0).sum())))
        return meta

    runner._pre_process = record_meta
    out = drive(worker, reqs)
    assert out == drive(Worker(make_config(max_num_batched_tokens=16)), reqs)
    assert steps[0] == (1, 1), f"first step: one prompt chunk, the other slots paused: {steps[:4]}"
    assert all(rows <= 4 * feeding for rows, feeding in steps), steps
