"""The adaptive policy's profiled step costs (docs/adaptive.md, "Profiled step costs"): the profile's batch sizes,
its table from measured steps (round ratios, medians), the interpolation the policy reads, the profile policy's
steady rows, and the adaptive policy on a profile (warm-up of every K's acceptance, no probes, choices by the
profile's costs, demotion of a batch that keeps choosing K = 0)."""

import math

import numpy as np
import pytest

from specworker.config import SpeculativeConfig
from specworker.slot_request import SlotRequest
from specworker.spec_decode.cost_profile import (CostProfile, ProfilePolicy, ProfiledCosts, ProfileRow, build_profile,
                                                 prefill_cost, profile_batch_sizes, ratio_errors)
from specworker.spec_decode.policy import AdaptivePolicy, PolicyStep, build_policy
from specworker.spec_decode.step_cost_model import StepCost


@pytest.mark.parametrize("max_num_seqs, sizes", [(1, [1]), (2, [1, 2]), (4, [1, 2, 4]), (6, [1, 2, 4, 6]),
                                                 (64, [1, 2, 4, 8, 16, 32, 64])])
def test_profile_batch_sizes(max_num_seqs, sizes):
    assert profile_batch_sizes(max_num_seqs) == sizes


def _true_cost(b, k):
    return 0.004 + 0.0005 * b * (k + 1) + 0.002 * k


def _rows(sizes, k_max, rounds, load=lambda r: 1.0, spike=None, steps=2):
    """Steady rows of `rounds` rounds at each size: K's true cost x the round's load (x 3 for `spike` = (B, round,
    K)); verify seconds 0.6 of it."""
    rows = []
    for b in sizes:
        for r in range(rounds):
            for k in range(k_max + 1):
                factor = load(r) * (3.0 if spike == (b, r, k) else 1.0)
                for _ in range(steps):
                    t = _true_cost(b, k) * factor
                    rows.append(ProfileRow(round=r, k=k, cost=StepCost(num_slots=b, num_drafts=b * k, num_substeps=k,
                                                                       seconds=t, verify_seconds=0.6 * t)))
    return rows


def test_build_profile_reads_ratios_within_rounds_so_load_between_rounds_cancels():
    # the load doubles every round: seconds as measured spread 32x, the ratios within a round do not
    profile = build_profile(_rows([1, 2, 4], 3, 6, load=lambda r: 2.0 ** r), 3)
    truth = np.array([[_true_cost(b, k) for k in range(4)] for b in (1, 2, 4)])
    assert profile.batch_sizes.tolist() == [1, 2, 4]
    np.testing.assert_allclose(profile.seconds / profile.seconds[:, :1], truth / truth[:, :1], rtol=1e-12)
    np.testing.assert_allclose(profile.verify / profile.verify[:, :1], truth / truth[:, :1], rtol=1e-12)
    assert (profile.error == 0).all()  # every round read the same ratio
    assert profile.steps.tolist() == [[12] * 4] * 3
    assert profile.k_max == 3
    assert set(profile.to_dict()) == {"batch_sizes", "seconds", "verify", "error", "steps", "prefill_per_token"}
    assert profile.prefill_per_token == 0.0  # no prefill step given


def test_prefill_cost_is_the_slope_of_proposer_seconds_on_prompt_tokens():
    """0.5 ms a step plus 20 us a prompt token, +-0.1 ms of noise: the slope; never below 0; 0 without two different
    token counts. build_profile and ProfiledCosts carry it."""
    rng = np.random.default_rng(0)
    samples = [(t, 5e-4 + 2e-5 * t + 1e-4 * rng.standard_normal()) for t in (8, 16, 32, 64, 128, 256, 512) * 3]
    assert prefill_cost(samples) == pytest.approx(2e-5, rel=0.05)
    assert prefill_cost([(8, 2e-3), (512, 1e-3)]) == 0.0
    assert prefill_cost([(8, 1e-3), (8, 2e-3)]) == 0.0 and prefill_cost([]) == 0.0
    profile = build_profile(_rows([1, 2], 1, 2), 1, samples)
    assert profile.prefill_per_token == prefill_cost(samples)
    assert ProfiledCosts(profile).prefill_per_token == profile.prefill_per_token
    assert profile.to_dict()["prefill_per_token"] == profile.prefill_per_token


def test_build_profile_median_outvotes_a_load_spike():
    clean = build_profile(_rows([4], 2, 5), 2)
    spiked = build_profile(_rows([4], 2, 5, spike=(4, 2, 1)), 2)
    np.testing.assert_allclose(spiked.seconds, clean.seconds, rtol=1e-12)
    assert spiked.error[0].tolist() == [0.0, 0.0, 0.0]  # nor its spread (a median absolute deviation)


def test_build_profile_error_is_the_spread_of_the_round_ratios():
    rows = [ProfileRow(round=r.round, k=r.k, cost=StepCost(
        num_slots=4, num_drafts=0, num_substeps=0, verify_seconds=r.cost.verify_seconds,
        seconds=r.cost.seconds * (1 + 0.1 * r.round if r.k == 1 else 1.0))) for r in _rows([4], 1, 5)]
    profile = build_profile(rows, 1)
    ratios = _true_cost(4, 1) / _true_cost(4, 0) * (1 + 0.1 * np.arange(5))
    assert profile.seconds[0, 1] / profile.seconds[0, 0] == pytest.approx(np.median(ratios))
    logs = np.log(ratios)
    assert profile.error[0, 1] == pytest.approx(1.25 * 1.4826 * np.median(np.abs(logs - np.median(logs))) / np.sqrt(5))


def test_build_profile_drops_a_batch_size_a_k_is_missing_at():
    rows = [r for r in _rows([1, 2], 2, 3) if not (r.cost.num_slots == 2 and r.k == 2)]
    profile = build_profile(rows, 2)
    assert profile.batch_sizes.tolist() == [1]
    assert build_profile([r for r in rows if r.cost.num_slots == 2], 2) is None
    assert build_profile([], 2) is None


def test_build_profile_error_of_a_single_round_is_unknown():
    profile = build_profile(_rows([1], 1, 1), 1)
    assert profile.error[0].tolist() == [0.0, 0.5]


def test_ratio_errors_are_the_errors_a_profile_of_the_rows_would_have():
    """ratio_errors (what the profile run reads to decide on another round) equals build_profile's error on the
    same rows of one batch size; 0.5 (unknown) for every K >= 1 while a K has no round."""
    rows = [ProfileRow(round=r.round, k=r.k, cost=StepCost(
        num_slots=4, num_drafts=0, num_substeps=0, verify_seconds=r.cost.verify_seconds,
        seconds=r.cost.seconds * (1 + 0.1 * r.round * r.k))) for r in _rows([4], 2, 5)]
    errors = ratio_errors(rows, 2)
    assert errors[0] == 0.0 and (errors[1:] > 0).all() and errors[2] > errors[1]
    np.testing.assert_array_equal(errors, build_profile(rows, 2).error[0])
    assert ratio_errors([r for r in rows if r.k != 2], 2).tolist() == [0.0, 0.5, 0.5]
    assert ratio_errors([], 1).tolist() == [0.0, 0.5]


def _profile(sizes, table):
    seconds = np.array(table, dtype=np.float64)
    return CostProfile(batch_sizes=np.array(sizes), seconds=seconds, verify=0.5 * seconds,
                       error=np.tile(np.arange(seconds.shape[1]) / 10, (len(sizes), 1)),
                       steps=np.full(seconds.shape, 6))


def test_profiled_costs_interpolate_t0_in_b_and_ratios_in_log_b():
    costs = ProfiledCosts(_profile([1, 4, 16], [[1.0, 2.0, 3.0], [2.0, 3.0, 4.0], [5.0, 10.0, 20.0]]))
    seconds, verify = costs.predict(4, 2)
    np.testing.assert_allclose(seconds, [2.0, 3.0, 4.0])  # a measured size: as measured
    np.testing.assert_allclose(verify, 0.5 * seconds)
    seconds, _ = costs.predict(2, 2)  # T0 halfway in B between 1 and 4 (1/3 of the way); ratios halfway in ln B
    t0 = 1.0 + (2 - 1) / (4 - 1) * (2.0 - 1.0)
    np.testing.assert_allclose(seconds, t0 * np.array([1.0, (2.0 + 1.5) / 2, (3.0 + 2.0) / 2]))
    np.testing.assert_allclose(costs.predict(64, 2)[0], [5.0, 10.0, 20.0])  # beyond: the nearest
    np.testing.assert_allclose(costs.predict_relative(4, 2), [2.0, 3.0, 4.0])
    np.testing.assert_allclose(costs.predict(4, 1)[0], [2.0, 3.0])  # k_max below the profile's
    assert (costs.support(4, 2) == math.inf).all()
    np.testing.assert_allclose(costs.relative_error(4, 2), [0.0, 0.1, 0.2])
    assert costs.count == {0: 18, 1: 18, 2: 18}
    assert costs.nearness(4, 4) == 1.0 and costs.nearness(8, 4) < 0.5


def _served(costs, k, seconds, b=4, drafts=None, own=0.0):
    costs.add(k, StepCost(num_slots=b, num_drafts=k * b if drafts is None else drafts, num_substeps=k,
                          seconds=seconds, verify_seconds=0.6 * seconds), own_seconds=own)


def test_served_pairs_correct_a_neighbour_ratio_by_their_median():
    """Steady steps one after the other at one of the profile's sizes, of neighbouring K with full drafts, are served
    pairs; a cell's median moves the profile's ratio T(B, K) / T(B, K - 1) by the posterior weight (formula written
    out here), and T(B, j) for j >= K with it; nothing else moves."""
    table = [[1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 6.6]]  # T(4, 3) / T(4, 2) = 1.10 in the profile
    costs = ProfiledCosts(_profile([1, 4], table))
    before = {b: costs.predict(b, 3) for b in (1, 2, 4)}
    rng = np.random.default_rng(3)
    logs = []
    for i in range(12):  # K = 2 runs, K = 3 explored: 2, 3, 2, 3, ... (each step pairs with the one before it)
        k = 2 + i % 2
        seconds = (6.0 if k == 2 else 7.2) * float(np.exp(rng.normal(0.0, 0.02)))
        _served(costs, k, seconds, own=0.001 * i)  # the policy's own seconds are left out of the pair
        if i:
            logs.append((1 if k == 3 else -1) * math.log((seconds - 0.001 * i) / last))
        last = seconds - 0.001 * i
        if i < 3:  # fewer than PAIR_LEAST pairs: no correction yet
            assert costs.version == 0 and np.array_equal(costs.predict(4, 3)[0], before[4][0])
    logs = np.array(logs)
    median = float(np.median(logs))
    spread = max(1.4826 * float(np.median(np.abs(logs - median))), 0.05)
    prior = 0.3 ** 2 + 0.2 ** 2 + 0.04 ** 2  # the profile's errors at K = 3 and 2 (_profile), and PROFILE_DRIFT
    shift = (median - math.log(1.1)) * prior / (prior + (1.25 * spread) ** 2 / len(logs))
    assert costs.correction[1].tolist() == [0.0, 0.0, 0.0, pytest.approx(shift, rel=1e-12)]
    seconds, verify = costs.predict(4, 3)
    np.testing.assert_allclose(seconds, [2.0, 4.0, 6.0, 6.6 * math.exp(shift)], rtol=1e-12)
    np.testing.assert_allclose(verify, 0.5 * seconds, rtol=1e-12)
    assert 1.18 < seconds[3] / seconds[2] < 1.22  # 1.2 served (+-2% a step); the profile's errors weigh little
    np.testing.assert_array_equal(costs.predict(1, 3)[0], before[1][0])  # another size keeps its ratios
    at_2 = costs.predict(2, 3)[0]  # ratios to K = 0 halfway in ln B between sizes 1 and 4, the corrected one at 4
    np.testing.assert_allclose(at_2[3] / at_2[0], (4.0 + 3.3 * math.exp(shift)) / 2, rtol=1e-12)
    assert costs.served_pairs() == {"pairs": [[0] * 4, [0, 0, 0, 11]], "log_shift": costs.correction.tolist()}


def test_served_pairs_need_one_profile_size_neighbouring_k_and_full_drafts():
    costs = ProfiledCosts(_profile([1, 4], [[1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 6.6]]))
    for _ in range(4):
        _served(costs, 2, 6.0)
        _served(costs, 3, 8.0, b=3)  # 3 slots: not a size the profile measured (and the next pair spans two sizes)
    for _ in range(4):
        _served(costs, 1, 4.0)
        _served(costs, 3, 8.0)  # K = 1 and 3 are not neighbours
    for _ in range(4):
        _served(costs, 2, 6.0)
        _served(costs, 3, 8.0, drafts=10)  # a step that fed fewer than K drafts a slot
    # one pair in all: the last K = 3 of the second loop (4 slots, full drafts) and the first K = 2 of the third
    assert {key: len(cell) for key, cell in costs._pairs.items()} == {(1, 3): 1} and costs.version == 0
    assert not costs.correction.any() and costs.observed == {1: 4, 2: 8, 3: 12}
    costs.pair_least = math.inf  # no correction at any count
    for _ in range(8):
        _served(costs, 2, 6.0)
        _served(costs, 3, 8.0)
    assert costs.version == 0 and len(costs._pairs[1, 3]) == 1 + 15  # the first K = 2 follows a short step


def test_served_pairs_outvote_a_spike_on_either_side():
    """The median of single steps against single steps: a 3x load spike on the explored side now and then moves it
    little (a mean of the logs would read it ~15% dearer)."""
    costs = ProfiledCosts(_profile([1, 4], [[1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 7.2]]))
    for i in range(20):
        _served(costs, 2, 6.0)
        _served(costs, 3, 7.2 * (3.0 if i % 5 == 0 else 1.0))
    seconds = costs.predict(4, 3)[0]
    assert abs(seconds[3] / seconds[2] / 1.2 - 1) < 0.01


def test_the_policy_reads_corrected_costs_and_leaves_its_own_time_out():
    """The adaptive policy files each steady step with its own host seconds in it (the last choose's), and its
    cached drain tables follow the corrections (ProfiledCosts.version)."""
    policy = AdaptivePolicy(4, 3, counts_fill=False)  # a draft model's: every K feeds K drafts (fill 1)
    policy.use_profile(_profile([1, 4], [[1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 6.6]]))
    filed = []
    add = policy.costs.add
    policy.costs.add = lambda k, cost, **kw: (filed.append((k, kw["own_seconds"])), add(k, cost, **kw))
    ticks = iter(np.arange(0.0, 100.0, 0.25))
    policy.host_clock = lambda: float(next(ticks))  # each choose takes 0.25 s on this clock
    live = np.ones(4, dtype=bool)
    for _ in range(4):
        policy.choose(PolicyStep(live=live, drafted=np.zeros(4, dtype=np.int64), emitted=np.ones(4, dtype=np.int64),
                                 cost=StepCost(num_slots=4, num_drafts=4 * policy.last_k, num_substeps=0,
                                               seconds=1.0, verify_seconds=0.5)))
    assert filed and all(own == 0.25 for _, own in filed)
    table = policy._drain_costs(4).copy()
    for _ in range(4):
        _served(policy.costs, 2, 6.0)
        _served(policy.costs, 3, 8.4)
    assert policy.costs.version > 0 and policy._drain_costs(4)[0, 3] > table[0, 3]


def test_profiled_costs_follow_the_share_of_drafts_fed():
    costs = ProfiledCosts(_profile([1], [[1.0, 2.0, 4.0]]))
    costs.set_fill(np.array([0.5, 0.5]))  # K = 1 feeds 0.5 drafts a slot, K = 2 one
    np.testing.assert_allclose(costs.predict(1, 2)[0], [1.0, 1.5, 2.0])
    costs.set_fill(np.array([1.0, 1.0]))
    np.testing.assert_allclose(costs.predict(1, 2)[0], [1.0, 2.0, 4.0])
    costs.add(1, StepCost(num_slots=1, num_drafts=1, num_substeps=1, seconds=9.0))  # counted, not used
    assert costs.observed == {1: 1} and costs.predict(1, 2)[0][1] == 2.0


def _step(live, cost=None, drafted=None, emitted=None):
    n = len(live)
    return PolicyStep(live=np.array(live), drafted=np.zeros(n, np.int64) if drafted is None else np.array(drafted),
                      emitted=np.ones(n, np.int64) if emitted is None else np.array(emitted), cost=cost)


def test_profile_policy_keeps_steady_steps_under_the_round_that_chose_them():
    policy = ProfilePolicy(2, 2)
    plan = [(0, 0), (0, 0), (2, 0), (2, 0), (2, 1), (1, 1), (1, 1), (0, -1)]  # (K, round) chosen at each step
    out = []
    for i, (k, r) in enumerate(plan):
        policy.k, policy.round = k, r
        cost = None if i == 0 else StepCost(num_slots=2, num_drafts=0, num_substeps=0, seconds=float(i))
        out.append(policy.choose(_step([True, False], cost)).tolist())
    assert out[2] == [2, 2]  # a live slot gets K, one not live its cap
    # step i's cost (seconds i) is the cycle of the step chosen at i - 1, steady when choices i - 2 and i - 1 agree
    assert [(row.round, row.k, row.cost.seconds) for row in policy.rows] == [(0, 0, 2.0), (0, 2, 4.0), (1, 2, 5.0),
                                                                             (1, 1, 7.0)]


def _adaptive(k_max=2, profile=None, num_slots=4):
    policy = AdaptivePolicy(num_slots, k_max)
    policy.use_profile(profile if profile is not None else
                       _profile([1, 4], [[1.0, 1.1, 1.2], [1.0, 1.1, 1.2]]))
    return policy


def _run(policy, steps, live, accept=0.9, seed=0, until=None):
    """Steps where each draft is accepted with probability `accept` (at most `steps`; fewer once until(policy) holds);
    returns the batch K chosen each step."""
    rng = np.random.default_rng(seed)
    live = np.array(live)
    allowed = np.zeros(len(live), np.int64)
    ks = []
    for _ in range(steps):
        accepted = np.array([int(np.argmin(np.append(rng.random(a) < accept, False))) for a in allowed])
        emitted = np.where(live, accepted + 1, 0)
        allowed = policy.choose(_step(live, drafted=np.where(live, allowed, 0), emitted=emitted))
        allowed = np.where(live, allowed, 0)
        ks.append(int(allowed.max()))
        if until is not None and until(policy):
            break
    return ks


def test_adaptive_on_a_profile_first_measures_each_k_then_chooses_by_the_profile():
    cheap = _adaptive()  # drafts nearly free: K = 2
    ks = _run(cheap, 60, [True] * 4)
    assert ks[:4] == [1, 1, 2, 2]  # warm-up: the K with the fewest anchored verifications, held 2 steps
    assert cheap._acceptance_warm() and (cheap.k_reaches[:, 0] >= cheap.warm_reaches).all()
    assert ks[-10:] == [2] * 10
    dear = _adaptive(profile=_profile([1, 4], [[1.0, 3.0, 6.0], [1.0, 3.0, 6.0]]))  # drafts 3x: K = 0
    assert _run(dear, 60, [True] * 4)[-10:] == [0] * 10


def test_adaptive_explores_only_the_neighbour_not_ruled_out():
    """_neighbours_settled keeps the neighbours of the current K not ruled out (`unsettled`); where one of the two is
    ruled out, the explorations go to the other alone instead of alternately above and below."""
    policy = _adaptive(k_max=3, profile=_profile([1, 4], [[1.0, 1.5, 1.3, 1.64], [1.0, 1.5, 1.3, 1.64]]),
                       num_slots=1)
    _run(policy, 600, [True], accept=0.9)
    assert policy.kept_k == 2
    seconds = policy.predicted_costs(np.array([True]))[0]
    policy._neighbours_settled(2, np.array([0]), seconds, None)
    assert policy.unsettled[0] == 2 and 1 not in policy.unsettled[1]  # K = 1 (1.5x the cost of K = 0) ruled out
    policy.costs.count[3] = policy.settle_costs - 1  # K = 3's cost on too few observations: not ruled out
    assert not policy._neighbours_settled(2, np.array([0]), seconds, None) and policy.unsettled == (2, (3,))

    def explorations(unsettled, last_k=2):
        policy.unsettled, policy.last_k, out = unsettled, last_k, []
        for _ in range(2):
            policy.last_explored = policy.num_choices - policy.explore_interval  # an exploration is due
            out.append(policy._exploration(True, 1)[0])
        return out

    policy.num_explorations = 0
    assert explorations(None) == [3, 1]  # alternately above and below
    assert explorations((2, (1, 3))) == [3, 1] and explorations((2, ())) == [3, 1]
    assert explorations((2, (3,))) == [3, 3] and explorations((2, (1,))) == [1, 1]
    assert explorations((1, (3,))) == [3, 1]  # kept for another K: alternately again


def test_adaptive_on_a_profile_never_probes_a_draftless_batch_size():
    policy = _adaptive(profile=_profile([1, 4], [[1.0, 3.0, 6.0], [1.0, 3.0, 6.0]]))
    _run(policy, 400, [True] * 4)  # evidence: K = 0 settled
    settled, _ = policy._no_drafts_verdict(4, None)
    assert settled
    policy.clock += 10 * policy.probe_interval  # long after any K >= 1 step: an unprofiled policy would probe now
    assert policy._probed(4, True, 1) and policy.probe is None and policy.num_probes == 0


@pytest.mark.parametrize("demote_after", [0, 2])
def test_adaptive_on_a_profile_demotes_a_batch_that_keeps_choosing_k0(demote_after):
    """Drafts cost 3x (K = 0 wins): once `demote_after` exploitation decisions in a row chose K = 0 on enough
    evidence, the live slots become draft-less and no step explores again; with demotion off (0, lookup proposers)
    a neighbour is still explored. A slot that is not live keeps its cap, and a request that replaces a demoted one
    may draft."""
    policy = AdaptivePolicy(4, 2, demote_after=demote_after)
    policy.use_profile(_profile([1, 4], [[1.0, 3.0, 6.0], [1.0, 3.0, 6.0]]))
    live = [True, True, True, False]
    ks = _run(policy, 400, live)  # the worker totals reach admit_min_reaches from explorations, after ~200 steps
    assert policy.total_reaches[0] >= policy.admit_min_reaches
    if demote_after:
        assert policy.draftless.tolist() == live and policy.cap.tolist() == [0, 0, 0, 2]
        assert policy.num_demoted == 3
        last = max(i for i, k in enumerate(ks) if k > 0)
        assert last < 300 and ks[last + 1:] == [0] * (len(ks) - last - 1)
        policy.on_clear(0)
        policy.on_insert(0, SlotRequest(req_id="r", prompt_token_ids=[1], max_tokens=4, temperature=0.0))
        assert policy.may_draft(0) and not policy.draftless[0]
    else:
        assert not policy.draftless.any() and policy.num_demoted == 0
        assert any(k > 0 for k in ks[300:])  # explorations go on


def test_build_policy_demotes_only_for_a_draft_model():
    mtp = SpeculativeConfig(method="mtp", num_speculative_tokens=2, num_model_steps=2, policy="adaptive",
                            model="builtin:tiny-mtp")
    ngram = SpeculativeConfig(method="ngram", num_speculative_tokens=2, policy="adaptive")
    assert build_policy(mtp, 4).demote_after == 2 and build_policy(ngram, 4).demote_after == 0


def test_adaptive_on_a_profile_warms_position_2_of_k2_and_up():
    """K >= 2's choice turns on position 2, reached only after position 1 is accepted: the acceptance warm-up lasts
    until each K >= 2 anchored `warm_reaches` verifications of position 2 (K = 1: of position 1). At acceptance 0.5
    that takes about twice the K = 2 steps position 1 alone needs."""
    policy = _adaptive(num_slots=1)
    _run(policy, 400, [True], accept=0.5, until=AdaptivePolicy._acceptance_warm)
    reaches = policy.k_reaches
    assert policy._warm and reaches[0, 0] >= policy.warm_reaches and (reaches[1:, 1] >= policy.warm_reaches).all()
    assert reaches[1:, 0].min() > 1.5 * policy.warm_reaches  # position 1 alone would have stopped at warm_reaches


def test_adaptive_on_a_profile_demotes_only_where_k0_is_settled():
    """K = 1 costs 1.5x and position 1 is accepted half the time: the point estimates choose K = 0 by a hair, and
    at its optimistic acceptance K = 1 is 1.8% ahead. The profile measured K = 1's cost only to +-30%, which nothing
    served narrows, so K = 1 may well be the faster: admission would not settle K = 0 (the regret of going
    draft-less exceeds what keeping drafts costs), and the batch is not demoted: it keeps exploring. Measured to
    +-1%, the regret is the 1.8%, within the switch margin, and the same batch is demoted."""
    for error, demoted in ((0.3, False), (0.01, True)):
        policy = AdaptivePolicy(4, 1, demote_after=2)
        policy.use_profile(CostProfile(batch_sizes=np.array([1, 4]), seconds=np.array([[1.0, 1.5], [1.0, 1.5]]),
                                       verify=np.array([[0.5, 0.75], [0.5, 0.75]]),
                                       error=np.array([[0.0, error]] * 2), steps=np.full((2, 2), 6)))
        ks = _run(policy, 300, [True] * 4, accept=0.5)
        assert policy.total_reaches[0] >= policy.admit_min_reaches
        if demoted:
            assert policy.num_demoted == 4 and policy.draftless.all() and not any(ks[200:])
        else:
            assert policy.zero_decisions >= 2 and not policy._no_drafts_verdict(4, None)[0]
            assert policy.num_demoted == 0 and any(k > 0 for k in ks[200:])
