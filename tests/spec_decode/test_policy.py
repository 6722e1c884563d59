"""Speculation policies on synthetic numbers (pure Python): fixed, schedule by batch size, adaptive's choice from
given acceptance and step costs, per-request caps following slot moves, expected_tokens by hand."""

import collections
import dataclasses

import numpy as np
import pytest

from specworker.config import SpeculativeConfig
from specworker.slot_request import SlotRequest
from specworker.spec_decode.policy import (AdaptivePolicy, FixedPolicy, PolicyStep, SchedulePolicy, build_policy,
                                           expected_excess, expected_tokens)
from specworker.spec_decode.step_cost_model import RecentSteps, StepCost, StepCostModel
from tests.spec_decode.synthetic_costs import SyntheticCostModel, adaptive_with, set_acceptance


def _step(live, drafted=None, emitted=None, cost=None):
    live = np.array(live, dtype=bool)
    zeros = np.zeros(len(live), dtype=np.int64)
    return PolicyStep(live=live, drafted=zeros if drafted is None else np.array(drafted),
                      emitted=zeros if emitted is None else np.array(emitted), cost=cost)


def _request(k=None):
    return SlotRequest(req_id="r", prompt_token_ids=[1, 2], max_tokens=4, num_speculative_tokens=k)


def test_expected_tokens_by_hand():
    out = expected_tokens(np.array([[0.5, 0.5], [1.0, 0.0]]))
    np.testing.assert_allclose(out, [[1.0, 1.5, 1.75], [1.0, 2.0, 2.0]])


def test_fixed_policy_gives_k_max_and_honours_overrides():
    policy = FixedPolicy(3, 2)
    policy.on_insert(1, _request(0))
    policy.on_insert(2, _request(1))
    np.testing.assert_array_equal(policy.choose(_step([True, True, True])), [2, 0, 1])
    policy.on_swap(0, 1)
    np.testing.assert_array_equal(policy.choose(_step([True, True, True])), [0, 2, 1])
    policy.on_move(0, 1)  # slot 0's request (override 0) moves to the empty slot 1
    np.testing.assert_array_equal(policy.cap, [2, 0, 1])
    policy.on_clear(1)
    np.testing.assert_array_equal(policy.cap, [2, 2, 1])
    assert policy.steady_k


def _schedule_spec(schedule):
    return SpeculativeConfig(method="mtp", model="builtin:tiny-mtp", num_speculative_tokens=3, num_model_steps=3,
                             policy="schedule", schedule=schedule)


@pytest.mark.parametrize("batch,k", [(1, 3), (3, 3), (4, 2), (15, 2), (16, 1), (31, 1), (32, 0), (64, 0)])
def test_schedule_picks_k_of_the_batch_size_range(batch, k):
    policy = SchedulePolicy(64, _schedule_spec({1: 3, 4: 2, 16: 1, 32: 0}))
    live = [True] * batch + [False] * (64 - batch)
    chosen = policy.choose(_step(live))
    assert set(chosen[:batch].tolist()) == {k}


def _adaptive(n, k_max, accept):
    """An AdaptivePolicy whose acceptance is set (set_acceptance; the cost row is passed to best_k), resting on ample
    evidence for every k (a million verifications of each position after each k: no optimism bonus)."""
    policy = AdaptivePolicy(n, k_max)
    policy.totals[:] = policy.k_totals[:] = 1e6
    set_acceptance(policy, accept)
    return policy


def test_adaptive_drafts_when_drafts_are_cheap():
    # acceptance 0.8: E(K) = 1, 1.8, 2.44, 2.95 tokens per slot; step seconds 10, 12, 14, 16 ms -> K = 3
    # (184 tokens/s against 100, 150, 174).
    policy = _adaptive(1, 3, [[0.8, 0.8, 0.8]])
    best, k_b = policy.best_k(np.array([True]), np.array([10e-3, 12e-3, 14e-3, 16e-3]))
    assert best == 3 and k_b.tolist() == [3]


def test_adaptive_stops_drafting_when_drafts_cost_more_than_they_bring():
    # acceptance 0.5: E(K) = 1, 1.5, 1.75, 1.875; a step at K = 1 costs 1.6x the plain step -> K = 0.
    n = 64
    policy = _adaptive(n, 3, [[0.5, 0.5, 0.5]] * n)
    best, k_b = policy.best_k(np.ones(n, dtype=bool), np.array([10e-3, 16e-3, 22e-3, 28e-3]))
    assert best == 0 and not k_b.any()


def _thin_k2(reaches):
    """k_max = 2, one slot at acceptance 0.8 on ample pooled evidence (prior 0.8, and 0.8 after steps of k = 1), but
    K = 2's own steps (those anchored by a step of 2 drafts) number `reaches` per position, 3 in 4 accepted."""
    policy = _adaptive(1, 2, [[0.8, 0.8]])
    policy.confidence = 1.0  # one standard error (the default)
    policy.totals[0], policy.totals[1] = 1e6, 0.8e6
    policy.k_totals[:, 0] = policy.totals
    policy.k_totals[0, 1], policy.k_totals[1, 1] = reaches, 0.75 * reaches
    return policy


def test_adaptive_tries_a_k_whose_acceptance_rests_on_few_steps():
    """With `optimism` (off by default): T = 10 / 14 / 19 ms at K = 0 / 1 / 2. K = 1 brings 1.8 tokens (129 tokens/s). K = 2's own four steps read
    position acceptance 0.75, shrunk to the pooled 0.8 with weight 8: 0.78, so 2.40 tokens (126 tokens/s) at the point
    estimate, but one standard error up (0.90) 2.72 (143 tokens/s): K = 2 is tried. With 1000 steps of K = 2 at the
    same 0.75 the bound is 0.76 and K = 1 stays; without optimism K = 1 stays either way."""
    seconds = np.array([10e-3, 14e-3, 19e-3])
    for reaches, optimism, expected in ((4, True, 2), (1000, True, 1), (4, False, 1)):
        policy = _thin_k2(reaches)
        policy.optimism = optimism  # off by default: on the tiny pair at batch 1 it kept trying K = 3 (0.93x of K = 2)
        policy.kept_k = 0  # no hysteresis in favour of either
        best, _ = policy.best_k(np.array([True]), seconds)
        assert best == expected, (reaches, optimism, best)


def test_adaptive_backs_off_exploring_a_neighbour_only_once_its_bound_is_below():
    """After an exploration confirms K = 1 (K = 2 costs 22 ms: 2.72 tokens at its optimistic acceptance is 124
    tokens/s, under K = 1's 129), the interval doubles when K = 2's bound is below K = 1's point rate; at 20 ms
    (optimistic 136 tokens/s) K = 2 may still be better and explorations stay `explore_every` apart."""
    for seconds_k2, backed_off in ((22e-3, True), (20e-3, False)):
        policy = _thin_k2(4)
        policy.costs.count.update(dict.fromkeys(range(3), policy.settle_costs))  # costs on evidence (the test below)
        policy.kept_k, policy.explored = 1, True
        policy.switch_margin = 1.0  # hold K = 1 whatever the optimistic rates say: the back-off alone is tested
        best, _ = policy.best_k(np.array([True]), np.array([10e-3, 14e-3, seconds_k2]))
        assert best == 1
        assert (policy.explore_interval == 2 * policy.explore_every) == backed_off, (seconds_k2, policy.explore_interval)


def test_adaptive_keeps_exploring_a_neighbour_whose_cost_rests_on_few_steps():
    """The case above that backs off (K = 2 at 22 ms, its bound below K = 1's rate) does not while K = 2's cost rests on
    fewer than `settle_costs` steady observations: a cost read from a few steps, load spikes among them, would
    otherwise stay unchecked for up to `explore_max` steps. K = 0's count matters alike (the other neighbour)."""
    for counts, backed_off in (((6, 20, 6), True), ((6, 20, 5), False), ((5, 20, 6), False), ((3, 20, 3), False)):
        policy = _thin_k2(4)
        policy.costs.count.update(enumerate(counts))
        policy.kept_k, policy.explored = 1, True
        policy.switch_margin = 1.0
        best, _ = policy.best_k(np.array([True]), np.array([10e-3, 14e-3, 22e-3]))
        assert best == 1
        assert (policy.explore_interval == 2 * policy.explore_every) == backed_off, (counts, policy.explore_interval)


def test_adaptive_backs_off_a_neighbour_whose_explorations_keep_confirming_the_choice():
    """The unsettled case above (K = 2 at 20 ms: its optimistic rate above K = 1's) backs off once
    `confirm_explorations` (3) explorations in a row left K = 1 chosen, and doubles at each confirming one after that:
    2-step turns anchor K = 2's rows where K = 1's steps left the text, so more of them need not narrow its bound (the
    tiny pair at 4 slots explored K = 3 every 32 steps through a bench). A changed choice starts the count again; so
    does nothing while a neighbour's cost rests on fewer than `settle_costs` steady observations."""
    seconds = np.array([10e-3, 14e-3, 20e-3])
    for counts, expected in (((6, 20, 6), [1, 1, 2, 4, 8]), ((6, 20, 5), [1, 1, 1, 1, 1])):
        policy = _thin_k2(4)
        policy.costs.count.update(enumerate(counts))
        policy.kept_k, policy.switch_margin = 1, 1.0  # hold K = 1: the back-off alone is tested
        intervals = []
        for _ in expected:
            policy.explored = True  # an exploration ended since the last choice
            best, _ = policy.best_k(np.array([True]), seconds)
            assert best == 1 and policy.unsettled == (1, (2,))
            intervals.append(policy.explore_interval // policy.explore_every)
        assert intervals == expected, (counts, intervals)
    policy.kept_k, policy.switch_margin = 2, 0.02  # the choice changes (K = 2 to K = 1, 7% ahead): the count restarts
    best, _ = policy.best_k(np.array([True]), seconds)
    assert best == 1 and policy.explore_interval == policy.explore_every and policy.confirmations == 0


def test_adaptive_trims_slots_with_poor_acceptance():
    # Slot 0 accepts almost always, slot 1 almost never. K = 2 is best for the batch (2.85 + 1.02 tokens in 13 ms
    # against 2 in 10 ms); an average draft costs (13 - 10) / 4 ms, which slot 1's drafts (P = 0.02) do not pay
    # for at that rate (0.30 tokens/ms x 0.75 ms = 0.22): slot 1 gets k_b = 0, slot 0 keeps 2.
    policy = _adaptive(2, 2, [[0.95, 0.95], [0.02, 0.02]])
    best, k_b = policy.best_k(np.array([True, True]), np.array([10e-3, 11.5e-3, 13e-3]))
    assert best == 2
    np.testing.assert_array_equal(k_b, [2, 0])


def test_adaptive_learns_acceptance_per_slot_with_a_prior():
    policy = AdaptivePolicy(2, 2)
    np.testing.assert_allclose(policy.acceptance(), 0.5)  # Laplace prior with no observation
    for _ in range(10):  # slot 0: both drafts accepted; slot 1: first draft rejected
        policy.observe(_step([True, True], drafted=[2, 2], emitted=[3, 1]))
    a = policy.acceptance()
    assert a[0, 0] > 0.75 and a[0, 1] > 0.75  # pulled from the prior (0.5 at position 1) towards 1
    assert a[1, 0] < 0.25  # rejected at position 1 every time
    # slot 1 never reached position 2: its estimate is the worker prior there, (10 + 1) / (10 + 2)
    assert a[1, 1] == pytest.approx(11 / 12)


def test_adaptive_counts_positions_a_slot_was_allowed_but_not_drafted():
    """A lookup proposer that finds nothing drafts 0 of its k_b = 2: the step emitted 1 token where 3 were allowed,
    so position 1 counts as reached and failed (E(K) is what a step allowed K brings); a paused slot (emitted 0)
    counts nothing."""
    policy = AdaptivePolicy(2, 2)
    policy.allowed[:] = 2
    for _ in range(10):
        policy.observe(_step([True, True], drafted=[0, 0], emitted=[1, 0]))
        policy.allowed[:] = 2
    a = policy.acceptance()
    assert a[0, 0] < 0.3  # slot 0: never a token beyond the first
    assert policy.reaches[1].sum() == 0  # slot 1 was paused throughout


def test_adaptive_first_choice_has_no_incumbent():
    """No K is kept before the first exploitation choice, so no switch margin holds one: E(1) = 1.9, E(2) = 2.35, and
    K = 2's rate 1% below K = 1's. Then the margin holds the choice made: K = 2 1% above K = 1 stays K = 1."""
    policy = _adaptive(1, 2, [[0.9, 0.5]])
    live = np.array([True])
    assert policy.kept_k is None
    assert policy.best_k(live, np.array([1.0, 1.0, 2.35 / 1.881]))[0] == 1  # K = 2 at 1.881 against 1.9
    assert policy.best_k(live, np.array([1.0, 1.0, 2.35 / 1.918]))[0] == 1  # within the 2% margin of the choice


def test_adaptive_switches_down_to_a_better_k_without_the_margin():
    """The rate objective takes a K below the current one as soon as its rate is above the current K's (down_margin
    0): its positions are verified in every step the current K runs, whose anchors read it low (at one slot on the
    tiny pair, K = 3 kept while K = 2 read 1-3% behind where steady steps put it 6-9% ahead). A switch up still needs
    switch_margin (2%)."""
    policy = _adaptive(1, 3, [[0.9, 0.8, 0.5]])
    live = np.array([True])
    gain = policy.expected_by_k(policy.acceptance())[0][0]  # 1, 1.9, 2.62, 2.98
    policy.kept_k = 3
    assert policy.best_k(live, np.array([10.0, 10.0, gain[2] / 1.01, gain[3]]))[0] == 2  # K = 2 1% ahead
    assert policy.best_k(live, np.array([10.0, 10.0, gain[2], gain[3] / 1.01]))[0] == 2  # K = 3 1% ahead: stays
    policy.down_margin = 0.02
    policy.kept_k = 3
    assert policy.best_k(live, np.array([10.0, 10.0, gain[2] / 1.01, gain[3]]))[0] == 3  # the old symmetric margin


def _thin_k3(k3_reaches, k3_accept, k2_reaches=500, k2_accept=(0.9, 0.8)):
    """One slot, k_max 3: worker prior 0.9 / 0.8 / 0.6 per position (1000 / 900 / 100 verifications); the steps after
    a K = 2 step and after a K = 3 step anchored k2_reaches / k3_reaches verifications at the acceptance given (every
    position reached as often)."""
    policy = AdaptivePolicy(1, 3)
    policy.totals[:] = [[1000, 900, 100], [900, 720, 60]]
    policy.k_totals[0, 1, :2], policy.k_totals[1, 1, :2] = k2_reaches, k2_reaches * np.array(k2_accept)
    policy.k_totals[0, 2], policy.k_totals[1, 2] = k3_reaches, k3_reaches * np.array(k3_accept)
    return policy


def test_adaptive_doubts_a_switch_up_to_a_k_its_explorations_barely_measured():
    """K = 3, above the current K = 2, wins at its point estimate by 5% (E(3) 3.33 at 1.45 s against E(2) 2.62 at
    1.2 s), but on 4 verifications anchored by it, shrunk towards the worker prior: at its pessimistic acceptance
    (one standard error down) its rate is 8% below K = 2's, and K = 2 stays (_doubtful_switch). On 4000 anchored
    verifications of about the same acceptance the pessimistic rate is within 1% of the point: it switches. A switch
    down is not doubted: K = 2 on 4 anchored verifications, 6% above the current K = 3 at the point (2% below it at the
    pessimistic bound), is taken."""
    live, seconds = np.array([True]), np.array([1.0, 1.1, 1.2, 1.45])
    thin = _thin_k3(4, (1.0, 1.0, 1.0))
    gain, _ = thin.expected_by_k(thin.acceptance())
    rates = gain[0] / seconds
    assert rates[3] > 1.05 * rates[2] and rates[2] == rates.max(initial=0, where=np.arange(4) < 3)
    thin.kept_k = 2
    assert thin.best_k(live, seconds)[0] == 2
    ample = _thin_k3(4000, (0.9328, 0.8662, 0.7320))
    assert ample.expected_by_k(ample.acceptance())[0][0, 3] == pytest.approx(gain[0, 3], rel=2e-3)
    ample.kept_k = 2
    assert ample.best_k(live, seconds)[0] == 3
    down = _thin_k3(4, (1.0, 1.0, 1.0), k2_reaches=4, k2_accept=(1.0, 1.0))
    down.kept_k = 3
    assert down.best_k(live, np.array([1.0, 1.1, 1.2, 1.55]))[0] == 2


def _leads(accept_of_slot, steps=400, seed=3):
    """An AdaptivePolicy over 8 slots, k_max 2, after `steps` steps of K = 2 in which slot b accepts each draft with
    probability accept_of_slot(b); a slot's request is replaced every 40 steps (staggered)."""
    n, k = 8, 2
    policy = AdaptivePolicy(n, k)
    rng = np.random.default_rng(seed)
    accept = np.array([accept_of_slot(b) for b in range(n)])
    for t in range(steps):
        emitted = 1 + np.cumprod(rng.random((n, k)) < accept[:, None], axis=1).sum(axis=1)
        policy.allowed[:] = k
        policy.observe(_step([True] * n, drafted=[k] * n, emitted=emitted))
        b = t % 40
        if b < n:
            policy.on_clear(b)
            policy.on_insert(b, _request())
    return policy


def test_adaptive_carries_a_slots_lead_only_as_far_as_it_holds():
    """carry(): the slope of a slot's next outcomes on its lead over the worker prior. Where every request accepts
    alike (0.8) a run of rejections is noise: the slope is near 0 and acceptance() keeps a slot near the prior, where
    its plain shrunk estimate (the EMA with prior weight 6) strays; the drain objective read such tail slots' E(2) at
    2.33 on the tiny pair and they then emitted 2.60 a step. Where half the requests accept 0.9 and half 0.45 the lead
    holds: the slope is ~1 and acceptance() is the plain estimate."""
    alike = _leads(lambda b: 0.8)
    assert alike.carry() < 0.3
    prior = alike.prior()
    plain = (alike.slot_counts[1] + alike.prior_weight * prior) / (alike.slot_counts[0] + alike.prior_weight)
    lead, kept = np.abs(plain - prior)[:, 0], np.abs(alike.acceptance() - prior)[:, 0]
    assert lead.max() > 0.05  # the plain estimate strays
    np.testing.assert_allclose(kept, alike.carry() * lead, rtol=1e-9, atol=1e-12)
    assert kept.max() < 0.3 * lead.max()
    apart = _leads(lambda b: 0.9 if b % 2 == 0 else 0.45)
    assert apart.carry() > 0.9
    first = apart.acceptance()[:, 0]
    assert first[0::2].mean() > first[1::2].mean() + 0.15


def test_adaptive_counts_a_requests_first_verification_apart():
    """A request's first verification of drafts after admission goes to first_totals alone (`fresh`, docs/adaptive.md
    "First verifications"); its later ones to the slot and worker counts. The flag follows slot moves; a slot never
    admitted (bare policy) counts every verification."""
    policy = AdaptivePolicy(3, 2)
    policy.on_insert(0, _request())
    policy.on_insert(1, _request())
    policy.on_swap(1, 2)  # slot 2's request is fresh now, slot 1 is free
    policy.observe(_step([True, False, True], drafted=[2, 0, 0], emitted=[1, 0, 1]))  # slot 2: prefill, no drafts
    np.testing.assert_array_equal(policy.totals, 0.0)  # slot 0's first verification (rejected) is apart
    np.testing.assert_array_equal(policy.slot_counts, 0.0)
    np.testing.assert_array_equal(policy.first_totals, [[1.0, 0.0], [0.0, 0.0]])
    policy.observe(_step([True, False, True], drafted=[2, 0, 2], emitted=[3, 0, 3]))  # slot 2's first, slot 0's second
    np.testing.assert_array_equal(policy.totals, [[1.0, 1.0], [1.0, 1.0]])
    np.testing.assert_array_equal(policy.slot_counts[0, 0], [1.0, 1.0])
    np.testing.assert_array_equal(policy.slot_counts[:, 2], 0.0)
    np.testing.assert_array_equal(policy.first_totals, [[2.0, 1.0], [1.0, 1.0]])
    policy.on_move(2, 1)
    policy.observe(_step([False, True, False], drafted=[0, 1, 0], emitted=[0, 1, 0]))  # moved slot: counted now
    np.testing.assert_array_equal(policy.slot_raw[:, 1], [[1.0, 0.0], [0.0, 0.0]])
    assert not policy.fresh.any()
    bare = AdaptivePolicy(1, 2)
    bare.observe(_step([True], drafted=[2], emitted=[1]))
    np.testing.assert_array_equal(bare.totals, [[1.0, 0.0], [0.0, 0.0]])


def _cost(slots, drafts, substeps, seconds, verify=0.0):
    return StepCost(num_slots=slots, num_drafts=drafts, num_substeps=substeps, seconds=seconds, verify_seconds=verify)


def test_step_cost_model_predicts_unseen_batch_sizes_from_near_ones():
    """Per K a local linear fit in ln B: costs observed at batch 8 and 32 (linear in ln B: 1 ms + 2 ms per doubling,
    plus 3 ms per K) give batch 16 between them exactly; K is free-form (K = 2 costs what it costs)."""
    model = StepCostModel()

    def true(b, k):
        return 1e-3 + 2e-3 * np.log2(b) + 3e-3 * k + (5e-3 if k == 2 else 0.0)

    for b in (8, 32):
        for k in range(3):
            for _ in range(3):
                model.add(k, _cost(b, b * k, k, true(b, k), 0.5 * true(b, k)))
    seconds, verify = model.predict(16, 2)
    np.testing.assert_allclose(seconds, [true(16, k) for k in range(3)], rtol=1e-4)
    np.testing.assert_allclose(verify, [0.5 * true(16, k) for k in range(3)], rtol=1e-4)
    at_8, _ = model.predict(8, 2)  # near rows weigh most: batch 8 is predicted from batch 8
    np.testing.assert_allclose(at_8, [true(8, k) for k in range(3)], rtol=1e-3)


@pytest.mark.parametrize("far", [0.5, 0.0])
def test_step_cost_model_transfers_a_k_seen_only_far_away_from_a_k_seen_near(far):
    """A closed batch drained from 16 slots with K = 1: K = 0 was seen only at 16 slots, K = 1 at 2-16. At 3 slots
    K = 0 is predicted as K = 1's cost there times their ratio at 16 (true: 60 ms + 17 ms a slot, drafts 12% more);
    without the transfer (far = 0) K = 0's own fit holds its 16-slot level and drafting looks 2.5x cheaper than it is."""
    model = StepCostModel(far=far)

    def true(b, k):
        return 1e-3 * (60 + 17 * b * (1 + 0.12 * k))

    for _ in range(6):
        model.add(0, _cost(16, 0, 0, true(16, 0)))
    for b in (16, 16, 12, 8, 6, 4, 3, 3, 2, 2):
        model.add(1, _cost(b, b, 0, true(b, 1)))
    seconds, _ = model.predict(3, 1)
    ratio = seconds[1] / seconds[0]
    if far:
        # 1.10 at 16 slots, K = 1 read from its local fit in ln B there (true at 3 slots: 1.05)
        assert ratio == pytest.approx(true(16, 1) / true(16, 0), rel=0.01)
    else:
        assert ratio < 0.5


def test_step_cost_model_drops_load_spikes_and_keeps_the_window_per_k():
    model = StepCostModel(window=12)
    rng = np.random.default_rng(0)
    for k in range(3):
        for _ in range(8):
            model.add(k, _cost(16, 16 * k, k, 1e-3 * (17 + k) * (1 + 0.01 * rng.standard_normal())))
    model.add(0, _cost(16, 0, 0, 1.0))  # a 60x load spike (a step that waited on something else)
    model.add(0, _cost(16, 0, 0, 0.05))  # a 3x one
    seconds, _ = model.predict(16, 2)
    np.testing.assert_allclose(seconds, [0.017, 0.018, 0.019], rtol=0.02)  # the spikes do not move the fit
    for _ in range(30):
        model.add(1, _cost(16, 16, 1, 6e-3))
    assert len(model.samples[1]) == 12 and len(model.samples[2]) == 8  # K = 2 keeps its evidence


def test_adaptive_explores_each_k_for_a_hold_then_uses_the_model():
    """K = 0 and K = 1 take turns, each held for 2 steps, until both have `need` = 2 steady observations (a step
    whose K equals the previous one's); then the cost model decides: every draft is accepted (E(1) ~ 1.9 with the
    prior) and a K = 1 step costs 1.5x a K = 0 step, so K = 1 wins (~127 against 100 tokens/s)."""
    policy = AdaptivePolicy(1, 1, need=2, hold=2, explore_every=10**9)
    seen = []
    for i in range(12):
        cost = _cost(1, policy.last_k, policy.last_k, 0.01 * (1 + 0.5 * policy.last_k))
        seen.append(int(policy.choose(_step([True], drafted=[1], emitted=[2], cost=cost if i else None))[0]))
    assert seen[:8] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert all(policy.costs.count.get(k, 0) >= 2 for k in (0, 1))
    assert seen[8:] == [1] * 4


def test_adaptive_explores_less_often_while_the_choice_holds():
    """Steps 0-7 build the table (K = 0, 0, 1, 1, ...); then a neighbour (K = 0) is explored at step 8 (8 steps
    after the start), 24 (16 later: the first exploration confirmed K = 1, which costs 1.5x and brings 0.9
    tokens), 56 and 88 (32 later: capped at `explore_max`); when the costs change so that K = 0 wins, the interval
    is back to `explore_every`. (admit_min_reaches = 0, settle_costs = 0: the acceptance and cost evidence the
    back-off waits for are other tests' subjects.)"""
    policy = AdaptivePolicy(1, 1, need=2, hold=2, explore_every=8, explore_max=32, admit_min_reaches=0, settle_costs=0)
    seen, intervals = _run_explorations(policy, 120, 0.5)
    explored = [i for i in range(8, len(seen)) if seen[i] == 0 and seen[i - 1] == 1]  # K = 0 holds after the table
    assert explored == [8, 24, 56, 88] and seen[8:10] == [0, 0], explored
    # K = 1 now costs 3x (a change of K's own cost, not of the load): the cost model reads the other K through their
    # ratios to the K being run (StepCostModel, "Paired costs"), so the explorations of K = 0 move the choice once
    # their new ratios outnumber the old in the pair's rows (7 explorations, 32 steps apart)
    _, intervals = _run_explorations(policy, 260, 2.0)
    assert policy.kept_k == 0 and 8 in intervals  # the choice to K = 0, and the interval restarts from explore_every


def test_adaptive_keeps_exploring_until_the_acceptance_rests_on_evidence():
    """Regression: SmolLM2's MTP head at batch 1 settled on K = 0 from a few early verifications (position 1 read
    0.27, held-out 0.52) and then explored every 64, 128, 256 steps, gathering almost no acceptance data: 0.81x of
    fixed k = 2. The interval now doubles only once the totals hold admit_min_reaches position-1 verifications; here
    the 120 steps give about 60, under the 1000 asked for, so explorations stay 8 steps apart."""
    policy = AdaptivePolicy(1, 1, need=2, hold=2, explore_every=8, explore_max=32, admit_min_reaches=1000)
    seen, intervals = _run_explorations(policy, 120, 0.5)
    explored = [i for i in range(8, len(seen)) if seen[i] == 0 and seen[i - 1] == 1]
    assert explored[:4] == [8, 16, 24, 32] and set(intervals) == {8}, (explored, set(intervals))


def _run_explorations(policy, steps, k1_factor):
    """Drives `policy` over 1-slot steps where K = 1 costs (1 + k1_factor) x K = 0 and a draft is always accepted:
    ([K chosen per step], [explore_interval after each step])."""
    seen, intervals = [], []
    for _ in range(steps):
        cost = StepCost(num_slots=1, num_drafts=policy.last_k, num_substeps=policy.last_k,
                        seconds=0.01 * (1 + k1_factor * policy.last_k))
        seen.append(int(policy.choose(_step([True], drafted=[1], emitted=[2], cost=cost))[0]))
        intervals.append(policy.explore_interval)
    return seen, intervals


def _settled_at(batch, k_max=2, n=4, reaches=None):
    """An AdaptivePolicy whose cost model saw `need` steady steps of every K at `batch` slots, each draft costing a
    whole step (K = 0 wins at any acceptance: E(K) < 1 + K), and whose totals hold `reaches` (default: the
    policy's admit_min_reaches) verifications of every draft position, half of them accepted (prior 0.5)."""
    policy = AdaptivePolicy(n, k_max)
    for k in range(k_max + 1):
        for _ in range(policy.need):
            policy.costs.add(k, _cost(batch, batch * k, k, 0.01 * (1 + k)))
    policy.total_reaches[:] = policy.admit_min_reaches if reaches is None else reaches
    policy.total_successes[:] = policy.total_reaches / 2
    return policy


def test_adaptive_admits_draftless_only_on_enough_acceptance_evidence():
    """Regression: SmolLM2's MTP head at batch 1 (held-out P1 = 0.52) was admitted draft-less for good after one
    request's exploration, its first few verifications reading 0.27. Costs that settle K = 0 are not enough: the
    worker totals must also hold admit_min_reaches verifications of draft position 1."""
    policy = _settled_at(32, reaches=AdaptivePolicy(1, 1).admit_min_reaches - 1)
    policy.on_insert(0, _request())
    assert policy.admit(0, 32) and not policy.draftless[0]
    policy.total_reaches[0] += 1
    policy.on_insert(1, _request())
    assert not policy.admit(1, 32) and policy.draftless[1]


def test_step_cost_model_support_counts_near_observations():
    """support = summed kernel weight exp(-ln(B_i / B)^2 / (2 * 0.35^2)): 3 rows at B count 3 there, 3 x 0.51 =
    1.52 at 1.5 B (ln 1.5 = 1.16 bandwidths), 0.001 at 4 B (3.96 bandwidths)."""
    model = StepCostModel()
    for k in range(2):
        for _ in range(3):
            model.add(k, _cost(16, 16 * k, k, 0.01))
    np.testing.assert_allclose(model.support(16, 1), [3.0, 3.0])
    np.testing.assert_allclose(model.support(24, 1), 3 * np.exp(-0.5 * (np.log(1.5) / 0.35) ** 2))
    assert model.support(64, 1).max() < 0.01


def test_step_cost_model_relative_costs_survive_a_load_change():
    """K = 0, 1, 2 cost 10, 20, 30 ms at batch 32; then the machine gets twice as busy while only K = 0 runs (the
    draft-less regime: nothing else can be measured). `predict` reads K = 1 and 2 through their pairs (K = 1 with
    K = 0, K = 2 with K = 1, from the first steps) and `predict_relative` through K = 0's cost at their time: both keep
    1 : 2 : 3 at the new cost, not K = 0 at 20 ms beside K = 1's old 20 ms (drafting would look free)."""
    model = StepCostModel()
    for k in range(3):
        for _ in range(3):
            model.add(k, _cost(32, 32 * k, k, 0.01 * (1 + k)))
    for _ in range(40):
        model.predict(32, 2)  # the policy predicts at the live batch size every step
        model.add(0, _cost(32, 0, 0, 0.02))
    np.testing.assert_allclose(model.predict(32, 2)[0], [0.02, 0.04, 0.06], rtol=1e-6)
    np.testing.assert_allclose(model.predict_relative(32, 2), [0.02, 0.04, 0.06], rtol=1e-6)


@pytest.mark.parametrize("load,expected", [(1.35, [13.5, 24.3, 35.1]), (1.1, [11.0, 18.0, 26.0])])
def test_step_cost_model_reads_an_unchained_k_relative_to_k0_now(load, expected):
    """K = 0, 1, 2 cost 10, 18, 26 ms at batch 32, then only K = 0 runs while the load moves by `load`. No chain
    (pair_support inf): K = 1 and 2 are read as T(32, 0) now times their ratio to T(32, 0) at their time when that
    moves them by more than `rescale_beyond` (1.2): after 1.35x, 1.8 and 2.6 x 13.5 ms (their own fits, 18 and 26 ms,
    would make drafting look 1.35x cheaper than it is); after 1.1x, within the noise of the reference, their own fits.
    rescale_beyond inf: the own fits at 1.35x too."""
    for beyond, want in ((1.2, expected), (float("inf"), [10.0 * load, 18.0, 26.0])):
        model = StepCostModel(pair_support=float("inf"), rescale_beyond=beyond)
        for k, ms in enumerate((10.0, 18.0, 26.0)):
            for _ in range(3):
                model.add(k, _cost(32, 32 * k, k, ms / 1000))
        for _ in range(40):
            model.add(0, _cost(32, 0, 0, 0.01 * load))
        np.testing.assert_allclose(model.predict(32, 2)[0] * 1000, want, rtol=1e-6)


def test_adaptive_stays_draftless_when_the_load_changes_while_only_k0_runs():
    """Draft-less admission at batch 32 holds after the machine got twice as busy during K = 0 steps: judged on the
    seconds as measured, K = 1 (1.5 tokens at the prior acceptance 0.5, for its old 20 ms) would beat K = 0 (1 token for
    20 ms now)."""
    policy = _settled_at(32)
    policy.on_insert(0, _request())
    assert not policy.admit(0, 32)
    for _ in range(40):
        policy.costs.predict(32, 2)
        policy.costs.add(0, _cost(32, 0, 0, 0.02))
    policy.on_insert(1, _request())
    assert not policy.admit(1, 32)


@pytest.mark.parametrize("remaining", [None, [64, 64, 64, 64]], ids=["rate", "drain"])
def test_adaptive_admits_draftless_only_where_no_drafts_wins_at_the_optimistic_acceptance(remaining):
    """Draft-less admission is irreversible, so K = 0 must win at each K's optimistic acceptance
    (optimistic_prior_by_k). K = 1 costs 1.4x K = 0 and position 1 is accepted 0.35 of the time: at the point estimate K = 0 wins (1.35 tokens
    for 1.4x), but with few verifications of steps after K = 1 its bound is 0.55 and K = 1 may win: not draft-less
    (SmolLM2 at 4 slots: 0.54 from the warm-up, 0.61 once K = 1 ran, and fixed k = 1 at 1.05-1.08x of `none`). Once
    10,000 such verifications hold 0.35, draft-less."""
    policy = AdaptivePolicy(4, 1)
    for _ in range(policy.need):
        for k in range(2):
            policy.costs.add(k, _cost(4, 4 * k, k, 0.01 * (1 + 0.4 * k)))
    policy.total_reaches[:] = 1000
    policy.total_successes[:] = 350
    rem = None if remaining is None else np.array(remaining)
    policy.on_insert(0, _request())
    assert policy.admit(0, 4, rem) and not policy.draftless[0]
    policy.k_reaches[:] = policy.total_reaches[:] = 10000
    policy.k_successes[:] = policy.total_successes[:] = 3500
    policy.on_insert(1, _request())
    assert not policy.admit(1, 4, rem) and policy.draftless[1]


def _k2_unexplored(k2_cost, k1_cost=2.0):
    """A k_max = 2 AdaptivePolicy at 4 slots like the tiny pair at 64: steady costs T(4, K) = 10 ms x (1, k1_cost,
    k2_cost), prior acceptance 0.71 / 0.87 from 10,000 verifications, K = 1's anchored acceptance known as well (a
    batch at K = 0 explores it), K = 2's never measured (+-0.16 / +-0.12 at one standard error)."""
    policy = AdaptivePolicy(4, 2)
    for _ in range(policy.need):
        for k, cost in enumerate((1.0, k1_cost, k2_cost)):
            policy.costs.add(k, _cost(4, 4 * k, k, 0.01 * cost))
    policy.total_reaches[:] = 10000
    policy.total_successes[:] = [7100, 8700]
    policy.k_reaches[0] = 10000
    policy.k_successes[0] = [7100, 8700]
    return policy


def test_adaptive_admits_draftless_where_the_regret_of_an_unexplored_k_is_small():
    """K = 2 at 2.67x a step emits 2.33 tokens at the point estimate (12.7% below K = 0's rate), 2.73 at both
    positions' optimistic acceptance (2% above): at that bound it is not settled, and a batch at K = 0 explores only
    K = 1, so K = 2's doubt would never shrink and every batch would keep its drafts (the tiny pair at 64 slots:
    0.93x of `none`). Its regret, the expected gain over K = 0 with that doubt, is 1.7% of the rate, below the switch
    margin and what a drafting batch's explorations of K = 1 cost where K = 0 wins (2 x 1.0 / 32 x 0.8): draft-less.
    With no margin and explorations every 512 steps (0.3%) the drafts are kept; so they are where K = 2 costs 1.5x
    (its rate 55% above K = 0's)."""
    policy = _k2_unexplored(2.67)
    assert policy.explore_overhead(4) == pytest.approx(2 * 1.0 / 32)
    policy.on_insert(0, _request())
    assert not policy.admit(0, 4) and policy.draftless[0]
    policy = _k2_unexplored(2.67)
    policy.switch_margin, policy.explore_interval = 0.0, 512
    policy.on_insert(0, _request())
    assert policy.admit(0, 4) and not policy.draftless[0]
    policy = _k2_unexplored(1.5)
    policy.on_insert(0, _request())
    assert policy.admit(0, 4) and not policy.draftless[0]


def test_expected_excess_by_hand():
    """(E[max(X, 0)], P(X > 0)) of a normal X: (sd phi(0), 0.5) at mean 0; mean Phi(mean / sd) + sd phi(mean / sd)
    elsewhere (mean 1, sd 1: 0.8413 + 0.2420); (max(mean, 0), [mean > 0]) at sd 0."""
    excess, positive = expected_excess(np.array([0.0, 1.0, -3.0, 0.5]), np.array([1.0, 1.0, 0.0, 0.0]))
    np.testing.assert_allclose(excess, [0.398942, 1.083315, 0.0, 0.5], atol=1e-6)
    np.testing.assert_allclose(positive, [0.5, 0.841345, 0.0, 1.0], atol=1e-6)


def test_step_cost_model_relative_error():
    """1.4826 x the weighted median of |T_i / T - 1| over sqrt(support): four steps of 83, 77, 109, 89 ms at one batch
    size (fit 83 ms: residuals 0, 0.072, 0.313, 0.072) give 1.4826 x 0.072 / 2; equal steps give 0."""
    noisy, steady = StepCostModel(), StepCostModel()
    for ms in (83, 77, 109, 89):
        noisy.add(0, _cost(4, 0, 0, ms / 1000))
        steady.add(0, _cost(4, 0, 0, 0.0145))
    np.testing.assert_allclose(noisy.predict(4, 0)[0], [0.083])  # 109 ms left out (an outlier)
    np.testing.assert_allclose(noisy.relative_error(4, 0), [1.4826 * (1 - 77 / 83) / 2])
    np.testing.assert_allclose(steady.relative_error(4, 0), [0.0], atol=1e-12)


def test_adaptive_admits_draftless_only_where_no_drafts_wins_at_the_costs_lower_bound():
    """Draft-less admission also reads each K >= 1's cost at its lower bound (relative_error, `confidence` standard
    errors down): K = 1 seen in four steps of 13, 17, 12.5, 15.5 ms (fit 14.3 ms, 7.7% error) against K = 0's 10 ms,
    acceptance 0.38 known to 1e8 verifications: 1.38 tokens for 1.43x is K = 0's by 3.4% at the point estimate, but
    K = 1's at 13.2 ms: not draft-less. Twelve steps of 14.5 ms: draft-less. (SmolLM2 at 4 slots read T(4, 1) /
    T(4, 0) 1.54-1.85 from the warm-up's few K = 1 steps, 1.42 once paired explorations measured it.)"""
    for k1_ms, draftless in (([13, 17, 12.5, 15.5], False), ([14.5] * 12, True)):
        policy = AdaptivePolicy(4, 1)
        for _ in range(12):
            policy.costs.add(0, _cost(4, 0, 0, 0.010))
        for ms in k1_ms:
            policy.costs.add(1, _cost(4, 4, 1, ms / 1000))
        policy.total_reaches[:] = policy.k_reaches[:] = 1e8
        policy.total_successes[:] = policy.k_successes[:] = 0.38e8
        policy.on_insert(0, _request())
        assert policy.admit(0, 4) != draftless and policy.draftless[0] == draftless


def test_adaptive_admits_draftless_only_where_no_drafts_is_settled():
    """Draft-less (cap 0, flagged) only when every K has `need` steady observations near the batch size and K = 0
    wins there by the switch margin; not at a batch size the observations do not reach (an extrapolation), not
    before the model is ready, never a pinned (sampled, rejection) request; an override of 0 is no admission but
    cannot draft either."""
    policy = _settled_at(32)
    policy.on_insert(0, _request())
    assert not policy.admit(0, 32)
    assert policy.cap[0] == 0 and policy.draftless[0] and policy.num_draftless == 1
    policy.on_insert(1, _request())
    assert policy.admit(1, 4) and policy.cap[1] == 2  # batch 4: no observation within reach of it
    sampled = SlotRequest(req_id="s", prompt_token_ids=[1, 2], max_tokens=4, temperature=0.8)
    pinned = _settled_at(32)
    pinned.pin_sampled = True
    pinned.on_insert(2, sampled)
    assert pinned.admit(2, 32) and not pinned.draftless[2]
    policy.on_insert(3, _request(0))
    assert not policy.admit(3, 32) and not policy.draftless[3] and policy.num_draftless == 1
    fresh = AdaptivePolicy(4, 2)  # no observation yet
    fresh.on_insert(0, _request())
    assert fresh.admit(0, 32)
    cheap = AdaptivePolicy(4, 2)  # drafts nearly free: K = 2 wins, nothing is admitted draft-less
    for k in range(3):
        for _ in range(3):
            cheap.costs.add(k, _cost(32, 32 * k, k, 0.01 * (1 + 0.05 * k)))
    cheap.on_insert(0, _request())
    assert cheap.admit(0, 32)


def _tied_at(batch, k1_seconds):
    """A k_max = 2 AdaptivePolicy settled at `batch` slots (need steady steps per K, admit_min_reaches verifications,
    prior acceptance 0.5, and per anchoring k so many verifications at 0.5 that its optimistic bound is 0.5 too):
    K = 0 costs 10 ms, K = 1 `k1_seconds`, K = 2 20 ms."""
    policy = AdaptivePolicy(batch, 2)
    for k, seconds in enumerate((0.010, k1_seconds, 0.020)):
        for _ in range(policy.need):
            policy.costs.add(k, _cost(batch, batch * k, k, seconds))
    policy.total_reaches[:] = policy.admit_min_reaches
    policy.total_successes[:] = policy.total_reaches / 2
    policy.k_reaches[:] = 1e8
    policy.k_successes[:] = policy.k_reaches / 2
    return policy


def test_adaptive_admits_draftless_on_the_drain_objective_when_the_batch_drains():
    """The tiny pair's closed batch of 16 requests: the rate at the prior ties K = 1 with K = 0 (1.5 tokens for 15 ms
    against 1 for 10 ms), so admission on the rate objective keeps drafts, and the steps then explore and pay the
    policy's bookkeeping (0.916x of no speculation in the bench). When nothing waits, the steps are chosen by the time
    to drain the batch, and so is admission: 96 tokens a slot take 96 steps at K = 0 (0.96 s) and ~64 + the spread of
    the slowest of 16 at K = 1 (5% longer), so the request is admitted draft-less. Cheap drafts (K = 1 at 10.5 ms)
    drain faster, and the request keeps them; K = 0 within 2% of the fastest K is a tie, which goes to no drafts."""
    remaining = np.full(16, 96)
    tied = _tied_at(16, 0.015)
    drain = tied.drain_seconds(np.ones(16, dtype=bool), remaining)
    assert drain[1] > (1 + tied.switch_margin) * drain[0]
    tied.on_insert(0, _request())
    assert tied.admit(0, 16) and not tied.draftless[0]  # open batch (requests wait): the rate objective, a tie
    tied.on_clear(0)
    for slot in range(16):
        tied.on_insert(slot, _request())
    assert not tied.admit(0, 16, remaining) and tied.draftless[0]
    remaining_one = np.zeros(16, dtype=np.int64)
    remaining_one[1] = 96
    assert tied.admit(1, 1, remaining_one) and not tied.draftless[1]  # one slot left: the rate objective's choice
    cheap = _tied_at(16, 0.0105)
    for slot in range(16):
        cheap.on_insert(slot, _request())
    assert cheap.admit(0, 16, remaining) and not cheap.draftless[0]
    # a near tie (K = 1 drains 1% sooner) goes to no drafts: admitted with drafts, the batch would pay explorations
    # and the policy's per-step work for its whole drain; 3% sooner keeps the drafts
    for k1_seconds, draftless in ((0.0141, True), (0.0137, False)):
        near = _tied_at(16, k1_seconds)
        drain = near.drain_seconds(np.ones(16, dtype=bool), remaining)
        assert (drain[1] / drain[0] > 1 / (1 + near.switch_margin)) == draftless, drain
        for slot in range(16):
            near.on_insert(slot, _request())
        assert near.admit(0, 16, remaining) != draftless and near.draftless[0] == draftless


def test_adaptive_admission_prices_the_draft_prefill_of_the_prompts_to_come():
    """A draining batch of 16 where K = 1 drains 3% sooner than K = 0 (0.96 s) keeps its drafts; priced at 3e-5 s a
    prompt token (costs.prefill_per_token), 100-token prompts still to prefill add 0.048 s to every K >= 1, and the
    request is admitted draft-less. Prompts already prefilled (prompt_left 0) and those of slots admitted in an earlier
    step (their drafts were decided then) cost this decision nothing."""
    remaining, prompts = np.full(16, 96), np.full(16, 100)

    def policy(prefill_per_token):
        near = _tied_at(16, 0.0137)
        near.costs.prefill_per_token = prefill_per_token
        for slot in range(16):
            near.on_insert(slot, _request())
        return near

    assert policy(0.0).admit(0, 16, remaining, prompts)
    assert not policy(3e-5).admit(0, 16, remaining, prompts)
    assert policy(3e-5).admit(0, 16, remaining, np.zeros(16, dtype=np.int64))
    earlier = policy(3e-5)
    earlier.admitted[1:] = True  # admitted with drafts in earlier steps: one prompt's prefill is left to decide
    assert earlier._draft_prefill_seconds(prompts) == pytest.approx(3e-3)
    assert earlier.admit(0, 16, remaining, prompts) and earlier.admitted[0]


def test_adaptive_admissions_of_one_step_share_one_decision(monkeypatch):
    """A step admitting 16 requests into a draining batch predicts the drain once (~0.2 ms at 64 slots; per admission
    it was 12 ms a batch of 64), and decides afresh after the next choose or on new evidence."""
    policy = _tied_at(16, 0.015)
    calls = []
    decide = policy._no_drafts_verdict
    monkeypatch.setattr(policy, "_no_drafts_verdict", lambda *a: (calls.append(a), decide(*a))[1])
    remaining = np.full(16, 96)
    for slot in range(16):
        policy.on_insert(slot, _request())
    assert not any(policy.admit(slot, 16, remaining) for slot in range(16)) and policy.draftless.all()
    assert len(calls) == 1
    policy.on_clear(3)
    policy.on_insert(3, _request())
    policy.costs.add(0, _cost(16, 0, 0, 0.010))  # new evidence: decided again
    policy.admit(3, 16, remaining)
    assert len(calls) == 2
    policy.on_clear(4)
    policy.on_insert(4, _request())
    policy.choose(_step([True] * 16, emitted=[1] * 16))
    policy.admit(4, 16, remaining)
    assert len(calls) == 3


def test_adaptive_draftless_flag_follows_the_slot_moves():
    policy = _settled_at(32)
    policy.on_insert(1, _request())
    policy.admit(1, 32)
    policy.on_swap(1, 3)
    np.testing.assert_array_equal(policy.draftless, [False, False, False, True])
    np.testing.assert_array_equal(policy.cap, [2, 2, 2, 0])
    policy.on_move(3, 0)
    np.testing.assert_array_equal(policy.draftless, [True, False, False, False])
    np.testing.assert_array_equal(policy.cap, [0, 2, 2, 2])
    policy.on_clear(0)
    assert not policy.draftless.any() and (policy.cap == 2).all()


def test_adaptive_probes_a_settled_k0_once_no_k_cost_is_recent():
    """Admission probes a settled K = 0 (AdaptivePolicy._probed) once no K >= 1 cost was filed near the batch size for
    `probe_after` steps: the step's requests are admitted with drafts (one probe), the batch then holds the runner-up
    K = 1 for `probe_hold` steps, whose first steady step replaces K = 1's old rows at that batch size, and the next
    admission decides on the fresh costs: still K = 0 (K = 1 now costs 2.5x a step), so draft-less, and the interval
    doubles."""
    policy = _settled_at(8, n=8)
    policy.clock = policy.probe_after  # no K >= 1 cost filed for probe_after steps
    for slot in range(8):
        policy.on_insert(slot, _request())
        assert policy.admit(slot, 8) and not policy.draftless[slot]
    assert policy.num_probes == 1 and policy.probe_k == 1 and policy.probe[:2] == (8, 1)
    ks, live = [], [True] * 8
    for _ in range(policy.probe_hold + 2):
        k = policy.last_k
        cost = _cost(8, 8 * k, k, 0.01 * (1 + 1.5 * k))  # K = 1 at 25 ms now (20 in the rows it replaces)
        ks.append(int(policy.choose(_step(live, drafted=[k] * 8, emitted=[1] * 8, cost=cost)).max()))
    assert ks[:policy.probe_hold] == [1] * policy.probe_hold and policy.held is None
    assert [row[1] for row in policy.costs.samples[1]] == [0.025] * (policy.probe_hold - 1)  # old rows replaced
    policy.on_clear(0)
    policy.on_insert(0, _request())
    assert not policy.admit(0, 8) and policy.draftless[0]
    assert policy.probe is None and policy.probe_interval == 2 * policy.probe_after and policy.num_probes == 1
    fresh = _settled_at(8, n=8)  # K >= 1 costs recent enough: no probe
    fresh.clock = fresh.probe_after - 1
    fresh.on_insert(0, _request())
    assert not fresh.admit(0, 8) and fresh.num_probes == 0


def test_adaptive_with_only_draftless_slots_chooses_nothing_and_files_only_k0():
    """A batch whose live slots are all draft-less: k_b = 0 everywhere, no exploration (the hold would draft
    nothing), and its steps file K = 0 costs; a batch mixing draft-less and drafting slots files no K >= 1 cost
    (it drafted for fewer slots than T(B, K) assumes)."""
    policy = _settled_at(2, k_max=1, n=2)
    policy.explore_every = policy.explore_interval = 1  # would explore at every step
    for slot in range(2):
        policy.on_insert(slot, _request())
        policy.admit(slot, 2)
    counts = dict(policy.costs.count)
    built = []  # the worker's remaining tokens are built only when choose reads them: the no-drafts path does not

    def remaining():
        built.append(1)
        return np.full(2, 50)

    for _ in range(6):
        step = dataclasses.replace(_step([True, True], emitted=[1, 1], cost=_cost(2, 0, 0, 0.01)), remaining=remaining)
        assert policy.choose(step).tolist() == [0, 0]
    assert policy.num_choices == 0 and policy.costs.count[1] == counts[1] and policy.costs.count[0] > counts[0]
    assert not built
    policy.on_clear(1)
    policy.on_insert(1, _request())  # a drafting slot beside the draft-less one
    policy.admitted[1] = True
    policy.held = (1, 10**6)  # hold K = 1: slot 1 drafts one, slot 0 none
    for _ in range(6):
        out = policy.choose(_step([True, True], drafted=[0, 1], emitted=[1, 2], cost=_cost(2, 1, 1, 0.012)))
        assert out.tolist() == [0, 1]
    assert policy.costs.count[1] == counts[1]


def _stretches_of_text(seed=5):
    """One slot, k_max 2, requests in turn: four on moderate text (acceptance 0.7) alternating K = 1 and 2, then
    K = 2 on a hard prompt (0.35), then K = 1 on two easy ones (0.9): as SmolLM2's MTP head at one slot chose K = 1
    on a prompt it found hard and then ran it through easy ones."""
    policy = AdaptivePolicy(1, 2)
    rng = np.random.default_rng(seed)
    for k, accept, n in [(1, 0.7, 24), (2, 0.7, 24)] * 2 + [(2, 0.35, 40), (1, 0.9, 40), (1, 0.9, 40)]:
        policy.on_insert(0, _request())
        for _ in range(n):
            emitted = 1 + int(np.cumprod(rng.random(k) < accept).sum())
            policy.allowed[:] = k
            policy.observe(_step([True], drafted=[k], emitted=[emitted]))
        policy.on_clear(0)
    set_acceptance(policy, [[0.85, 0.8]])  # the slot now
    policy.kept_k = 1
    return policy


def test_adaptive_reads_a_k_against_the_stretch_it_ran_in():
    """The rows by anchoring k are read against what the slots accepted when those steps ran (prior_by_k's
    k_shift): K = 2's steps on the hard prompt accepted about what that prompt's slot did, so K = 2 is not blamed for
    the prompt, and at T(1, 2) / T(1, 1) = 1.14 it beats K = 1 by 12% at the slot's acceptance now. Without the
    shift (the rows read against the pooled prior) K = 2 reads position 1 at 0.60 against K = 1's 0.79, within the
    margin of K = 1: K = 1 stays (0.90 of fixed k = 3 over the bench's last prompts)."""
    live, seconds = np.array([True]), np.array([1.0, 1.1, 1.25])
    policy = _stretches_of_text()
    assert policy.k_shift[1, 0] < -2 < 2 < policy.k_shift[0, 0]  # K = 2 ran where the slot accepted less
    by_k = policy.prior_by_k()
    assert abs(by_k[1, 0] - by_k[0, 0]) < 0.1
    rates = policy.expected_by_k(policy.acceptance())[0][0] / seconds
    assert rates[2] > 1.1 * rates[1]
    assert policy.best_k(live, seconds)[0] == 2
    policy._k_shift[:] = 0.0  # the rows against the pooled prior alone
    policy.kept_k = 1
    by_k = policy.prior_by_k()
    assert by_k[1, 0] < 0.65 < 0.75 < by_k[0, 0]
    assert policy.best_k(live, seconds)[0] == 1


def test_adaptive_explores_a_doubted_k_long_enough_to_settle_the_doubt():
    """A switch up that the doubt held back (_doubtful_switch) sends the next exploration to that K, for
    1 + ceil(doubt_reaches / B) steps (7 at one slot, 3 at four): its anchored evidence is what the doubt lacks. Once
    used, the next exploration is a neighbour's again."""
    live, seconds = np.array([True]), np.array([1.0, 1.1, 1.2, 1.45])
    for num_live, hold in ((1, 7), (4, 3)):
        thin = _thin_k3(4, (1.0, 1.0, 1.0))
        thin.kept_k = thin.last_k = 2
        assert thin.best_k(live, seconds)[0] == 2 and thin.doubted == 3
        thin.num_choices = thin.explore_interval  # an exploration is due
        assert thin._exploration(True, num_live) == (3, hold)
        thin.num_choices += thin.explore_interval
        assert thin._exploration(True, num_live) == (1, thin.hold)  # below, in turn
    ample = _thin_k3(4000, (0.9328, 0.8662, 0.7320))
    ample.kept_k = 2
    assert ample.best_k(live, seconds)[0] == 3 and ample.doubted is None


def _lookup_stretches(by_anchor):
    """One slot, k_max 3, K = 2 current. The worker prior reads 0.55 / 0.67 / 0.67 per position; the steps after a
    K = 3 step read position 1 at 0.38 (a lookup's K = 3 turns ran in a stretch of new text: SmolLM2's n-gram at one
    slot); the slot's own counts follow the copied span it is in now (0.8 a position)."""
    policy = AdaptivePolicy(1, 3, by_anchor=by_anchor)
    policy.totals[:] = [[200, 120, 90], [110, 80, 60]]
    policy.k_totals[0, 0, :1], policy.k_totals[1, 0, :1] = 60, 33
    policy.k_totals[0, 1, :2], policy.k_totals[1, 1, :2] = 60, (33, 26)
    policy.k_totals[0, 2], policy.k_totals[1, 2] = (34, 13, 9), (13, 8, 6)
    set_acceptance(policy, [[0.8, 0.8, 0.8]])
    policy.kept_k = 2
    return policy


def test_lookup_acceptance_is_not_read_by_anchor():
    """A lookup proposer's policy reads every K at the pooled acceptance (by_anchor off; docs/adaptive.md "Anchors
    and lookups"): in a copied span (slot acceptance 0.8, T(1, 3) 2% above T(1, 2)) it switches up to K = 3, whose
    rate is 19% above K = 2's. Read by anchor, the low rows of K = 3's turns cut its rate to 6% above K = 2's, and the
    switch up is doubted: K = 2 stays. build_policy reads by anchor for MTP alone."""
    live, seconds = np.array([True]), np.array([1.0, 1.05, 1.10, 1.12])
    pooled, anchored = _lookup_stretches(False), _lookup_stretches(True)
    rates = pooled.expected_by_k(pooled.acceptance())[0][0] / seconds
    assert rates[3] > 1.15 * rates[2]
    assert pooled.best_k(live, seconds)[0] == 3
    rates = anchored.expected_by_k(anchored.acceptance())[0][0] / seconds
    assert rates[2] < rates[3] < 1.1 * rates[2]
    assert anchored.best_k(live, seconds)[0] == 2
    for method, by_anchor in (("ngram", False), ("suffix", False), ("mtp", True)):
        spec = dict(method=method, num_speculative_tokens=3, policy="adaptive")
        if method == "mtp":
            spec |= dict(model="builtin:tiny-mtp", num_model_steps=3)
        assert build_policy(SpeculativeConfig(**spec), 4).by_anchor is by_anchor


def test_build_policy_resolves_the_config():
    mtp = dict(method="mtp", model="builtin:tiny-mtp", num_speculative_tokens=3, num_model_steps=2)
    assert isinstance(build_policy(SpeculativeConfig(**mtp), 4), FixedPolicy)
    adaptive = build_policy(SpeculativeConfig(**mtp, policy="adaptive"), 4)
    assert isinstance(adaptive, AdaptivePolicy) and adaptive.k_max == 2  # MTP drafts num_model_steps at most


def test_adaptive_records_finished_requests_and_their_spread_slows_a_drafted_drain():
    """on_clear files the request's own counts (over its whole life) when it has >= 3 verifications of position 1;
    the spread of E(K) over those requests, less the binomial noise of each request's ratios, is how far apart
    requests are, and it lengthens a drain that drafts (the slowest slot is likely one that accepts little) while
    K = 0 needs exactly R steps whatever the acceptance. Two requests at 0.9 / 0.9 and 0 / 0 (10 and 9 verifications):
    E(1) 1.9 and 1.0, variance 0.2025 less half of 0.9 x 0.1 / 10; E(2) 2.71 and 1.0, variance 0.731025 less half of
    1.9^2 x 0.009 + 0.9^2 x 0.01."""
    policy = AdaptivePolicy(4, 2)
    policy.costs = SyntheticCostModel(lambda b, k: 0.01 * (1 + 0.1 * k), k_max=2, ready=True)
    live, left = np.ones(4, dtype=bool), np.full(4, 60)
    before = policy.drain_seconds(live, left)
    policy.slot_raw[:, 0] = [[1.0, 1.0], [1.0, 1.0]]  # one verification: too little to file
    policy.on_clear(0)
    assert policy.profiles == []
    for slot, accepted in ((1, 0.9), (2, 0.0)):
        policy.slot_raw[:, slot] = [[10.0, 9.0], [10.0 * accepted, 9.0 * accepted]]
        policy.on_clear(slot)
    assert len(policy.profiles) == 2
    noise_1, noise_2 = 0.9 * 0.1 / 10, 0.9 * 0.1 / 9
    want = [0.0, np.sqrt(0.2025 - noise_1 / 2), np.sqrt(0.731025 - (1.9 ** 2 * noise_1 + 0.9 ** 2 * noise_2) / 2)]
    np.testing.assert_allclose(policy.population_spread(), want, atol=1e-9)
    after = policy.drain_seconds(live, left)
    assert after[0] == pytest.approx(before[0])  # K = 0: R steps, exactly
    assert after[1] > 1.02 * before[1] and after[2] > 1.02 * before[2]


@pytest.mark.parametrize("seed", range(6))
def test_adaptive_kept_decisions_repeat_what_the_full_choice_gives(seed):
    """_kept_choice (a step that keeps the current decision returns its output without the ~20 numpy calls of the
    full path) and the memo of _no_draft_choice (the last signature's answer) change nothing: over random steps (live
    slots changing, caps set, stretches where no slot may draft, swaps, drains, explorations) the policy chooses
    exactly as one whose shortcut and memo are off, and keeps the same state; and both shortcuts are taken."""
    rng = np.random.default_rng(seed)
    n, k_max = int(rng.integers(1, 9)), int(rng.integers(1, 4))
    fast, full = AdaptivePolicy(n, k_max), AdaptivePolicy(n, k_max)
    full._kept_choice = lambda signature: None
    fresh_check = full._no_draft_choice
    full._no_draft_choice = lambda signature, live: (setattr(full, "_no_drafts", None), fresh_check(signature, live))[1]
    taken, nothing = [], []
    shortcut, memo = fast._kept_choice, fast._no_draft_choice
    fast._kept_choice = lambda signature: (taken.append(shortcut(signature)), taken[-1])[1]
    fast._no_draft_choice = lambda signature, live: (nothing.append(memo(signature, live)), nothing[-1])[1]
    live = np.ones(n, dtype=bool)
    for _ in range(400):
        if rng.random() < 0.05:
            live = rng.random(n) < 0.8
        if rng.random() < 0.03:  # a stretch where no slot may draft (overrides of 0), or its end
            zeros = not fast.cap.any()
            for policy in (fast, full):
                policy.cap[:] = k_max if zeros else 0
        changes = (rng.random() < 0.02, int(rng.integers(n)), int(rng.integers(k_max + 1)), rng.random() < 0.02)
        emitted_draws = rng.integers(1, k_max + 2, n)
        seconds = 0.005 + 1e-4 * rng.random()
        remaining = None if rng.random() < 0.5 else rng.integers(0, 50, n)
        outs = []
        for policy in (fast, full):
            if changes[0]:
                policy.cap[changes[1]] = changes[2]
            if changes[3] and n > 1:
                policy.on_swap(0, n - 1)
            drafted = np.where(live, policy.allowed, 0)
            cost = StepCost(num_slots=max(int(live.sum()), 1), num_drafts=int(drafted.sum()), num_substeps=policy.last_k,
                            seconds=seconds + 1e-3 * policy.last_k, verify_seconds=0.003)
            outs.append(policy.choose(PolicyStep(live=live, drafted=drafted, emitted=np.where(
                live, np.minimum(emitted_draws, drafted + 1), 0), cost=cost, remaining=remaining)))
        np.testing.assert_array_equal(outs[0], outs[1])
        for name in ("allowed", "prev_allowed", "recent_k", "recent_draftless", "num_choices", "last_k", "kept_k",
                     "explore_interval", "num_explorations", "keep_period"):
            np.testing.assert_array_equal(getattr(fast, name), getattr(full, name), err_msg=name)
        assert (fast.decision is None) == (full.decision is None)
        if fast.decision is not None:
            assert fast.decision[1:3] == full.decision[1:3]
            np.testing.assert_array_equal(fast.decision[3], full.decision[3])
    assert sum(out is not None for out in taken) > 100
    assert sum(out is not None for out in nothing) > 10


def test_adaptive_keeps_a_repeated_decision_longer():
    """A decision that repeats the last one made (K and every k_b) is kept twice as many steps as the one before it,
    8 -> 16 -> 32 (redecide_max); one that differs restarts from 8 (redecide_every). Counted by the full decisions
    (best_k calls) over steady 1-slot steps whose drafts are all accepted: K = 1 wins (2 tokens for 1.5x a step)
    until its costs rise to 3x, then K = 0 does."""
    policy = adaptive_with(1, 1, lambda b, k: 0.01 * (1 + 0.5 * k), explore_every=10**9)
    policy.kept_k = 1  # K = 1 chosen already (at the prior, 0.5, the first choice is a tie, which goes to K = 0)
    decided = []
    best_k = policy.best_k
    policy.best_k = lambda *a, **kw: (decided.append((policy.num_choices, policy.keep_period)), best_k(*a, **kw))[1]

    def run(steps):
        for _ in range(steps):
            policy.choose(_step([True], drafted=[policy.last_k], emitted=[policy.last_k + 1]))

    run(100)
    steps = [n for n, _ in decided]
    assert np.diff(steps).tolist() == [8, 16, 32, 32] and policy.last_k == 1, steps
    policy.costs.cost = lambda b, k: 0.01 * (1 + 2.0 * k)
    decided.clear()
    run(60)
    assert policy.last_k == 0
    # the first decision after the change still ran the 32-step period; K = 0 then keeps 8, then 16 steps
    assert [period for _, period in decided][:1] == [32] and np.diff([n for n, _ in decided]).tolist()[:2] == [8, 16]


def test_recent_steps_name_the_k_run_most_and_pair_others_with_its_median():
    """K* is the K most frequent among the last `size` steps, a tie going to the one seen last (kept incrementally:
    checked against a count over the window for random sequences); a step of another K pairs with the median of
    K*'s last `pair_steps` steps at its batch size, once there are 3."""
    rng = np.random.default_rng(0)
    steps, window = RecentSteps(16, 4), collections.deque(maxlen=16)
    assert steps.current_k() is None
    for k in rng.choice([0, 1, 2, 2, 3], 2000):
        steps.append(int(k), 4, 1.0)
        window.append(int(k))
        counts = collections.Counter(window)
        most = max(counts.values())
        assert steps.current_k() == next(kk for kk in reversed(window) if counts[kk] == most)
    paired = RecentSteps(16, 4)
    for seconds in (9.0, 1.0, 2.0):
        paired.append(2, 8, seconds)
    assert paired.pair(2, 8, 5.0)[0] == -1  # K* itself: no pair
    assert paired.pair(1, 8, 1.0) == (2, 0.5)  # against the median of 9, 1, 2
    assert paired.pair(1, 4, 1.0)[0] == -1  # no step of K* at that batch size
