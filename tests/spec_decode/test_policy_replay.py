"""The adaptive policy's decisions replayed against synthetic step costs (pure Python, seeded): on a cost model
shaped like the tiny pair on 2 CPU cores (dispatch-bound: a draft substep costs ~40% of a plain step) and one
shaped like a compute-bound model (a verify token costs as much as a decoded one), with lognormal load noise
and 3x load spikes on 5% of the steps, the policy must reach >= 0.97x the throughput of the best fixed K
(K = 0, no speculation, included) at every batch size and acceptance level, after a warm-up like the bench's.
Common random numbers: every contender sees the same load noise and the same acceptance draws per position."""

import dataclasses
import math

import numpy as np
import pytest

from specworker.slot_request import SlotRequest
from specworker.spec_decode.policy import AdaptivePolicy, PolicyStep
from specworker.spec_decode.step_cost_model import StepCost

K_MAX = 3
STEPS = 400


def dispatch_bound(batch: int, k: int, drafts: int) -> float:
    return 0.003 + 0.00012 * batch + k * (0.0012 + 0.00003 * batch) + 0.00006 * drafts


def compute_bound(batch: int, k: int, drafts: int) -> float:  # every fed token costs the same; no substeps
    return 0.02 + 0.004 * (batch + drafts)


def replay(choose, batch, accept, cost, seed, tokens_each=None, policy=None, drift=0.0):
    """Emitted tokens per second over STEPS decode steps of `batch` slots that never finish, or (tokens_each) until
    every slot has emitted that many tokens, no request taking a freed slot (a closed batch: the policy is told
    each slot's remaining tokens, as a worker with no waiting request tells it). accept: the conditional acceptance
    per position ([K] or per slot [batch, K]), or a dict k -> it for a step whose previous step allowed k drafts
    (that step's k placed the anchor). policy: the AdaptivePolicy behind `choose`, whose slots a closed batch clears
    when it ends (its requests finished, as a worker clears them). drift: the load also walks, ln of it a random
    walk with this standard deviation a step (0.02: +-20% over 100 steps; a shared machine's speed moved by a third
    within a minute), the same walk for every contender."""
    rng = np.random.default_rng(seed)
    factors = np.exp(rng.normal(0, 0.15, STEPS)) * np.where(rng.random(STEPS) < 0.05, 3.0, 1.0)
    if drift:
        factors *= np.exp(np.cumsum(np.random.default_rng(seed + 999).normal(0, drift, STEPS)))
    uniform = rng.random((STEPS, batch, K_MAX))  # the same draws for every contender
    by_k = accept if isinstance(accept, dict) else dict.fromkeys(range(K_MAX + 1), accept)
    left = np.full(batch, STEPS * (K_MAX + 1) if tokens_each is None else tokens_each)
    drafted = emitted = np.zeros(batch, dtype=np.int64)
    previous, tokens, seconds = None, 0, 0.0
    for step in range(STEPS):
        live = left > 0
        if not live.any():
            break
        remaining = None if tokens_each is None else np.where(live, left, 0)
        k_b = np.asarray(choose(PolicyStep(live=live, drafted=drafted, emitted=emitted, cost=previous,
                                           remaining=remaining)))
        k_b = np.where(live, np.broadcast_to(k_b, (batch,)), 0)
        placed = k_b if step == 0 else drafted  # the k of the step that placed this step's anchor
        rates = np.array([np.broadcast_to(by_k[int(k)], (batch, K_MAX))[b] for b, k in enumerate(placed)])
        hits = uniform[step] < rates  # [batch, K]
        accepted = np.cumprod(hits, axis=1).sum(axis=1)  # drafts accepted until the first rejection
        emitted = np.where(live, np.minimum(np.minimum(accepted, k_b) + 1, left), 0)
        left, drafted = left - emitted, k_b.copy()
        size = int(live.sum())
        t = cost(size, int(k_b.max()), int(k_b.sum())) * factors[step]
        substeps = int(k_b.max()) if cost is dispatch_bound else 0  # what the proposer reports
        previous = StepCost(num_slots=size, num_drafts=int(k_b.sum()), num_substeps=substeps, seconds=t,
                            verify_seconds=0.6 * t) if (left > 0).any() else None
        tokens, seconds = tokens + int(emitted.sum()), seconds + t
    if tokens_each is not None and policy is not None:  # the batch's requests finished: the worker clears them
        for slot in range(batch):
            policy.on_clear(slot)
    return tokens / seconds


@pytest.mark.parametrize("cost", [dispatch_bound, compute_bound])
@pytest.mark.parametrize("accept", [(0.85, 0.8, 0.75), (0.5, 0.4, 0.3)], ids=["high", "low"])
@pytest.mark.parametrize("batch", [1, 4, 16, 64])
def test_adaptive_reaches_the_best_fixed_k_on_replayed_costs(batch, accept, cost):
    seeds = (1, 2, 3)
    fixed = {k: np.mean([replay(lambda step, k=k: k, batch, accept, cost, s) for s in seeds]) for k in range(K_MAX + 1)}
    adaptive = []
    for s in seeds:
        policy = AdaptivePolicy(batch, K_MAX)
        replay(policy.choose, batch, accept, cost, 100 + s)  # warm-up: the bench's untimed runs
        adaptive.append(replay(policy.choose, batch, accept, cost, s))
    best = max(fixed, key=fixed.get)
    ratio = np.mean(adaptive) / fixed[best]
    assert ratio >= 0.97, f"adaptive {np.mean(adaptive):.0f} tokens/s = {ratio:.3f}x of fixed K = {best}: {fixed}"


def test_replay_can_fail():
    """The same check rejects a policy that always drafts k_max where drafts do not pay (low acceptance, large
    batch: no speculation is best)."""
    fixed0 = replay(lambda step: 0, 64, (0.5, 0.4, 0.3), dispatch_bound, 1)
    always = replay(lambda step: K_MAX, 64, (0.5, 0.4, 0.3), dispatch_bound, 1)
    assert always / fixed0 < 0.97


# Conditional acceptance per position as the tiny pair's MTP shows it at fixed k = 1, 2, 3 (the bench's default
# prompts): where a step of k drafts leaves the next anchor depends on k, so position 1 is accepted 0.82 / 0.93 / 0.74
# of the time (after a fully accepted step: 0.82 / 0.94 / 0.65). A model that pools the positions over k reads k = 2
# through k = 3's steps and picks k = 3.
ANCHOR_DEPENDENT = {0: (0.8, 0.85, 0.95), 1: (0.82, 0.85, 0.95), 2: (0.93, 0.84, 0.95), 3: (0.74, 0.88, 0.95)}


def adaptive_vs_best_fixed(batch: int, accept, cost=dispatch_bound, *, tokens_each=None, warmups=(100,),
                           tell_remaining=True, drift=0.0, pair_support=None, rescale_beyond=None,
                           **policy_kw) -> tuple[float, int]:
    """(adaptive tokens/s over the best fixed K's, that K), mean of 3 seeds, after a warm-up replay per seed in
    `warmups`. tokens_each: a closed batch of that many tokens a slot (replay); tell_remaining False: the policy is
    not told the remaining tokens (the open objective, tokens per second now); drift: replay's; pair_support: the
    cost model's (inf: every K from its own fit); rescale_beyond: the cost model's (inf: no K read relative to
    T(B, 0) now)."""
    seeds = (1, 2, 3)
    fixed = {k: np.mean([replay(lambda step, k=k: k, batch, accept, cost, s, tokens_each, drift=drift)
                         for s in seeds]) for k in range(K_MAX + 1)}
    adaptive = []
    for s in seeds:
        policy = AdaptivePolicy(batch, K_MAX, **policy_kw)
        if pair_support is not None:
            policy.costs.pair_support = pair_support
        if rescale_beyond is not None:
            policy.costs.rescale_beyond = rescale_beyond
        choose = policy.choose if tell_remaining else (
            lambda step: policy.choose(dataclasses.replace(step, remaining=None)))
        for warm in warmups:
            replay(choose, batch, accept, cost, warm + s, tokens_each, policy, drift)
        adaptive.append(replay(choose, batch, accept, cost, s, tokens_each, policy, drift))
    best = max(fixed, key=fixed.get)
    return float(np.mean(adaptive) / fixed[best]), best


@pytest.mark.parametrize("batch", [1, 4])
def test_adaptive_reads_the_acceptance_of_each_k(batch):
    ratio, best = adaptive_vs_best_fixed(batch, ANCHOR_DEPENDENT)
    assert best == 2 and ratio >= 0.97, f"adaptive = {ratio:.3f}x of fixed K = {best}"


def test_pooled_acceptance_misses_the_best_k():
    """The same check fails when the per-k correction is switched off (k_prior_weight huge: every k reads the pooled
    totals), so the test above can fail (0.959 here since decisions are kept up to 32 steps; 0.90 at first)."""
    ratio, best = adaptive_vs_best_fixed(4, ANCHOR_DEPENDENT, k_prior_weight=1e12)
    assert best == 2 and ratio < 0.97, f"adaptive = {ratio:.3f}x of fixed K = {best}"


def profiled_vs_fixed_2(batch: int, scale: float, pair_least: float) -> float:
    """Adaptive on a profile of dispatch_bound's costs at sizes 1, 2, 4 (error 2% a ratio) whose K = 3 increment at
    `batch` is `scale` of the true one, over fixed K = 2, ANCHOR_DEPENDENT acceptance, mean of 3 seeds after a
    warm-up replay each; pair_least: the costs' served pairs before a correction (inf: none). The policy's own host
    time is not in the replay's synthetic costs: its clock stands still."""
    from specworker.spec_decode.cost_profile import CostProfile

    sizes = [1, 2, 4]
    seconds = np.array([[dispatch_bound(b, k, b * k) for k in range(K_MAX + 1)] for b in sizes])
    g = sizes.index(batch)
    seconds[g, 3] = seconds[g, 2] + scale * (seconds[g, 3] - seconds[g, 2])
    profile = CostProfile(batch_sizes=np.array(sizes), seconds=seconds, verify=0.6 * seconds,
                          error=np.where(np.arange(K_MAX + 1) > 0, 0.02, 0.0) * np.ones_like(seconds),
                          steps=np.full(seconds.shape, 12, dtype=np.int64))
    seeds = (1, 2, 3)
    fixed = np.mean([replay(lambda step: 2, batch, ANCHOR_DEPENDENT, dispatch_bound, s) for s in seeds])
    adaptive = []
    for s in seeds:
        policy = AdaptivePolicy(batch, K_MAX)
        policy.host_clock = lambda: 0.0
        policy.use_profile(profile)
        policy.costs.pair_least = pair_least
        replay(policy.choose, batch, ANCHOR_DEPENDENT, dispatch_bound, 100 + s)
        adaptive.append(replay(policy.choose, batch, ANCHOR_DEPENDENT, dispatch_bound, s))
    return float(np.mean(adaptive) / fixed)


@pytest.mark.parametrize("batch", [1, 4])
def test_served_pairs_undo_a_profile_that_reads_k3_cheap(batch):
    """A profile whose T(B, 3) / T(B, 2) reads ~1.11 where the steps cost 1.23 (half K = 3's increment: the spread
    of the tiny pair's profiles between workers reached 1.10 at 4 slots, served 1.20) sends the policy to K = 3,
    whose E(3) / E(2) is ~1.11; the explorations' served pairs correct the ratio (docs/adaptive.md, "Served pairs")."""
    ratio = profiled_vs_fixed_2(batch, 0.5, 3)
    assert ratio >= 0.97, f"adaptive = {ratio:.3f}x of fixed K = 2"


def test_without_served_pairs_a_cheap_k3_profile_holds():
    """The same check fails without the correction, so the test above can fail."""
    ratio = profiled_vs_fixed_2(1, 0.5, math.inf)
    assert ratio < 0.97, f"adaptive = {ratio:.3f}x of fixed K = 2"


# Half the slots accept at 0.9 / 0.85 / 0.8, half at half that: fast slots finish early and the slow ones bound the
# batch, so a draft for a fast slot saves only its share of the later steps.
MIXED = np.where(np.arange(64)[:, None] % 2 == 0, [[0.9, 0.85, 0.8]], [[0.45, 0.425, 0.4]])


def lookup_bound(batch: int, k: int, drafts: int) -> float:  # SmolLM2 on this CPU: 60 ms a step + 17 ms a fed token
    return 0.06 + 0.017 * (batch + drafts)


@pytest.mark.parametrize("batch", [16, 64])
@pytest.mark.parametrize("cost", [dispatch_bound, lookup_bound])
def test_adaptive_reaches_the_best_fixed_k_in_a_draining_batch(batch, cost):
    """Told the remaining tokens, the policy minimises the time to drain the batch (docs/adaptive.md, "Draining
    batches"): >= 0.97x of the best fixed K (no speculation, here) on these noisy costs (0.979-0.988 measured; the
    lookup replay of benchmarks/policy_replay.py, less noisy: 0.977-1.0 in every closed case). At 4 slots, where
    fixed K = 1 beats no speculation by 2-4%, the same measures 0.93-1.0 over three sets of seeds: a known gap."""
    ratio, best = adaptive_vs_best_fixed(batch, MIXED[:batch], cost, tokens_each=64, warmups=(100, 200))
    assert ratio >= 0.97, f"adaptive = {ratio:.3f}x of fixed K = {best}"


def test_the_open_objective_loses_in_a_draining_batch():
    """The check above fails for the policy that is not told the remaining tokens (tokens per second now): with 64
    dispatch-bound slots the fast slots' drafts thin the batch instead of ending it sooner (0.965; 0.985 told them)."""
    ratio, best = adaptive_vs_best_fixed(64, MIXED, dispatch_bound, tokens_each=64, warmups=(100, 200),
                                         tell_remaining=False)
    assert ratio < 0.97, f"adaptive = {ratio:.3f}x of fixed K = {best}"


LOW = (0.5, 0.4, 0.3)


@pytest.mark.parametrize("batch,cost,floor", [(4, compute_bound, 0.96), (16, dispatch_bound, 0.96),
                                              (16, compute_bound, 0.94)])
def test_adaptive_reads_each_k_against_the_k_it_runs_when_the_load_drifts(batch, cost, floor):
    """The load also drifts (a random walk, +-20% over 100 steps): a K seen only in explorations was seen at another
    load than the K being run, and the cost model reads it through its ratio to that K, measured steps apart
    (StepCostModel, "Paired costs"): at low acceptance 0.977 / 0.973 / 0.948 of the best fixed K measured here (over
    16 drifting cases 0.95-1.0, mean 0.980); each K from its own fit: 0.916 / 0.899 / 0.908 (mean 0.966)."""
    ratio, best = adaptive_vs_best_fixed(batch, LOW, cost, drift=0.02)
    assert ratio >= floor, f"adaptive = {ratio:.3f}x of fixed K = {best}"


def test_own_fits_lose_when_the_load_drifts():
    """The check above fails with every K read from its own fit (no pairs, and no K read relative to T(B, 0) now, the
    other correction for a load that moved): so it can fail."""
    ratio, best = adaptive_vs_best_fixed(16, LOW, dispatch_bound, drift=0.02, pair_support=float("inf"),
                                         rescale_beyond=float("inf"))
    assert ratio < 0.93, f"adaptive = {ratio:.3f}x of fixed K = {best}"


def _admitted(policy, batch, tokens_each):
    """A closed batch of `batch` new requests, admitted as the worker admits them (the remaining tokens known)."""
    for slot in range(batch):
        policy.on_insert(slot, SlotRequest(req_id=f"r{slot}", prompt_token_ids=[1, 2], max_tokens=tokens_each))
        policy.admit(slot, batch, np.full(batch, tokens_each))


def mtp_at_4(batch: int, k: int, drafts: int) -> float:  # SmolLM2's MTP head on this CPU, about: T(4, 1) = 1.36 T(4, 0)
    return 0.05 + 0.007 * batch + k * (0.02 + 0.0005 * batch)


@pytest.mark.parametrize("probe_after", [128, float("inf")], ids=["probes", "no_probes"])
def test_adaptive_re_measures_a_draftless_batch_size(probe_after):
    """Closed batches of 4 requests (64 tokens each) after a warm-up batch whose K >= 1 steps cost 1.8x (a load spike
    while they ran: SmolLM2 at 4 slots read T(4, 1) / T(4, 0) 1.62 from its warm-up, 1.42 once measured): admission
    settles K = 0 on that evidence, and a batch size whose requests are all draft-less files no K >= 1 cost. Probes
    (`probe_after` steps without one) admit a batch with drafts and hold K = 1 for a few steps: K = 1 is measured at
    its true cost, and the batches after it draft (>= 0.97x of fixed K = 1 over the last four). Without probes every
    batch stays draft-less (no drafts: ~0.87x of fixed K = 1)."""
    accept = (0.65, 0.6, 0.55)
    batches = 10
    fixed = {k: np.mean([replay(lambda step, k=k: k, 4, accept, mtp_at_4, s, 64) for s in range(6, batches)])
             for k in range(K_MAX + 1)}
    policy = AdaptivePolicy(4, K_MAX, probe_after=probe_after)
    spiked = lambda b, k, d: mtp_at_4(b, k, d) * (1.8 if k else 1.0)  # noqa: E731
    for s in range(3):
        _admitted(policy, 4, 64)
        replay(policy.choose, 4, accept, spiked, 100 + s, 64, policy)
    rates, draftless = [], []
    for s in range(batches):
        before = policy.num_draftless
        _admitted(policy, 4, 64)
        draftless.append(policy.num_draftless - before)
        rates.append(replay(policy.choose, 4, accept, mtp_at_4, s, 64, policy))
    best = max(fixed, key=fixed.get)
    ratio = np.mean(rates[6:]) / fixed[best]
    if probe_after == float("inf"):
        assert draftless == [4] * batches and ratio < 0.9, (draftless, ratio)
    else:
        assert policy.num_probes >= 1 and draftless[6:] == [0] * 4 and ratio >= 0.97, (draftless, ratio, best)


def closed_batches_vs_fixed(batch, accept, cost, seed0, k, **policy_kw) -> tuple[float, AdaptivePolicy]:
    """(adaptive tokens/s over fixed K = k's, the policy) over ten closed batches of `batch` requests (64 tokens each,
    admitted as the worker admits them) after two warm-up batches, seeds seed0 + 0..9 for both."""
    policy = AdaptivePolicy(batch, K_MAX, **policy_kw)
    for s in range(2):
        _admitted(policy, batch, 64)
        replay(policy.choose, batch, accept, cost, 100 + s + seed0, 64, policy)
    rates = []
    for s in range(10):
        _admitted(policy, batch, 64)
        rates.append(replay(policy.choose, batch, accept, cost, s + seed0, 64, policy))
    fixed = np.mean([replay(lambda step: k, batch, accept, cost, s + seed0, 64) for s in range(10)])
    return float(np.mean(rates) / fixed), policy


def test_probes_cost_little_where_no_drafts_is_right():
    """Where K = 0 is right (16 dispatch-bound slots at LOW acceptance: fixed K = 1 is 0.91x of it), the probes that
    re-measure a draft-less batch size (probe_after 128 steps, doubling) cost ~1%: >= 0.98x of fixed K = 0 over ten
    closed batches of 64 tokens, on three seed sets (0.988-0.990 measured; 0.998-1.0 without probes). A probe at every
    batch (probe_after 1) fails it (0.957: each probe batch pays its hold and the explorations of a drafting batch)."""
    for seed0 in (0, 20, 40):
        ratio, policy = closed_batches_vs_fixed(16, LOW, dispatch_bound, seed0, 0)
        assert policy.num_probes >= 1 and ratio >= 0.98, (seed0, ratio, policy.num_probes)
    ratio, policy = closed_batches_vs_fixed(16, LOW, dispatch_bound, 0, 0, probe_after=1, probe_max=1)
    assert ratio < 0.98, (ratio, policy.num_probes)


def alike_at_16(batch: int, k: int, drafts: int) -> float:  # a draft step costs 1.34x a plain one at 16 slots
    return 0.003 + 0.0002 * batch + k * (0.0014 + 0.000045 * batch)


def test_adaptive_drafts_a_closed_batch_whose_requests_accept_alike():
    """Closed batches of 16 requests (64 tokens) that all accept 0.5 / 0.4 / 0.3, where fixed K = 1 drains 6.7% faster
    than K = 0: adaptive reaches >= 0.945x of fixed K = 1, mean over 40 seed sets (0.953 measured; min 0.916). The
    drain puts the slowest slot late by how far apart requests are (population_spread); read from each finished
    request's raw ratios (decayed counts, an unreached position as 0) that spread was sampling noise, E(1) 0.12 apart,
    and K = 0 won the drain: 0.939 over the four seed sets this test read until 2026-12-07. Four sets were too few: a
    near tie under the replay's noisy online costs sends a run down one path or another, and the same code read
    0.948-0.963 over those four and 0.952 over these 40 (before the slot leads' carry, AdaptivePolicy.carry)."""
    ratios = [closed_batches_vs_fixed(16, LOW, alike_at_16, seed0, 1)[0] for seed0 in range(0, 800, 20)]
    assert np.mean(ratios) >= 0.945, (np.mean(ratios), min(ratios))
