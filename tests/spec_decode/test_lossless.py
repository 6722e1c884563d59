"""Lossless speculative decoding (CPU, built-in tiny pair): greedy MTP, ngram and suffix output equals greedy
non-speculative output token for token, for randomized requests with staggered arrivals, aborts, reorders and
condenses, chunked prefill, penalties, stop tokens and max_tokens hit mid-acceptance; MTP with k in {1, 2, 3},
num_model_steps in {1, k}; MTP + n-gram (mtp_strategy with_ngram) with (k, num_model_steps) in {(3, 1), (3, 2)};
ngram with k in {1, 2, 3} and three n-gram ranges; suffix with k in {1, 2, 3}, with and
without the global tree. Oracle and adversarial drafters pin acceptance at 1 and 0."""

import dataclasses

import numpy as np
import pytest

from specworker.sampling_params import SamplingParams
from specworker.worker.worker import Worker
from tests.spec_decode.oracle_proposer import OracleProposer
from tests.worker.worker_harness import Req, drive, make_config, random_requests

SPEC_SHAPES = [(1, 1), (2, 1), (2, 2), (3, 1), (3, 3)]  # (k, num_model_steps)
REQUESTS_PER_SHAPE = 46  # 230 requests over the five shapes (some aborted)
LOSSLESS_RUNS = []  # (k, steps, compared requests), reported by test_lossless_request_count
NGRAM_SHAPES = [(1, (1, 1)), (2, (2, 2)), (3, (3, 1))]  # (k, (max_ngram_size, min_ngram_size))
NGRAM_REQUESTS_PER_SHAPE = 70  # 210 requests over the three shapes (some aborted)
NGRAM_RUNS = []  # compared requests per ngram shape, reported by test_ngram_lossless_request_count
HYBRID_SHAPES = [(3, 1, (3, 1)), (3, 2, (2, 1))]  # (k, num_model_steps, (max_ngram_size, min_ngram_size))
HYBRID_REQUESTS_PER_SHAPE = 60  # 120 requests over the two shapes (some aborted)
HYBRID_RUNS = []  # compared requests per hybrid shape, reported by test_mtp_with_ngram_lossless_request_count
SUFFIX_SHAPES = [(1, {}), (2, {"max_depth": 6, "max_cached_requests": 0}),  # (k, suffix_* keys)
                 (3, {"max_spec_factor": 2.0, "min_token_prob": 0.0, "max_cached_requests": 4})]
SUFFIX_REQUESTS_PER_SHAPE = 50  # 150 requests over the three shapes (some aborted)
SUFFIX_RUNS = []  # compared requests per suffix shape


def _requests(seed, n=REQUESTS_PER_SHAPE):
    """Random requests; some with penalties (random_requests), stop tokens, and short max_tokens that end
    inside an accepted run of drafts."""
    rng = np.random.default_rng(seed)
    reqs = []
    for r in random_requests(n, seed=seed, max_prompt=48, max_tokens=(1, 24), arrive_span=30, abort_rate=0.1):
        params = r.params
        if rng.random() < 0.25:
            params = dataclasses.replace(params, stop_token_ids=(int(rng.integers(0, 256)),))
        reqs.append(dataclasses.replace(r, params=params))
    return reqs


def _shuffler(seed):
    rng = np.random.default_rng(seed)

    def shuffle(worker, step):
        if rng.random() < 0.3:
            i, j = (int(x) for x in rng.integers(0, worker.input_batch.num_slots, size=2))
            worker.runner.swap_states(i, j)
        if rng.random() < 0.2:
            worker.runner.condense()
        if rng.random() < 0.2:
            worker.runner.reorder_split_prefill_and_decode()

    return shuffle


def _tokens(results):
    return {k: v[0] for k, v in results.items()}


@pytest.mark.parametrize("k,steps", SPEC_SHAPES)
def test_mtp_greedy_output_equals_non_speculative(k, steps):
    reqs = _requests(seed=100 + 10 * k + steps)
    sched = dict(max_num_batched_tokens=24)  # prompts up to 48 tokens: chunked prefill mixed with decode
    baseline = drive(Worker(make_config(**sched)), [dataclasses.replace(r, abort_at=None) for r in reqs])
    spec = drive(Worker(make_config("mtp", k=k, steps=steps, **sched)), reqs, between=_shuffler(k * 7 + steps))
    survivors = [r.req_id for r in reqs if r.abort_at is None or r.req_id in spec]
    assert len(survivors) >= REQUESTS_PER_SHAPE // 2
    for req_id in survivors:
        assert spec[req_id] == baseline[req_id], req_id
    LOSSLESS_RUNS.append((k, steps, len(survivors)))


def _repetitive_prompts(reqs, seed):
    """Half the prompts become a short snippet repeated to the same length, so n-gram lookups also match in
    the prompt (random bytes rarely repeat; the tiny model's own output often does)."""
    rng = np.random.default_rng(seed)
    out = []
    for r in reqs:
        if rng.random() < 0.5:
            snippet = r.prompt[:int(rng.integers(1, 8))]
            r = dataclasses.replace(r, prompt=(snippet * len(r.prompt))[:len(r.prompt)])
        out.append(r)
    return out


@pytest.mark.parametrize("k,sizes", NGRAM_SHAPES)
def test_ngram_greedy_output_equals_non_speculative(k, sizes):
    """Drafts come from the slot's own history (target batch buffers moved by every reorder); some are
    accepted and some rejected, and the output never changes."""
    seed = 500 + k
    reqs = _repetitive_prompts(_requests(seed, NGRAM_REQUESTS_PER_SHAPE), seed)
    sched = dict(max_num_batched_tokens=24)  # chunked prefill mixed with decode
    baseline = drive(Worker(make_config(**sched)), [dataclasses.replace(r, abort_at=None) for r in reqs])
    worker = Worker(make_config("ngram", k=k, ngram_sizes=sizes, **sched))
    spec = drive(worker, reqs, between=_shuffler(k * 11))
    survivors = [r.req_id for r in reqs if r.abort_at is None or r.req_id in spec]
    assert len(survivors) >= NGRAM_REQUESTS_PER_SHAPE // 2
    for req_id in survivors:
        assert spec[req_id] == baseline[req_id], req_id
    stats = worker.spec_stats
    assert 0 < stats.num_accepted < stats.num_drafted, (stats.num_accepted, stats.num_drafted)
    NGRAM_RUNS.append(len(survivors))


def test_ngram_lossless_request_count():
    """Runs after the ngram runs: together they compared >= 100 requests."""
    if len(NGRAM_RUNS) < len(NGRAM_SHAPES):
        pytest.skip("run with the whole module to count the ngram lossless requests")
    assert sum(NGRAM_RUNS) >= 100  # aborted requests are not compared


@pytest.mark.parametrize("k,steps,sizes", HYBRID_SHAPES)
def test_mtp_with_ngram_greedy_output_equals_non_speculative(k, steps, sizes):
    """MTP drafts `steps` tokens, hybrid_mtp_ngram extends them up to k from the slot's own history (target
    batch buffers moved by every reorder). Drafts longer than `steps` must occur and some of those extra
    drafts must be accepted, so the test cannot pass with the op doing nothing."""
    seed = 700 + 10 * k + steps
    reqs = _repetitive_prompts(_requests(seed, HYBRID_REQUESTS_PER_SHAPE), seed)
    sched = dict(max_num_batched_tokens=24)  # chunked prefill mixed with decode
    baseline = drive(Worker(make_config(**sched)), [dataclasses.replace(r, abort_at=None) for r in reqs])
    worker = Worker(make_config("mtp", k=k, steps=steps, mtp_strategy="with_ngram", ngram_sizes=sizes, **sched))
    spec = drive(worker, reqs, between=_shuffler(k * 17 + steps))
    survivors = [r.req_id for r in reqs if r.abort_at is None or r.req_id in spec]
    assert len(survivors) >= HYBRID_REQUESTS_PER_SHAPE // 2
    for req_id in survivors:
        assert spec[req_id] == baseline[req_id], req_id
    stats = worker.spec_stats
    # drafted_per_position[steps]: verify steps that fed more than the `steps` MTP drafts
    assert stats.drafted_per_position[steps] > 0, stats.drafted_per_position
    assert stats.accepted_per_position[steps] > 0, stats.accepted_per_position
    assert stats.num_accepted < stats.num_drafted, (stats.num_accepted, stats.num_drafted)
    HYBRID_RUNS.append(len(survivors))


def test_mtp_with_ngram_lossless_request_count():
    """Runs after the hybrid runs: together they compared >= 100 requests."""
    if len(HYBRID_RUNS) < len(HYBRID_SHAPES):
        pytest.skip("run with the whole module to count the hybrid lossless requests")
    assert sum(HYBRID_RUNS) >= 100  # aborted requests are not compared


@pytest.mark.parametrize("k,suffix", SUFFIX_SHAPES)
def test_suffix_greedy_output_equals_non_speculative(k, suffix):
    """Drafts come from the requests' own trees (moved with their slots by every reorder) and the global tree
    of finished outputs; some are accepted and some rejected, and the output never changes."""
    seed = 600 + k
    reqs = _repetitive_prompts(_requests(seed, SUFFIX_REQUESTS_PER_SHAPE), seed)
    sched = dict(max_num_batched_tokens=24)  # chunked prefill mixed with decode
    baseline = drive(Worker(make_config(**sched)), [dataclasses.replace(r, abort_at=None) for r in reqs])
    worker = Worker(make_config("suffix", k=k, suffix=suffix, **sched))
    spec = drive(worker, reqs, between=_shuffler(k * 13))
    survivors = [r.req_id for r in reqs if r.abort_at is None or r.req_id in spec]
    assert len(survivors) >= SUFFIX_REQUESTS_PER_SHAPE // 2
    for req_id in survivors:
        assert spec[req_id] == baseline[req_id], req_id
    stats = worker.spec_stats
    assert 0 < stats.num_accepted < stats.num_drafted, (stats.num_accepted, stats.num_drafted)
    SUFFIX_RUNS.append(len(survivors))


def test_suffix_lossless_request_count():
    """Runs after the suffix runs: together they compared >= 100 requests."""
    if len(SUFFIX_RUNS) < len(SUFFIX_SHAPES):
        pytest.skip("run with the whole module to count the suffix lossless requests")
    assert sum(SUFFIX_RUNS) >= 100  # aborted requests are not compared


def _greedy_reference(reqs):
    return _tokens(drive(Worker(make_config()), reqs))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_oracle_drafter_accepts_everything(k):
    """The oracle drafts the target's own continuation: acceptance 1.0, and every verify step emits
    k + 1 tokens except where the request ends (fewer drafts left)."""
    reqs = random_requests(12, seed=200 + k, max_prompt=30, max_tokens=(8, 30), arrive_span=6)
    ref = _greedy_reference(reqs)
    oracle = OracleProposer(k, {tuple(r.prompt): ref[r.req_id] for r in reqs})
    worker = Worker(make_config("mtp", k=k, steps=k), proposer=oracle)  # steps = k: the policy lets a slot hold k drafts
    out = drive(worker, reqs, between=_shuffler(k))
    assert _tokens(out) == ref
    stats = worker.spec_stats
    assert stats.num_steps > 0 and stats.num_accepted == stats.num_drafted
    full = sum(max(len(ref[r.req_id]) - 1, 0) // (k + 1) for r in reqs)  # verify steps that can be full
    assert stats.accepted_per_position[k - 1] >= full - len(reqs)
    assert stats.mean_acceptance_length > 1 + 0.8 * k


@pytest.mark.parametrize("k", [1, 3])
def test_adversarial_drafter_accepts_nothing_and_stays_lossless(k):
    reqs = random_requests(10, seed=300 + k, max_prompt=30, max_tokens=(4, 20), arrive_span=6)
    ref = _greedy_reference(reqs)
    bad = OracleProposer(k, {tuple(r.prompt): ref[r.req_id] for r in reqs}, adversarial=True)
    worker = Worker(make_config("mtp", k=k, steps=k), proposer=bad)
    assert _tokens(drive(worker, reqs)) == ref
    assert worker.spec_stats.num_drafted > 0 and worker.spec_stats.num_accepted == 0


def test_spec_stats_invariants_on_mtp_run():
    reqs = random_requests(8, seed=400, max_tokens=(10, 30))
    worker = Worker(make_config("mtp", k=3, steps=3))
    per_request = []
    for r in reqs:
        worker.add_request(r.req_id, r.prompt, r.params)
    while worker.has_unfinished():
        per_request += [o.spec_stats for o in worker.step() if o.finished]
    total = worker.spec_stats
    assert sum(s.num_steps for s in per_request) == total.num_steps
    assert sum(s.num_accepted for s in per_request) == total.num_accepted
    rates = total.acceptance_per_position
    assert all(a >= b for a, b in zip(rates, rates[1:]))
    assert total.mean_acceptance_length == pytest.approx(1 + total.num_accepted / total.num_steps)
    assert total.num_drafted == sum(total.drafted_per_position)


def test_lossless_request_count():
    """Runs last in this module: the parametrized lossless runs compared >= 200 requests in all."""
    if len(LOSSLESS_RUNS) < len(SPEC_SHAPES):
        pytest.skip("run with the whole module to count the lossless requests")
    assert sum(n for _, _, n in LOSSLESS_RUNS) >= 200  # aborted requests are not compared
