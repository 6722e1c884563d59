"""SpecDecodeStats: acceptance counters of speculative decoding, per request and per worker (STYLE
§2.8: accumulated on the host from the step's one copy, read on demand).

Vocabulary: a *verify step* of a slot is a decode step that fed drafts (L_b > 1); its drafts are
*accepted* in order until the first rejection; the step emits accepted + 1 tokens (the correction or
bonus token). AL (mean acceptance length) = tokens emitted per verify step = 1 + accepted / steps.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["SpecDecodeStats"]


@dataclasses.dataclass(slots=True)
class SpecDecodeStats:
    num_speculative_tokens: int  # k: positions tracked
    num_steps: int = 0  # verify steps
    num_drafted: int = 0  # draft tokens fed to verification
    num_accepted: int = 0  # draft tokens accepted
    accepted_per_position: list[int] = dataclasses.field(default_factory=list)  # [k]: draft i accepted
    drafted_per_position: list[int] = dataclasses.field(default_factory=list)  # [k]: draft i fed

    def __post_init__(self) -> None:
        k = self.num_speculative_tokens
        self.accepted_per_position = self.accepted_per_position or [0] * k
        self.drafted_per_position = self.drafted_per_position or [0] * k

    def observe(self, num_drafted: int, num_emitted: int) -> None:
        """One verify step of one slot: num_drafted drafts fed (L_b - 1 >= 1), num_emitted tokens emitted
        (accept_num, 1..num_drafted + 1). Raises ValueError on counts verification cannot produce."""
        if not 1 <= num_drafted <= self.num_speculative_tokens or not 1 <= num_emitted <= num_drafted + 1:
            raise ValueError(f"SpecDecodeStats.observe(num_drafted={num_drafted}, num_emitted={num_emitted}); "
                             f"allowed: 1 <= num_drafted <= k = {self.num_speculative_tokens}, "
                             "1 <= num_emitted <= num_drafted + 1")
        accepted = num_emitted - 1
        self.num_steps += 1
        self.num_drafted += num_drafted
        self.num_accepted += accepted
        for i in range(num_drafted):
            self.drafted_per_position[i] += 1
        for i in range(accepted):
            self.accepted_per_position[i] += 1

    def merge(self, other: SpecDecodeStats) -> None:
        if other.num_speculative_tokens != self.num_speculative_tokens:
            raise ValueError(f"SpecDecodeStats.merge: k = {other.num_speculative_tokens} into k = "
                             f"{self.num_speculative_tokens}")
        self.num_steps += other.num_steps
        self.num_drafted += other.num_drafted
        self.num_accepted += other.num_accepted
        for i in range(self.num_speculative_tokens):
            self.accepted_per_position[i] += other.accepted_per_position[i]
            self.drafted_per_position[i] += other.drafted_per_position[i]

    @property
    def mean_acceptance_length(self) -> float:
        """AL = 1 + accepted / verify steps (1.0 before any step)."""
        return 1.0 + self.num_accepted / self.num_steps if self.num_steps else 1.0

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted tokens (0.0 before any draft)."""
        return self.num_accepted / self.num_drafted if self.num_drafted else 0.0

    @property
    def acceptance_per_position(self) -> list[float]:
        """Fraction of verify steps whose draft i was accepted; non-increasing in i (accepting draft
        i + 1 requires accepting draft i)."""
        return [a / self.num_steps if self.num_steps else 0.0 for a in self.accepted_per_position]

    def as_dict(self) -> dict:
        return {"num_steps": self.num_steps, "num_drafted": self.num_drafted, "num_accepted": self.num_accepted,
                "mean_acceptance_length": self.mean_acceptance_length, "acceptance_rate": self.acceptance_rate,
                "acceptance_per_position": self.acceptance_per_position}


@dataclasses.dataclass(slots=True)
class DraftLenStats:
    """Drafts the speculation policy chose per step, by batch size B (the slots decoding next step): the sum
    over slots of k_b, one entry per step. Accumulated on the host from each step's choice."""

    steps: dict[int, int] = dataclasses.field(default_factory=dict)  # B -> steps chosen for
    drafts: dict[int, int] = dataclasses.field(default_factory=dict)  # B -> sum over those steps of sum_b k_b

    def observe(self, draft_lens) -> None:
        """draft_lens: [N] ints, k_b of a slot decoding next step, -1 for the others."""
        draft_lens = np.asarray(draft_lens)
        decoding = draft_lens >= 0
        size = int(decoding.sum())
        if not size:
            return
        self.steps[size] = self.steps.get(size, 0) + 1
        self.drafts[size] = self.drafts.get(size, 0) + int(draft_lens.sum()) + (len(draft_lens) - size)  # -1 each

    def minus(self, before: DraftLenStats) -> DraftLenStats:
        """The counts gathered since `before` (a copy taken earlier)."""
        steps = {b: n - before.steps.get(b, 0) for b, n in self.steps.items() if n > before.steps.get(b, 0)}
        return DraftLenStats(steps, {b: self.drafts[b] - before.drafts.get(b, 0) for b in steps})

    def as_dict(self) -> dict:
        """{B: {"steps", "drafts_per_step", "drafts_per_slot"}}, B as a string key (JSON), ascending."""
        return {str(b): {"steps": self.steps[b], "drafts_per_step": self.drafts[b] / self.steps[b],
                         "drafts_per_slot": self.drafts[b] / self.steps[b] / b} for b in sorted(self.steps)}

    def mean_drafts_per_slot(self) -> float:
        """sum of k_b over every step and slot / slot-steps (0.0 before any step)."""
        slot_steps = sum(b * n for b, n in self.steps.items())
        return sum(self.drafts.values()) / slot_steps if slot_steps else 0.0
