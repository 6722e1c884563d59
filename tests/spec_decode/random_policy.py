"""A test-only speculation policy: k_b drawn at random per slot per step (seeded), so the lossless tests see k
change from step to step and from slot to slot."""

from __future__ import annotations

import numpy as np

from specworker.spec_decode.policy import PolicyStep, SpeculationPolicy


class RandomPolicy(SpeculationPolicy):
    """k_b uniform in 0..k_max for every slot, every step; owns the draft budget like schedule / adaptive."""

    def __init__(self, num_slots: int, k_max: int, seed: int):
        super().__init__(num_slots, k_max)
        self.rng = np.random.default_rng(seed)
        self.history: list[np.ndarray] = []  # every choice (tests check the variety)

    def _choose(self, step: PolicyStep) -> np.ndarray:
        chosen = self.rng.integers(0, self.k_max + 1, size=len(self.cap))
        self.history.append(np.where(step.live, np.minimum(chosen, self.cap), -1))
        return chosen
