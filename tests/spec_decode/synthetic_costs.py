"""A test-only StepCostModel whose predictions come from a formula instead of the measured seconds, so a test that
runs the adaptive policy on real (noisy) timings makes the same choices every run: its admissions, explorations and
per-slot trimming are the real policy's, only T(B, K) is given."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from specworker.spec_decode.policy import AdaptivePolicy
from specworker.spec_decode.step_cost_model import StepCostModel


class SyntheticCostModel(StepCostModel):
    """T(B, K) = cost(B, K) seconds (measured and relative alike), V = 0.6 T, support `window` everywhere, no
    error; observations are counted (readiness, exploration) but their seconds are not used. ready: start with `need`
    observations of every K (no initial exploration)."""

    def __init__(self, cost: Callable[[int, int], float], *, k_max: int, ready: bool = False, need: int = 3):
        super().__init__()
        self.cost = cost
        if ready:
            self.count = dict.fromkeys(range(k_max + 1), need)

    def _seconds(self, num_slots: int, k_max: int) -> np.ndarray:
        return np.array([self.cost(num_slots, k) for k in range(k_max + 1)])

    def predict(self, num_slots: int, k_max: int) -> tuple[np.ndarray, np.ndarray]:
        seconds = self._seconds(num_slots, k_max)
        return seconds, 0.6 * seconds

    def predict_relative(self, num_slots: int, k_max: int) -> np.ndarray:
        return self._seconds(num_slots, k_max)

    def support(self, num_slots: int, k_max: int) -> np.ndarray:
        return np.full(k_max + 1, float(self.window))

    def relative_error(self, num_slots: int, k_max: int) -> np.ndarray:
        return np.zeros(k_max + 1)  # the formula is exact


def drafts_pay_below(threshold: int) -> Callable[[int, int], float]:
    """Drafts are nearly free below `threshold` slots (K = k_max wins) and cost a whole step each from it on (K = 0
    wins by far: E(K) < 1 + K)."""
    return lambda batch, k: 0.01 * (1 + (0.1 if batch < threshold else 2.0) * k)


def adaptive_with(num_slots: int, k_max: int, cost, *, ready: bool = True, **kw) -> AdaptivePolicy:
    """An AdaptivePolicy on the synthetic costs. Its draft-less admission needs no acceptance evidence unless
    admit_min_reaches is given: these workers run a few short requests, and the costs alone decide here."""
    kw.setdefault("admit_min_reaches", 0)
    policy = AdaptivePolicy(num_slots, k_max, **kw)
    policy.costs = SyntheticCostModel(cost, k_max=k_max, ready=ready, need=policy.need)
    return policy


def set_acceptance(policy: AdaptivePolicy, accept) -> None:
    """Slot counts under which policy.acceptance() reads `accept` ([N, K]) at the worker totals as they are: 1000
    reaches a position, the successes that make the shrunk estimate equal `accept`, and no carry evidence (the slot's
    estimate is its own). The compiled arithmetic reads the counts, so an acceptance is set through them."""
    accept = np.broadcast_to(np.asarray(accept, dtype=np.float64), policy.slot_counts.shape[1:])
    reaches, weight, prior = 1000.0, policy.prior_weight, policy.prior()
    policy._scalars[0] = 1.0
    policy.carry_totals[:] = 0.0
    policy.slot_counts[0] = reaches
    policy.slot_counts[1] = accept * (reaches + weight) - weight * prior
    np.testing.assert_allclose(policy.acceptance(), accept, rtol=1e-12)
