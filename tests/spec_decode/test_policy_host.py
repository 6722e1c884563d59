"""AdaptivePolicy's compiled arithmetic (PolicyHost: per-step counting, E by K, the drain objective) against the
numpy formulas (tests/spec_decode/policy_reference.py, AdaptivePolicy.expected_by_k / acceptance / prior_by_k) on
random states, and its checks on the arrays passed to C."""

import copy
import pickle
import re

import numpy as np
import pytest

from specworker.slot_request import SlotRequest
from specworker.spec_decode.policy import AdaptivePolicy, PolicyStep
from specworker.spec_decode.policy_host import MAX_K, PolicyHost
from tests.spec_decode import policy_reference
from tests.spec_decode.synthetic_costs import SyntheticCostModel

RTOL = 1e-12


def _random_state(policy: AdaptivePolicy, rng: np.random.Generator, *, spread_requests: int = 0) -> None:
    """Counts as a served worker could hold them: reaches >= successes, per position non-increasing; k_shift within
    what the reaches allow (R p + X > 0); carry sums of a few hundred reaches; a pending decay; caps 0..K."""
    n, k = policy.cap.shape[0], policy.k_max
    reaches = np.sort(rng.uniform(0, 40, (n, k)), axis=1)[:, ::-1] * (rng.random((n, 1)) < 0.9)
    policy.slot_counts[0], policy.slot_counts[1] = reaches, reaches * rng.uniform(0, 1, (n, k))
    totals = np.sort(rng.uniform(50, 2000, k))[::-1]
    policy.totals[0], policy.totals[1] = totals, totals * rng.uniform(0.2, 0.95, k)
    k_reaches = rng.uniform(0, 300, (k, k)) * (rng.random((k, k)) < 0.8)
    policy.k_totals[0], policy.k_totals[1] = k_reaches, k_reaches * rng.uniform(0.1, 1.0, (k, k))
    # the slots' lead summed over the reaches: each lead at least -p (an acceptance is at least 0)
    policy.k_shift[:] = k_reaches * policy.prior()[None, :] * rng.uniform(-0.5, 0.5, (k, k))
    x = rng.normal(0, 0.1, 300)
    y = 0.6 * x + rng.normal(0, 0.3, 300)
    policy.carry_totals[:] = (x.sum(), y.sum(), (x * y).sum(), (x * x).sum(), 300.0) if rng.random() < 0.8 else 0.0
    policy._scalars[0] = rng.choice([1.0, 0.92, 0.5])
    policy.cap[:] = rng.integers(0, k + 1, n) if rng.random() < 0.5 else k
    for _ in range(spread_requests):
        r = rng.uniform(3, 40, k)
        policy.add_profile(np.stack([r, r * rng.uniform(0, 1, k)]))
    policy._spread = None


@pytest.mark.parametrize("n,k", [(1, 1), (1, 3), (5, 2), (7, 3), (64, 3), (16, 5)])
@pytest.mark.parametrize("by_anchor", [True, False])
def test_expected_by_k_equals_numpy(n, k, by_anchor):
    """PolicyHost.expected == expected_by_k(acceptance(), prior_by_k / its bounds) over random states."""
    rng = np.random.default_rng(n * 10 + k + by_anchor)
    policy = AdaptivePolicy(n, k, by_anchor=by_anchor)
    for _ in range(20):
        _random_state(policy, rng)
        policy.confidence = rng.choice([0.0, 1.0, 2.0])
        for sign, by_k in ((0, policy.prior_by_k()), (1, policy.optimistic_prior_by_k()),
                           (-1, policy.pessimistic_prior_by_k())):
            gain, reach = policy._expected(sign)
            want_gain, want_reach = policy.expected_by_k(policy.acceptance(), by_k)
            np.testing.assert_allclose(gain, want_gain, rtol=RTOL)
            np.testing.assert_allclose(reach, want_reach, rtol=RTOL, atol=1e-300)


@pytest.mark.parametrize("n,k", [(1, 2), (4, 2), (16, 3), (64, 3), (9, 1), (32, 5)])
def test_drain_seconds_equals_numpy(n, k):
    """drain_seconds (PolicyHost.drain) == the numpy drain, point and optimistic, over random states: one live slot
    and all, remaining 0 (counted as 1) to hundreds, ties in the steps needed (equal remaining), caps 0..K, a
    population spread or none."""
    rng = np.random.default_rng(n * 100 + k)
    policy = AdaptivePolicy(n, k)
    policy.costs = SyntheticCostModel(lambda b, kk: 0.005 + 0.001 * b * (1 + 0.2 * kk), k_max=k, ready=True)
    for trial in range(25):
        _random_state(policy, rng, spread_requests=3 if trial % 2 else 0)
        live = rng.random(n) < rng.choice([0.3, 1.0])
        live[rng.integers(n)] = True
        remaining = rng.choice([0, 1, 7, 40, 40, 300], n) if trial % 3 else np.full(n, 24)
        for optimistic, by_k in ((False, None), (True, policy.optimistic_prior_by_k())):
            got = policy.drain_seconds(live, remaining, optimistic=optimistic)
            want = policy_reference.drain_seconds(policy, live, remaining, by_k)
            np.testing.assert_allclose(got, want, rtol=RTOL)


@pytest.mark.parametrize("by_anchor,fill", [(True, False), (False, False), (True, True)])
def test_each_step_is_counted_as_a_plain_loop_counts_it(by_anchor, fill):
    """observe (PolicyHost.count) over random steps (paused slots, k_b = 0 steps, lookups drafting fewer than
    allowed) with swaps, moves, clears and inserts between them: every count equals counting each step by a plain
    loop over slots and positions (a newly inserted request's first verification of drafts in first_totals alone;
    the carry sums and k_shift from the slot's acceptance above the prior as known before the step)."""
    rng = np.random.default_rng(7 + by_anchor + 2 * fill)
    n, k = 5, 3
    policy = AdaptivePolicy(n, k, by_anchor=by_anchor, counts_fill=fill)
    policy.profiled = fill  # the fill is counted with profiled costs only
    ref = policy_reference.CountingLoop(n, k, decay=policy.decay, prior_weight=policy.prior_weight,
                                        by_anchor=by_anchor)
    for _ in range(300):
        allowed = rng.integers(0, k + 1, n) * (rng.random() < 0.8)
        drafted = np.minimum(allowed, rng.integers(0, k + 1, n))
        emitted = np.where(rng.random(n) < 0.2, 0, np.minimum(rng.integers(1, k + 2, n), drafted + 1))
        policy.allowed = allowed
        policy.observe(PolicyStep(live=np.ones(n, dtype=bool), drafted=drafted, emitted=emitted, cost=None))
        ref.step(allowed, drafted, emitted, fill)
        move, (i, j) = rng.random(), rng.choice(n, 2, replace=False)
        if move < 0.1:
            policy.on_swap(i, j)
            for a in (ref.counts, ref.raw):
                a[:, [i, j]] = a[:, [j, i]]
            for a in (ref.prev, ref.fresh):
                a[[i, j]] = a[[j, i]]
        elif move < 0.15:
            policy.on_move(i, j)
            for a in (ref.counts, ref.raw):
                a[:, j], a[:, i] = a[:, i], 0.0
            for a in (ref.prev, ref.fresh):
                a[j], a[i] = a[i], 0
        elif move < 0.2:
            policy.on_clear(i)
            ref.counts[:, i] = ref.raw[:, i] = 0.0
            ref.prev[i] = ref.fresh[i] = 0
        elif move < 0.25:
            policy.on_insert(i, SlotRequest(req_id="r", prompt_token_ids=[1, 2], max_tokens=4))
            ref.counts[:, i] = ref.raw[:, i] = 0.0
            ref.prev[i], ref.fresh[i] = 0, True
        assert policy.pending_decay == pytest.approx(ref.pending, rel=RTOL)
        np.testing.assert_allclose(policy.slot_counts, ref.counts, rtol=1e-9, atol=1e-12)
        np.testing.assert_array_equal(policy.slot_raw, ref.raw)
        np.testing.assert_array_equal(policy.totals, ref.totals)
        np.testing.assert_array_equal(policy.k_totals, ref.k_totals)
        np.testing.assert_array_equal(policy.first_totals, ref.first_totals)
        np.testing.assert_array_equal(policy.prev_allowed, ref.prev)
        np.testing.assert_array_equal(policy.fresh, ref.fresh)
        np.testing.assert_array_equal(policy._fill, ref.fill)
        np.testing.assert_allclose(policy.k_shift, ref.k_shift, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(policy.carry_totals, ref.carry, rtol=1e-9, atol=1e-9)
    assert ref.carry[4] > 100 and ref.first_totals[0, 0] > 0 and (ref.k_totals[0] > 0).all()
    assert (np.abs(ref.k_shift) > 0).any() == by_anchor and (ref.fill[0] > ref.fill[1]).any() == fill


def test_the_fill_reaches_the_profiled_costs_before_a_choice_reads_them():
    """A lookup's steps that feed fewer drafts than allowed move the cost model's fill (ProfiledCosts.set_fill) by
    the next choice: (fed + 1) / (offered + 1) per position."""
    policy = AdaptivePolicy(2, 2, counts_fill=True)
    told = []
    policy.costs = SyntheticCostModel(lambda b, k: 0.01, k_max=2, ready=True)
    policy.costs.set_fill = told.append
    policy.profiled = True
    live = np.ones(2, dtype=bool)
    policy.allowed = [2, 2]
    policy.observe(PolicyStep(live=live, drafted=np.array([2, 0]), emitted=np.array([3, 1]), cost=None))
    assert not told
    policy._choose(PolicyStep(live=live, drafted=np.zeros(2, np.int64), emitted=np.zeros(2, np.int64), cost=None))
    np.testing.assert_allclose(told[0], [2 / 3, 2 / 3])


def _host(n=3, k=2, **replace):
    arrays = dict(slot_counts=np.zeros((2, n, k)), slot_raw=np.zeros((2, n, k)), totals=np.zeros((2, k)),
                  first_totals=np.zeros((2, k)), k_totals=np.zeros((2, k, k)), k_shift=np.zeros((k, k)),
                  carry=np.zeros(5), fill=np.zeros((2, k)), scalars=np.ones(1), allowed=np.zeros(n, np.int64),
                  prev_allowed=np.zeros(n, np.int64), cap=np.full(n, k, np.int64), fresh=np.zeros(n, bool))
    arrays.update(replace)
    return PolicyHost(**arrays)


@pytest.mark.parametrize("field,value,message", [
    ("drafted", None, "drafted must be a int64[3] array, got NoneType"),
    ("drafted", np.zeros(4, np.int64), "drafted must be a int64[3] array, got int64[4]"),
    ("emitted", np.zeros(3), "emitted must be a int64[3] array, got float64[3]"),
    ("emitted", np.zeros((3, 1), np.int64), "emitted must be a int64[3] array, got int64[3, 1]"),
])
def test_count_names_a_bad_step_array_and_counts_nothing(field, value, message):
    host = _host()
    args = dict(drafted=np.ones(3, np.int64), emitted=np.ones(3, np.int64))
    args[field] = value
    with pytest.raises(ValueError, match=re.escape(message)):
        host.count(args["drafted"], args["emitted"], 0.9, 6.0, by_anchor=True, count_fill=False)
    assert host._arrays["scalars"][0] == 1.0 and not host._arrays["totals"].any()


def test_count_takes_int32_and_lists_as_integers():
    host = _host()
    host._arrays["allowed"][:] = 2
    assert host.count(np.array([2, 0, 1], np.int32), [3, 1, 2], 0.9, 6.0, by_anchor=True, count_fill=False)
    np.testing.assert_array_equal(host._arrays["totals"], [[3, 2], [2, 1]])  # reached 2, 1, 2; accepted 2, 0, 1


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_population_spread_equals_numpy(k):
    """population_spread (PolicyHost.spread) == the numpy formulas over random finished requests: none, one, two, a
    few, a full window and past it (the oldest dropped), positions never reached (read at the prior), requests that
    accept all or nothing, one verification each."""
    rng = np.random.default_rng(k)
    for count in (0, 1, 2, 3, 17, 128, 131, 300):
        policy = AdaptivePolicy(4, k)
        _random_state(policy, rng)
        kept = []
        for _ in range(count):
            r = np.sort(rng.choice([0.0, 1.0, 3.0, 12.0, 40.0, 300.0], k))[::-1]
            s = r * rng.choice([0.0, 1.0, 0.5, rng.uniform()], k)
            evidence = np.stack([r, s])
            policy.add_profile(evidence)
            kept = (kept + [evidence])[-policy.profile_window:]
        want = policy_reference.population_spread(np.array(kept).reshape(-1, 2, k), policy.prior())
        np.testing.assert_allclose(policy.population_spread(), want, rtol=RTOL, atol=1e-12)
        assert len(policy.profiles) == len(kept) and all(np.array_equal(a, b) for a, b in zip(policy.profiles, kept))


def test_spread_refuses_what_c_cannot_read():
    host = _host(k=3)
    assert host.spread(np.zeros((4, 2, 3)), 4).shape == (4,)
    with pytest.raises(ValueError, match=r"profiles must be a float64\[4, 2, 3\] array, got float64\[4, 2, 2\]"):
        host.spread(np.zeros((4, 2, 2)), 2)
    with pytest.raises(ValueError, match=r"profiles must be a float64\[0, 2, 3\] array, got float64\[2, 3\]"):
        host.spread(np.zeros((2, 3)), 2)
    with pytest.raises(ValueError, match=r"count = 5; allowed: an int in 0..4"):
        host.spread(np.zeros((4, 2, 3)), 5)
    with pytest.raises(ValueError, match=r"count = -1; allowed"):
        host.spread(np.zeros((4, 2, 3)), -1)


def test_drain_and_expected_refuse_what_c_cannot_read():
    host = _host()
    gain, reach = host.expected(0, by_anchor=True, prior_weight=6.0, k_prior_weight=8.0, confidence=1.0,
                                carry_prior=2.0)
    live, left = np.array([True, False, True]), np.array([5, 0, 9])
    seconds, spread, scores = np.ones((2, 3)), np.zeros(3), np.array([-0.5, 0.5])
    assert host.drain(gain, reach, live, left, seconds, spread, scores, 6.0).shape == (3,)
    with pytest.raises(ValueError, match="at least one live slot"):
        host.drain(gain, reach, np.zeros(3, bool), left, seconds, spread, scores, 6.0)
    with pytest.raises(ValueError, match=r"seconds must be a float64\[2, 3\] array, got float64\[3, 3\]"):
        host.drain(gain, reach, live, left, np.ones((3, 3)), spread, scores, 6.0)
    with pytest.raises(ValueError, match=r"live must be a bool\[3\] array, got int64\[3\]"):
        host.drain(gain, reach, np.array([1, 0, 1]), left, seconds, spread, scores, 6.0)
    with pytest.raises(ValueError, match="sign = 2; allowed: -1, 0, 1"):
        host.expected(2, by_anchor=True, prior_weight=6.0, k_prior_weight=8.0, confidence=1.0, carry_prior=2.0)


def test_state_arrays_must_be_the_policys_own():
    with pytest.raises(ValueError, match=r"state allowed must be a writeable C-contiguous int64\[3\] array"):
        _host(allowed=np.zeros(3, np.int32))
    frozen = np.zeros(5)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match=r"state carry must be a writeable C-contiguous float64\[5\] array"):
        _host(carry=frozen)
    with pytest.raises(ValueError, match=r"k_max = 65; allowed: 1..64"):
        _host(k=MAX_K + 1)


def test_assigning_a_state_array_writes_into_the_buffer_c_reads():
    """policy.allowed = ... (tests, the choice) copies into the array whose address C keeps."""
    policy = AdaptivePolicy(3, 2)
    buffer = policy.allowed
    policy.allowed = np.array([1, 2, 0])
    assert policy.allowed is buffer and policy._host.state.allowed == buffer.__array_interface__["data"][0]
    np.testing.assert_array_equal(buffer, [1, 2, 0])
    with pytest.raises(ValueError):
        policy.allowed = np.zeros(4, np.int64)


def test_a_copied_policy_counts_into_its_own_arrays():
    """A deep copy (or a pickle) of the policy gets a PolicyHost over the copied arrays, not the old addresses."""
    policy = AdaptivePolicy(2, 2)
    policy.allowed = [2, 2]
    step = PolicyStep(live=np.ones(2, dtype=bool), drafted=np.array([2, 2]), emitted=np.array([3, 1]), cost=None)
    for twin in (copy.deepcopy(policy), pickle.loads(pickle.dumps(policy))):
        assert twin._host.state.allowed == twin.allowed.__array_interface__["data"][0] != \
            policy._host.state.allowed
        twin.observe(step)
        np.testing.assert_array_equal(twin.totals, [[2, 1], [1, 1]])
        assert not policy.totals.any()
