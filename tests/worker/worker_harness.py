"""Test helpers for end-to-end Worker runs: small configs, random requests, and a driver that adds
requests at given steps, aborts some, reorders the batch between steps, and collects every output."""

from __future__ import annotations

import dataclasses

import numpy as np

from specworker.config import config_from_dict
from specworker.sampling_params import SamplingParams
from specworker.worker.model_runner import ModelRunner
from specworker.worker.worker import Worker
from tests.sync_guard import allow_host_reads, forbid_host_reads

SCHEDULER = dict(max_num_seqs=4, max_model_len=96, block_size=8, num_blocks=64, max_num_batched_tokens=64)


def make_config(method="none", k=0, steps=1, strategy="greedy", ngram_sizes=(3, 1), suffix=None,
                mtp_strategy="default", policy=None, schedule=None, **scheduler):
    spec = {"method": method}
    if policy is not None:  # speculation policy (and its schedule, {smallest batch size: k})
        spec.update(policy=policy, **({} if schedule is None else {"schedule": schedule}))
    if method == "mtp":
        spec.update(num_speculative_tokens=k, num_model_steps=steps, model="builtin:tiny-mtp",
                    verify_strategy=strategy, mtp_strategy=mtp_strategy)
    if mtp_strategy == "with_ngram":  # (max_ngram_size, min_ngram_size) of hybrid_mtp_ngram
        spec.update(max_ngram_size=ngram_sizes[0], min_ngram_size=ngram_sizes[1])
    if method == "ngram":  # (max_ngram_size, min_ngram_size)
        spec.update(num_speculative_tokens=k, verify_strategy=strategy, max_ngram_size=ngram_sizes[0],
                    min_ngram_size=ngram_sizes[1])
    if method == "suffix":  # suffix: {"max_depth": .., "max_cached_requests": .., ...} overrides
        spec.update(num_speculative_tokens=k, verify_strategy=strategy,
                    **{f"suffix_{key}": value for key, value in (suffix or {}).items()})
    sched = {**SCHEDULER, **scheduler}
    return config_from_dict({"model": {"path": "builtin:tiny"}, "scheduler": sched, "speculative_config": spec,
                             "debug_checks": True}, check_paths=False)


@dataclasses.dataclass(frozen=True)
class Req:
    req_id: str
    prompt: list
    params: SamplingParams
    arrive: int = 0  # step at which it is added
    abort_at: int | None = None  # step before which it is aborted (None: runs to the end)


def random_requests(n, seed, *, max_prompt=40, max_tokens=(4, 24), sampled=False, arrive_span=0, abort_rate=0.0,
                    vocab=256):
    rng = np.random.default_rng(seed)
    reqs = []
    for i in range(n):
        prompt = [int(t) for t in rng.integers(0, vocab, size=int(rng.integers(1, max_prompt + 1)))]
        kw = dict(max_tokens=int(rng.integers(max_tokens[0], max_tokens[1] + 1)), temperature=0.0)
        if sampled:
            kw.update(temperature=float(rng.uniform(0.5, 1.2)), top_k=int(rng.choice([-1, 5, 40])),
                      top_p=float(rng.choice([1.0, 0.9, 0.6])), seed=int(rng.integers(0, 2**31)))
        if rng.random() < 0.3:
            kw.update(repetition_penalty=1.3, frequency_penalty=0.2, presence_penalty=0.1)
        arrive = int(rng.integers(0, arrive_span + 1)) if arrive_span else 0
        abort_at = arrive + int(rng.integers(1, 6)) if rng.random() < abort_rate else None
        reqs.append(Req(f"q{i}", prompt, SamplingParams(**kw), arrive, abort_at))
    return reqs


def drive(worker: Worker, reqs, *, between=None, max_steps=5000):
    """Runs reqs (arrivals / aborts by step); between(worker, step) runs before each step.
    Returns {req_id: (tokens, finish_reason)}; aborted requests are left out."""
    pending = sorted(reqs, key=lambda r: r.arrive)
    aborts = {r.req_id: r.abort_at for r in reqs if r.abort_at is not None}
    results, step = {}, 0
    while pending or worker.has_unfinished():
        while pending and pending[0].arrive <= step:
            r = pending.pop(0)
            worker.add_request(r.req_id, r.prompt, r.params)
        for req_id, at in list(aborts.items()):
            if at <= step and req_id in worker.requests:
                worker.abort(req_id)
                del aborts[req_id]
        if between is not None:
            between(worker, step)
        for out in worker.step():
            if out.finished:
                results[out.request_id] = (out.output_token_ids, out.finish_reason)
        step += 1
        assert step < max_steps, "drive: no progress"
    return results


def alone(config, reqs, **worker_kw):
    """Each request by itself in one worker, one after the other (its batch-of-one reference)."""
    worker = Worker(config, **worker_kw)
    out = {}
    for r in reqs:
        out.update(drive(worker, [dataclasses.replace(r, arrive=0, abort_at=None)]))
    return out


def run_counting_host_copies(monkeypatch, worker: Worker, on_copy=None) -> tuple[int, list[int]]:
    """Runs worker until it has nothing left with every host read of a device tensor forbidden, except the
    step's sanctioned copy (ModelRunner._copy_step_outputs_sync) and the batch's host mirrors (reading one
    is no device sync: the proposers and the policy's token bound read them). Returns (steps run, the step
    number at each copy); on_copy(result) sees every copy's result."""
    copies = []
    original = ModelRunner._copy_step_outputs_sync

    def counted(self, *args):
        copies.append(worker.num_steps)
        with allow_host_reads():
            out = original(self, *args)
        if on_copy is not None:
            on_copy(out)
        return out

    monkeypatch.setattr(ModelRunner, "_copy_step_outputs_sync", counted)
    steps = 0
    mirrors = [t for key, t in worker.input_batch.share_inputs.items() if key.endswith("_cpu")]
    with forbid_host_reads(allow=mirrors):
        while worker.has_unfinished():
            worker.step()
            steps += 1
    return steps, copies
