"""Speculation policies on synthetic numbers (pure Python): fixed, schedule by batch size, adaptive's choice from
given acceptance and step costs, per-request caps following slot moves, expected_tokens by hand."""

import numpy as np
import pytest

from specworker.config import SpeculativeConfig
from specworker.slot_request import SlotRequest
from specworker.spec_decode.policy import (AdaptivePolicy, FixedPolicy, PolicyStep, SchedulePolicy, StepCost,
                                           build_policy, expected_tokens)


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
    assert not policy.owns_budget


def _schedule_spec(schedule):
    return SpeculativeConfig(method="mtp", model="builtin:tiny-mtp", num_speculative_tokens=3, num_model_steps=3,
                             policy="schedule", schedule=schedule)


@pytest.mark.parametrize("batch,k", [(1, 3), (3, 3), (4, 2), (15, 2), (16, 1), (31, 1), (32, 0), (64, 0)])
def test_schedule_picks_k_of_the_batch_size_range(batch, k):
    policy = SchedulePolicy(64, _schedule_spec({1: 3, 4: 2, 16: 1, 32: 0}))
    live = [True] * batch + [False] * (64 - batch)
    chosen = policy.choose(_step(live))
    assert set(chosen[:batch].tolist()) == {k}


def _adaptive(n, k_max, accept, coef, has_substeps=True):
    """An AdaptivePolicy whose acceptance and cost fit are set directly (exploration over)."""
    policy = AdaptivePolicy(n, k_max, has_substeps=has_substeps, explore_rounds=0, explore_every=10**9)
    policy.acceptance = lambda: np.array(accept, dtype=float)
    policy.cost_coefficients = lambda: np.array(coef, dtype=float)
    return policy


def test_adaptive_drafts_when_drafts_are_cheap():
    # T = 10 ms + 0.1 ms/slot + 0.2 ms/draft + 1 ms/substep, acceptance 0.8: K = 3 gives 1 + .8 + .64 + .512 =
    # 2.95 tokens per slot for 10.1 + 0.6 + 3 = 13.7 ms, more than K = 0 (1 token / 10.1 ms).
    policy = _adaptive(1, 3, [[0.8, 0.8, 0.8]], [10e-3, 0.1e-3, 0.2e-3, 1e-3])
    assert policy.best_k(np.array([True]))[0] == 3
    np.testing.assert_array_equal(policy.choose(_step([True])), [3])


def test_adaptive_stops_drafting_when_drafts_cost_more_than_they_bring():
    # 64 slots, per-token cost dominates: each draft costs as much as a slot's whole step share, and brings 0.5
    # expected tokens -> K = 0.
    n = 64
    policy = _adaptive(n, 3, [[0.5, 0.5, 0.5]] * n, [1e-3, 1e-3, 1e-3, 0.5e-3])
    best, k_b = policy.best_k(np.ones(n, dtype=bool))
    assert best == 0 and not k_b.any()


def test_adaptive_trims_slots_with_poor_acceptance():
    # Two slots: slot 0 accepts almost always, slot 1 never. Drafts pay for slot 0 but slot 1's drafts are
    # worth nothing, so slot 1 gets k_b = 0 while slot 0 keeps 2.
    policy = _adaptive(2, 2, [[0.95, 0.95], [0.02, 0.02]], [10e-3, 1e-3, 2e-3, 1e-3])
    best, k_b = policy.best_k(np.array([True, True]))
    assert best == 2
    np.testing.assert_array_equal(k_b, [2, 0])


def test_adaptive_learns_acceptance_per_slot_with_a_prior():
    policy = AdaptivePolicy(2, 2, has_substeps=True)
    before = policy.acceptance()
    np.testing.assert_allclose(before, 0.5)  # Laplace prior with no observation
    for _ in range(10):  # slot 0: both drafts accepted; slot 1: first draft rejected
        policy.observe(_step([True, True], drafted=[2, 2], emitted=[3, 1]))
    a = policy.acceptance()
    assert a[0, 0] > 0.75 and a[0, 1] > 0.75  # pulled from the prior (0.5 at position 1) towards 1
    assert a[1, 0] < 0.25  # rejected at position 1 every time
    # slot 1 never reached position 2: its estimate is the worker prior there, (10 + 1) / (10 + 2)
    assert a[1, 1] == pytest.approx(11 / 12)


def test_adaptive_cost_fit_recovers_a_linear_cost():
    policy = AdaptivePolicy(4, 3, has_substeps=True)
    rng = np.random.default_rng(0)
    coef = np.array([5e-3, 0.4e-3, 0.3e-3, 2e-3])
    for _ in range(200):
        b, s = int(rng.integers(1, 65)), int(rng.integers(0, 4))
        d = int(rng.integers(0, b * s + 1))
        policy.observe(_step([False] * 4, cost=StepCost(num_slots=b, num_drafts=d, num_substeps=s,
                                                         seconds=float(coef @ [1, b, d, s]))))
    np.testing.assert_allclose(policy.cost_coefficients(), coef, rtol=1e-2, atol=1e-5)


def test_adaptive_explores_every_k_first():
    policy = AdaptivePolicy(1, 2, has_substeps=True, explore_rounds=2)
    seen = [int(policy.choose(_step([True]))[0]) for _ in range(6)]
    assert seen == [0, 1, 2, 0, 1, 2]


def test_adaptive_choice_is_deterministic():
    def run():
        policy = AdaptivePolicy(3, 3, has_substeps=True)
        rng = np.random.default_rng(1)
        out = []
        for _ in range(40):
            cost = StepCost(num_slots=3, num_drafts=int(rng.integers(0, 10)), num_substeps=int(rng.integers(0, 4)),
                            seconds=float(rng.uniform(0.01, 0.02)))
            out.append(policy.choose(_step([True] * 3, drafted=[2, 1, 0], emitted=[2, 1, 1], cost=cost)).tolist())
        return out

    assert run() == run()


def test_build_policy_resolves_the_config():
    mtp = dict(method="mtp", model="builtin:tiny-mtp", num_speculative_tokens=3, num_model_steps=2)
    assert isinstance(build_policy(SpeculativeConfig(**mtp), 4), FixedPolicy)
    adaptive = build_policy(SpeculativeConfig(**mtp, policy="adaptive"), 4)
    assert isinstance(adaptive, AdaptivePolicy) and adaptive.k_max == 2  # MTP drafts num_model_steps at most
