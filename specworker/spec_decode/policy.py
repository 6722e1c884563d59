"""Speculation policies: on the host, after a step's one host copy, how many drafts k_b (0..k_max) each slot may
have next step (docs/architecture.md, "Speculation policy"; the model and its formulas in docs/adaptive.md).
Pure Python and numpy: no tensor, no device value; the ModelRunner uploads the choice and the proposers cap by it.

Vocabulary: a slot is *live* when it decodes next step; its *cap* is min(k_max, the request's
SamplingParams.num_speculative_tokens); position j (1-based) of a verify step is *reached* when drafts 1..j-1
were accepted, and the *conditional acceptance* a_j is P(draft j accepted | reached).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from specworker.config import SpeculativeConfig
from specworker.model_executor.layers.sampler import GREEDY_TEMPERATURE
from specworker.slot_request import SlotRequest

# Verify strategies whose emitted tokens do not depend on how many drafts a slot fed: greedy, and target_match
# (the target's own sample at each position, drafts accepted while equal). Under the others (rejection, topp) a
# sampled request's tokens depend on k_b, so a policy keeps such a request at its cap (seeded output reproducible
# and batch invariant).
DRAFT_COUNT_INVARIANT_STRATEGIES = ("greedy", "target_match")

__all__ = ["DRAFT_COUNT_INVARIANT_STRATEGIES", "AdaptivePolicy", "FixedPolicy", "PolicyStep", "SchedulePolicy", "SpeculationPolicy", "StepCost",
           "build_policy", "expected_tokens"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StepCost:
    """The shape of one pure-decode step (no prefill chunk) and its wall seconds, start to next start."""

    num_slots: int  # B: decode slots the step fed
    num_drafts: int  # sum over slots of L_b - 1: draft tokens the step verified
    num_substeps: int  # draft-model substeps its proposer ran (0 for proposers without a model)
    seconds: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PolicyStep:
    """What a policy learns from one step (host values, one entry per slot)."""

    live: np.ndarray  # [N] bool: the slot decodes next step
    drafted: np.ndarray  # [N] int64: drafts this step verified for the slot (L_b - 1; 0 for prefill or idle)
    emitted: np.ndarray  # [N] int64: tokens this step emitted (accept_num; drafted + 1 at most)
    cost: StepCost | None  # the previous step, when it was a pure decode step


def expected_tokens(accept: np.ndarray) -> np.ndarray:
    """E(k) = 1 + sum_{j <= k} prod_{i <= j} a_i for k = 0..K, per row: tokens one verify step emits.

    Args:
        accept: [N, K] conditional acceptance a_1..a_K.
    Returns:
        [N, K + 1] float64. Example: a = [[0.5, 0.5]] -> [[1.0, 1.5, 1.75]].
    """
    reach = np.cumprod(accept, axis=1)  # [N, K]: P(draft j accepted)
    return 1.0 + np.concatenate([np.zeros((accept.shape[0], 1)), np.cumsum(reach, axis=1)], axis=1)


class SpeculationPolicy:
    """Base: per-slot caps that follow the slot moves (a SlotFollower), and `choose`.

    `owns_budget`: the choice replaces speculate_update's adaptive budget (actual_draft_token_nums := k_b);
    False (fixed): that budget still applies, capped by k_b.
    """

    owns_budget = True

    def __init__(self, num_slots: int, k_max: int, *, pin_sampled: bool = False):
        """pin_sampled: sampled requests keep k_b = cap (their tokens depend on k_b under the verify strategy)."""
        self.k_max = k_max
        self.pin_sampled = pin_sampled
        self.cap = np.full(num_slots, k_max, dtype=np.int64)  # [N] per-request override, capped at k_max
        self.pinned = np.zeros(num_slots, dtype=bool)  # [N] the slot's k_b is its cap, whatever the policy says

    def on_insert(self, slot: int, request: SlotRequest) -> None:
        k = request.num_speculative_tokens
        self.cap[slot] = self.k_max if k is None else min(k, self.k_max)
        self.pinned[slot] = self.pin_sampled and request.temperature >= GREEDY_TEMPERATURE

    def on_clear(self, slot: int) -> None:
        self.cap[slot] = self.k_max
        self.pinned[slot] = False

    def on_swap(self, i: int, j: int) -> None:
        for a in (self.cap, self.pinned):
            a[[i, j]] = a[[j, i]]

    def on_move(self, src: int, dst: int) -> None:
        for a in (self.cap, self.pinned):
            a[dst] = a[src]
        self.cap[src], self.pinned[src] = self.k_max, False

    def choose(self, step: PolicyStep) -> np.ndarray:
        """[N] int64 k_b for next step: the policy's choice, capped per request (pinned slots and slots not live:
        their cap)."""
        chosen = np.minimum(self._choose(step), self.cap)
        return np.where(step.live & ~self.pinned, chosen, self.cap)

    def _choose(self, step: PolicyStep) -> np.ndarray | int:
        raise NotImplementedError


class FixedPolicy(SpeculationPolicy):
    """k_max for every slot, every step (today's behaviour; speculate_update's budget applies as before)."""

    owns_budget = False

    def _choose(self, step: PolicyStep) -> int:
        return self.k_max


class SchedulePolicy(SpeculationPolicy):
    """k from the configured batch-size ranges, B = live slots next step."""

    def __init__(self, num_slots: int, spec: SpeculativeConfig):
        super().__init__(num_slots, spec.max_policy_draft_len,
                         pin_sampled=spec.verify_strategy not in DRAFT_COUNT_INVARIANT_STRATEGIES)
        self.spec = spec

    def _choose(self, step: PolicyStep) -> int:
        return self.spec.schedule_k(int(step.live.sum()))


class AdaptivePolicy(SpeculationPolicy):
    """argmax over K of expected emitted tokens per second, then per-slot trimming (docs/adaptive.md).

    Acceptance: per slot and position, a_bj = (s_bj + m * p_j) / (n_bj + m): s, n the slot's decayed successes and
    reaches (decay `decay` per step), p_j the worker's Laplace-smoothed totals, m = `prior_weight`.
    Cost: T(B, D, S) = c0 + c1 B + c2 D + c3 S (D drafts fed, S substeps) by ridge least squares over pure decode
    steps with forgetting `forget`. Exploration: the first `explore_steps` decode steps cycle K = 0..k_max; after
    that every `explore_every`-th step tries a neighbour of the best K.
    """

    NUM_FEATURES = 4

    def __init__(self, num_slots: int, k_max: int, *, has_substeps: bool, pin_sampled: bool = False,
                 prior_weight: float = 4.0, decay: float = 0.85, forget: float = 0.995, ridge: float = 1e-6,
                 explore_rounds: int = 3, explore_every: int = 24):
        super().__init__(num_slots, k_max, pin_sampled=pin_sampled)
        self.has_substeps = has_substeps
        self.prior_weight, self.decay, self.forget, self.ridge = prior_weight, decay, forget, ridge
        self.explore_steps, self.explore_every = explore_rounds * (k_max + 1), explore_every
        self.successes = np.zeros((num_slots, k_max))  # [N, K] decayed accepted drafts at position j
        self.reaches = np.zeros((num_slots, k_max))  # [N, K] decayed times position j was reached
        self.total_successes = np.zeros(k_max)  # [K] worker totals (the prior)
        self.total_reaches = np.zeros(k_max)
        self.xtx = np.zeros((self.NUM_FEATURES, self.NUM_FEATURES))  # decayed sums of x x^T and x y
        self.xty = np.zeros(self.NUM_FEATURES)
        self.num_costs = 0  # cost observations
        self.num_choices = 0  # decode steps chosen for
        self.last_k = 0  # the batch K of the last choice (metrics, tests)

    # ---- per-slot state follows the slots ----
    def on_insert(self, slot: int, request: SlotRequest) -> None:
        super().on_insert(slot, request)
        self._reset(slot)

    def on_clear(self, slot: int) -> None:
        super().on_clear(slot)
        self._reset(slot)

    def on_swap(self, i: int, j: int) -> None:
        super().on_swap(i, j)
        for a in (self.successes, self.reaches):
            a[[i, j]] = a[[j, i]]

    def on_move(self, src: int, dst: int) -> None:
        super().on_move(src, dst)
        for a in (self.successes, self.reaches):
            a[dst] = a[src]
        self._reset(src)

    def _reset(self, slot: int) -> None:
        self.successes[slot] = 0.0
        self.reaches[slot] = 0.0

    # ---- estimates ----
    def observe(self, step: PolicyStep) -> None:
        """Acceptance counts from this step's verify results; the previous step's cost into the fit."""
        k = self.k_max
        drafted = np.minimum(step.drafted, k)[:, None]  # [N, 1]
        accepted = np.maximum(step.emitted - 1, 0)[:, None]  # [N, 1]
        pos = np.arange(k)[None, :]  # [1, K] position j - 1
        reached = (pos < drafted) & (pos <= accepted)  # [N, K]: position reached in this verify step
        hit = reached & (pos < accepted)
        self.total_reaches += reached.sum(axis=0)
        self.total_successes += hit.sum(axis=0)
        self.reaches = self.decay * self.reaches + reached
        self.successes = self.decay * self.successes + hit
        if step.cost is not None:
            c = step.cost
            x = np.array([1.0, c.num_slots, c.num_drafts, c.num_substeps if self.has_substeps else 0.0])
            self.xtx = self.forget * self.xtx + np.outer(x, x)
            self.xty = self.forget * self.xty + x * c.seconds
            self.num_costs += 1

    def acceptance(self) -> np.ndarray:
        """[N, K] conditional acceptance per slot and position (prior-weighted EMA)."""
        prior = (self.total_successes + 1.0) / (self.total_reaches + 2.0)  # [K]
        m = self.prior_weight
        return (self.successes + m * prior) / (self.reaches + m)

    def cost_coefficients(self) -> np.ndarray:
        """[c0, c1, c2, c3] of T = c0 + c1 B + c2 D + c3 S (ridge least squares; zeros before any cost)."""
        reg = self.ridge * max(np.trace(self.xtx), 1.0) * np.eye(self.NUM_FEATURES)
        reg[0, 0] = 0.0
        if not self.has_substeps:
            reg[3, 3] = 1.0  # S is always 0: pin c3 to 0
        if self.num_costs == 0:
            return np.zeros(self.NUM_FEATURES)
        return np.linalg.lstsq(self.xtx + reg, self.xty, rcond=None)[0]

    # ---- the choice ----
    def choose(self, step: PolicyStep) -> np.ndarray:
        self.observe(step)
        return super().choose(step)

    def _choose(self, step: PolicyStep) -> np.ndarray:
        live = step.live
        if not live.any():
            return np.zeros_like(self.cap)
        self.num_choices += 1
        explore = self._exploration_k()
        if explore is not None and self.num_choices <= self.explore_steps:
            self.last_k = explore
            return np.full_like(self.cap, explore)
        best, k_b = self.best_k(live)
        if explore is not None:  # a neighbour of the best K, to keep the cost fit honest where it matters
            best = int(np.clip(best + (1 if (self.num_choices // self.explore_every) % 2 else -1), 0, self.k_max))
            k_b = np.minimum(best, self.cap)
        self.last_k = best
        return k_b

    def _exploration_k(self) -> int | None:
        n = self.num_choices
        if n <= self.explore_steps:
            return (n - 1) % (self.k_max + 1)
        return 0 if n % self.explore_every == 0 else None

    def best_k(self, live: np.ndarray) -> tuple[int, np.ndarray]:
        """(K, [N] k_b): the batch K maximising sum_b E_b(min(K, cap_b)) / T, then per slot the positions whose
        expected tokens beat their token cost at that rate: keep j iff P(draft j accepted) >= rate * c2."""
        coef = self.cost_coefficients()
        gain = expected_tokens(self.acceptance())  # [N, K + 1]
        rows = np.flatnonzero(live)
        num_slots = len(rows)
        best, best_rate = 0, -np.inf
        for k in range(self.k_max + 1):
            k_b = np.minimum(k, self.cap[rows])
            tokens = gain[rows, k_b].sum()
            seconds = self._seconds(coef, num_slots, k_b)
            rate = tokens / seconds
            if rate > best_rate * (1 + 1e-9):  # ties go to the smaller K
                best, best_rate = k, rate
        k_b = np.minimum(best, self.cap)
        token_cost = max(coef[2], 1e-9)  # seconds per drafted token
        reach = np.cumprod(self.acceptance(), axis=1)  # [N, K]
        worth = (reach >= best_rate * token_cost).astype(np.int64)  # non-increasing along j
        k_b = np.minimum(k_b, np.cumprod(worth, axis=1).sum(axis=1))
        return best, k_b

    def _seconds(self, coef: np.ndarray, num_slots: int, k_b: np.ndarray) -> float:
        substeps = int(k_b.max(initial=0)) if self.has_substeps else 0
        seconds = coef @ np.array([1.0, num_slots, k_b.sum(), substeps])
        return max(seconds, 1e-9)


def build_policy(spec: SpeculativeConfig, num_slots: int) -> SpeculationPolicy:
    """The policy speculative_config.policy names, for num_slots slots."""
    k_max = spec.max_policy_draft_len
    if spec.policy == "schedule":
        return SchedulePolicy(num_slots, spec)
    if spec.policy == "adaptive":
        return AdaptivePolicy(num_slots, k_max, has_substeps=spec.method == "mtp",
                              pin_sampled=spec.verify_strategy not in DRAFT_COUNT_INVARIANT_STRATEGIES)
    return FixedPolicy(num_slots, k_max)
