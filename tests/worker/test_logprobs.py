"""SamplingParams.logprobs end to end (built-in tiny pair, CPU): speculative logprobs equal non-speculative ones,
they match a direct log-softmax of the target's logits, sampled rows are well formed, the step keeps its one
host copy, and bad values are rejected."""

from __future__ import annotations

import dataclasses

import numpy as np
import paddle
import pytest

from specworker.llm import LLM
from specworker.sampling_params import MAX_LOGPROBS, SamplingParams
from specworker.worker import model_runner
from specworker.worker.worker import Worker
from tests.worker.worker_harness import make_config, random_requests, run_counting_host_copies

NUM_EQUALITY_REQUESTS = 64
ATOL_SPEC = 1e-5  # spec vs non-spec: same logit bits, log-softmax over a different number of rows
ATOL_DIRECT = 1e-4  # vs forward_train (paddle.matmul, another summation order)


def _with_logprobs(reqs, seed):
    """Most requests ask for logprobs (N from 0 to MAX_LOGPROBS), a few do not (they share the batches)."""
    rng = np.random.default_rng(seed)
    out = []
    for r in reqs:
        num = None if rng.random() < 0.15 else int(rng.choice([0, 1, 5, MAX_LOGPROBS]))
        out.append(dataclasses.replace(r, params=dataclasses.replace(r.params, logprobs=num)))
    return out


def _run(worker, reqs):
    """Runs reqs (arrivals by step) to completion. Returns {req_id: final RequestOutput} and checks that each
    request's new_logprobs, step by step, add up to its logprobs."""
    pending = sorted(reqs, key=lambda r: r.arrive)
    finished, pieces, step = {}, {}, 0
    while pending or worker.has_unfinished():
        while pending and pending[0].arrive <= step:
            r = pending.pop(0)
            worker.add_request(r.req_id, r.prompt, r.params)
        for out in worker.step():
            if out.new_logprobs is not None:
                pieces.setdefault(out.request_id, []).extend(out.new_logprobs)
                assert [e.token_id for e in out.new_logprobs] == out.new_token_ids
            if out.finished:
                finished[out.request_id] = out
        step += 1
        assert step < 5000, "no progress"
    for req_id, out in finished.items():
        assert out.logprobs == pieces.get(req_id, None if out.logprobs is None else [])
    return finished


def test_logprobs_speculative_equal_non_speculative():
    """>= 50 greedy requests (random prompts, penalties on ~30 %, staggered arrivals, chunked prefill): MTP k = 2
    emits the same tokens as the target alone, with logprobs equal within 1e-5 and the same top-N ids."""
    reqs = _with_logprobs(random_requests(NUM_EQUALITY_REQUESTS, seed=41, max_prompt=40, max_tokens=(4, 24),
                                          arrive_span=25), seed=42)
    sched = dict(max_num_batched_tokens=24)
    base = _run(Worker(make_config(**sched)), reqs)
    spec = _run(Worker(make_config("mtp", k=2, steps=2, **sched)), reqs)
    assert len(base) == len(spec) == NUM_EQUALITY_REQUESTS
    worst, compared = 0.0, 0
    for r in reqs:
        a, b = base[r.req_id], spec[r.req_id]
        assert a.output_token_ids == b.output_token_ids, r.req_id
        if r.params.logprobs is None:
            assert a.logprobs is None and b.logprobs is None
            continue
        assert len(a.logprobs) == len(b.logprobs) == len(a.output_token_ids)
        for x, y, token in zip(a.logprobs, b.logprobs, a.output_token_ids):
            assert x.token_id == y.token_id == token
            assert list(x.top_logprobs) == list(y.top_logprobs), r.req_id  # ids, in rank order
            assert len(x.top_logprobs) == r.params.logprobs
            diffs = [abs(x.logprob - y.logprob)] + [abs(x.top_logprobs[t] - y.top_logprobs[t]) for t in x.top_logprobs]
            worst = max(worst, *diffs)
        compared += 1
    assert compared >= 50
    assert worst <= ATOL_SPEC
    print(f"logprobs spec vs non-spec: {compared} requests, max abs diff {worst:.3g}")


def _penalised(logits, history, params):
    """The Sampler's row processing written from the spec (§4.5.2) for one row: penalties over the generated
    history, then temperature (1 for greedy). float64 [V] -> float64 [V]."""
    out = logits.copy()
    ids, counts = np.unique(np.asarray(history, dtype=np.int64), return_counts=True)
    for v, c in zip(ids, counts):
        x = out[v]
        x = x * params.repetition_penalty if x < 0 else x / params.repetition_penalty
        out[v] = x - c * params.frequency_penalty - params.presence_penalty
    return out / (params.temperature if params.temperature > 0 else 1.0)


def _log_softmax(x):
    x = x - x.max()
    return x - np.log(np.exp(x).sum())


def test_logprobs_match_direct_log_softmax():
    """Every emitted token's logprob and top-N (MTP k = 2, rejection verification: accepted drafts, corrections
    and bonus tokens; greedy, penalised and sampled requests) equals the log-softmax of forward_train's logits for
    the same prefix after penalties and temperature, within 1e-4."""
    reqs = random_requests(8, seed=5, max_prompt=24, max_tokens=(8, 16))
    reqs += random_requests(6, seed=6, max_prompt=24, max_tokens=(8, 16), sampled=True)
    reqs = [dataclasses.replace(r, req_id=f"r{i}", params=dataclasses.replace(r.params, logprobs=5))
            for i, r in enumerate(reqs)]
    assert any(r.params.repetition_penalty != 1 for r in reqs) and any(r.params.temperature > 0 for r in reqs)
    worker = Worker(make_config("mtp", k=2, steps=2, strategy="rejection"))
    outs = _run(worker, reqs)
    model, worst = worker.runner.model, 0.0
    for r in reqs:
        out = outs[r.req_id]
        seq = r.prompt + out.output_token_ids
        with paddle.no_grad():
            logits = model.logits_train(model.forward_train(paddle.to_tensor([seq], dtype="int64")))
        logits = logits.numpy()[0].astype(np.float64)  # [L, V]
        for t, entry in enumerate(out.logprobs):
            want = _log_softmax(_penalised(logits[len(r.prompt) - 1 + t], out.output_token_ids[:t], r.params))
            got = [(entry.token_id, entry.logprob)] + list(entry.top_logprobs.items())
            worst = max(worst, *(abs(value - want[token]) for token, value in got))
            # top-N: the N largest reference values (ids may swap within a near-tie, values may not)
            np.testing.assert_allclose(list(entry.top_logprobs.values()), np.sort(want)[::-1][:5], atol=ATOL_DIRECT)
    assert worst <= ATOL_DIRECT
    print(f"logprobs vs direct log-softmax: max abs diff {worst:.3g}")


def test_logprobs_sampled_requests_are_well_formed():
    """Sampled requests under MTP k = 2 with rejection verification: every token has a finite logprob <= 0, at
    most the best alternative's; the top-N are N distinct ids sorted by logprob, and a token among them carries
    its own logprob there."""
    reqs = [dataclasses.replace(r, params=dataclasses.replace(r.params, logprobs=r.params.top_k % 7 + 1))
            for r in random_requests(12, seed=77, max_prompt=30, max_tokens=(6, 20), sampled=True)]
    outs = _run(Worker(make_config("mtp", k=2, steps=2, strategy="rejection")), reqs)
    for r in reqs:
        out = outs[r.req_id]
        assert len(out.logprobs) == len(out.output_token_ids)
        for entry in out.logprobs:
            values = list(entry.top_logprobs.values())
            assert np.isfinite(entry.logprob) and entry.logprob <= 0
            assert len(entry.top_logprobs) == r.params.logprobs
            assert values == sorted(values, reverse=True) and values[0] <= 0
            assert entry.logprob <= values[0] + 1e-6
            if entry.token_id in entry.top_logprobs:
                assert entry.top_logprobs[entry.token_id] == entry.logprob


@pytest.mark.parametrize("name,spec", [("none", {}), ("mtp_k2", dict(method="mtp", k=2, steps=2))])
def test_logprobs_step_reads_device_values_once(name, spec, monkeypatch):
    """With logprobs requested the step still makes exactly one host read (the sanctioned copy, which now
    also carries the logprobs); every other host read in the step path raises."""
    worker = Worker(make_config(**spec, max_num_batched_tokens=16))
    for r in random_requests(6, seed=9, max_prompt=30, max_tokens=(3, 12), sampled=True):
        worker.add_request(r.req_id, r.prompt, dataclasses.replace(r.params, logprobs=3))
    with_logprobs = []
    steps, copies = run_counting_host_copies(monkeypatch, worker,
                                             on_copy=lambda out: with_logprobs.append(out.logprobs is not None))
    assert steps > 3 and copies == list(range(steps)) and all(with_logprobs)


def test_logprobs_not_computed_unless_asked(monkeypatch):
    """The default path stays as it was: no request asks, so no logprob is computed or copied."""
    def refuse(*args):
        raise AssertionError("compute_logprobs called without a request asking for logprobs")

    monkeypatch.setattr(model_runner, "compute_logprobs", refuse)
    worker = Worker(make_config("mtp", k=2, steps=2))
    for r in random_requests(4, seed=3, max_prompt=12, max_tokens=(3, 8)):
        worker.add_request(r.req_id, r.prompt, r.params)
    outs = {}
    while worker.has_unfinished():
        for out in worker.step():
            assert out.logprobs is None and out.new_logprobs is None
            outs[out.request_id] = out
    assert len(outs) == 4


@pytest.mark.parametrize("value", [-1, MAX_LOGPROBS + 1, 2.0, True, "3", [1]])
def test_logprobs_rejects_bad_value(value):
    with pytest.raises(ValueError, match=r"SamplingParams\.logprobs = .*; allowed: None \(off\) or an int in "
                                         rf"0\.\.MAX_LOGPROBS = {MAX_LOGPROBS}"):
        SamplingParams(logprobs=value)


@pytest.mark.parametrize("value", [None, 0, MAX_LOGPROBS, np.int64(4)])
def test_logprobs_accepts_good_value(value):
    params = SamplingParams(logprobs=value)
    assert params.logprobs == (None if value is None else int(value))
    assert params.logprobs is None or type(params.logprobs) is int


def test_logprobs_zero_gives_the_token_only():
    """logprobs = 0 (alone in the batch: a step whose logprob section has no alternatives) returns each token's
    logprob with no alternatives, equal to what logprobs = 3 returns for the same greedy request."""
    prompt = [72, 101, 108, 108, 111, 32]
    got = {}
    for num in (0, 3):
        worker = Worker(make_config("mtp", k=2, steps=2))
        worker.add_request("a", prompt, SamplingParams(temperature=0.0, max_tokens=12, logprobs=num))
        got[num] = _run(worker, [])["a"]
    assert got[0].output_token_ids == got[3].output_token_ids
    assert all(entry.top_logprobs == {} for entry in got[0].logprobs)
    assert [e.logprob for e in got[0].logprobs] == [e.logprob for e in got[3].logprobs]


def test_logprobs_reach_llm_completion_output():
    """LLM.generate hands each completion's logprobs through (None for a request that did not ask)."""
    greedy = SamplingParams(temperature=0.0, max_tokens=8)
    plain, asked = LLM(make_config("mtp", k=2, steps=2)).generate(
        ["The for statement", "A class"], [greedy, dataclasses.replace(greedy, logprobs=2)])
    assert plain.logprobs is None
    assert [e.token_id for e in asked.logprobs] == asked.token_ids
    assert all(len(e.top_logprobs) == 2 for e in asked.logprobs)
