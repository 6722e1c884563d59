"""A test-only speculation policy: k_b drawn at random per slot per step (seeded), so the lossless tests see k
change from step to step and from slot to slot; about a third of the requests are admitted draft-less."""

from __future__ import annotations

import numpy as np

from specworker.spec_decode.policy import PolicyStep, SpeculationPolicy


class RandomPolicy(SpeculationPolicy):
    """k_b uniform in 0..k_max for every slot, every step; owns the draft budget like schedule / adaptive. A request
    is admitted draft-less (cap 0 for life) with probability `draftless_rate`."""

    def __init__(self, num_slots: int, k_max: int, seed: int, *, draftless_rate: float = 1 / 3):
        super().__init__(num_slots, k_max)
        self.rng = np.random.default_rng(seed)
        self.draftless_rate = draftless_rate
        self.history: list[np.ndarray] = []  # every choice (tests check the variety)
        self.num_draftless = 0  # requests admitted draft-less

    def admit(self, slot: int, num_slots: int, remaining: np.ndarray | None = None,
              prompt_left: np.ndarray | None = None) -> bool:
        if self.cap[slot] > 0 and self.rng.random() < self.draftless_rate:
            self.cap[slot] = 0
            self.num_draftless += 1
        return self.may_draft(slot)

    def _choose(self, step: PolicyStep) -> np.ndarray:
        chosen = self.rng.integers(0, self.k_max + 1, size=len(self.cap))
        self.history.append(np.where(step.live, np.minimum(chosen, self.cap), -1))
        return chosen
