"""Speculation policies: on the host, after a step's one host copy, how many drafts k_b (0..k_max) each slot may
have next step (docs/spec.md §2.3).
Pure Python and numpy: no tensor, no device value; the ModelRunner uploads the choice and the proposers cap by it.

Vocabulary: a slot is *live* when it decodes next step; its *cap* is min(k_max, the request's
SamplingParams.num_speculative_tokens); position j (1-based) of a verify step is *reached* when drafts 1..j-1
were accepted, and the *conditional acceptance* a_j is P(draft j accepted | reached).
"""

from __future__ import annotations

import dataclasses
import statistics

import numpy as np

from specworker.config import SpeculativeConfig
from specworker.model_executor.layers.sampler import GREEDY_TEMPERATURE
from specworker.slot_request import SlotRequest

# Verify strategies whose emitted tokens do not depend on how many drafts a slot fed: greedy, and target_match
# (the target's own sample at each position, drafts accepted while equal). Under the others (rejection, topp) a
# sampled request's tokens depend on k_b, so a policy keeps such a request at its cap (seeded output reproducible
# and batch invariant).
DRAFT_COUNT_INVARIANT_STRATEGIES = ("greedy", "target_match")

__all__ = ["DRAFT_COUNT_INVARIANT_STRATEGIES", "AdaptivePolicy", "FixedPolicy", "PolicyStep", "SchedulePolicy",
           "SpeculationPolicy", "StepCost", "StepCostTable", "batch_bucket", "build_policy", "expected_tokens"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StepCost:
    """The shape of one pure-decode step (no prefill chunk) and its wall seconds, start to next start."""

    num_slots: int  # B: decode slots the step fed
    num_drafts: int  # sum over slots of L_b - 1: draft tokens the step verified
    num_substeps: int  # draft-model substeps its proposer ran (0 for proposers without a model)
    seconds: float
    verify_seconds: float = 0.0  # of which pre_process, target forward and sampling / verify (StepOutput.seconds)


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


def batch_bucket(num_slots: int) -> int:
    """Cost-table key of a batch size: B itself up to 4, then quarter octaves (round(4 log2 B)): 1..4 -> 1..4,
    5 -> 9, 8 -> 12, 16 -> 16, 32 -> 20, 64 -> 24."""
    return num_slots if num_slots <= 4 else int(round(4 * np.log2(num_slots)))


NEAR_BUCKETS = (0, -1, 1, -2, 2, -3, 3, -4, 4)  # bucket offsets within an octave, nearest first


class StepCostTable:
    """Wall seconds of a decode step per (batch bucket, K): the median of the last `window` observations (robust
    to the load spikes of a shared machine)."""

    def __init__(self, *, window: int = 9):
        self.window = window
        self.samples: dict[tuple[int, int], list[float]] = {}
        self.median: dict[tuple[int, int], float] = {}  # of samples, kept current by add
        self.count: dict[tuple[int, int], int] = {}

    def add(self, bucket: int, k: int, seconds: float) -> None:
        key = (bucket, k)
        self.samples[key] = (self.samples.get(key, []) + [float(seconds)])[-self.window:]
        self.median[key] = statistics.median(self.samples[key])
        self.count[key] = self.count.get(key, 0) + 1

    def seconds(self, bucket: int, k: int) -> float:
        return self.median[(bucket, k)]

    def row(self, bucket: int, k_max: int, need: int) -> np.ndarray | None:
        """[k_max + 1] seconds for K = 0..k_max at `bucket`, from the nearest bucket within an octave whose every K
        has >= need observations (None: none has). Choices compare K at one bucket, so a near bucket's row serves."""
        for b in (bucket + d for d in NEAR_BUCKETS):
            if all(self.count.get((b, k), 0) >= need for k in range(k_max + 1)):
                return np.array([self.median[(b, k)] for k in range(k_max + 1)])
        return None


class AdaptivePolicy(SpeculationPolicy):
    """argmax over K of expected emitted tokens per second, then per-slot trimming (docs/spec.md §2.3).

    Acceptance: per slot and position, a_bj = (s_bj + m * p_j) / (n_bj + m): s, n the slot's decayed successes and
    reaches (decay `decay` per step), p_j the worker's Laplace-smoothed totals, m = `prior_weight`.
    Cost: T(B, K), the measured wall seconds of a decode step whose batch drafted with K (StepCostTable), kept
    only for steps whose K equals the previous step's (the cycle then holds K's substeps and K's verify tokens).
    Exploration: a batch bucket without `need` observations of every K holds the least observed K for `hold`
    steps (so K = 0..k_max take turns and load drift hits them all); afterwards a neighbour of the current K
    (alternately above and below) is held for `hold` steps every `explore_every` decode steps, an interval that
    doubles (up to `explore_max`) each time the exploration leaves the choice as it was and returns to
    `explore_every` when the choice changes. The chosen K changes only when another K's rate beats it by more than
    `switch_margin`.
    """

    def __init__(self, num_slots: int, k_max: int, *, has_substeps: bool, pin_sampled: bool = False,
                 prior_weight: float = 4.0, decay: float = 0.85, need: int = 3, hold: int = 2,
                 explore_every: int = 32, explore_max: int = 256, switch_margin: float = 0.03):
        super().__init__(num_slots, k_max, pin_sampled=pin_sampled)
        self.has_substeps = has_substeps
        self.prior_weight, self.decay = prior_weight, decay
        self.need, self.hold, self.explore_every, self.switch_margin = need, hold, explore_every, switch_margin
        self.explore_max = explore_max
        self.explore_interval = explore_every  # decode steps between neighbour explorations (backs off)
        self.last_explored = 0  # num_choices at the last neighbour exploration
        self.num_explorations = 0
        self.explored = False  # a neighbour exploration ended since the last exploitation choice
        self.kept_k = k_max  # the K exploitation last chose (switching away needs a margin)
        self.successes = np.zeros((num_slots, k_max))  # [N, K] decayed accepted drafts at position j
        self.reaches = np.zeros((num_slots, k_max))  # [N, K] decayed times position j was reached
        self.total_successes = np.zeros(k_max)  # [K] worker totals (the prior)
        self.total_reaches = np.zeros(k_max)
        self.costs = StepCostTable()
        self.verify_costs = StepCostTable()  # the verify part alone: what one more draft token costs
        self.recent_k: list[int] = []  # the batch K of the last two choices, newest last
        self.held: tuple[int, int] | None = None  # (K, steps left) of an exploration hold
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
        """Acceptance counts from this step's verify results; the previous step's seconds into the cost table."""
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
        steady = len(self.recent_k) == 2 and self.recent_k[0] == self.recent_k[1]
        if step.cost is not None and steady and step.cost.num_slots > 0:
            bucket = batch_bucket(step.cost.num_slots)
            self.costs.add(bucket, self.recent_k[1], step.cost.seconds)
            self.verify_costs.add(bucket, self.recent_k[1], step.cost.verify_seconds)

    def acceptance(self) -> np.ndarray:
        """[N, K] conditional acceptance per slot and position (prior-weighted EMA)."""
        prior = (self.total_successes + 1.0) / (self.total_reaches + 2.0)  # [K]
        m = self.prior_weight
        return (self.successes + m * prior) / (self.reaches + m)

    # ---- the choice ----
    def choose(self, step: PolicyStep) -> np.ndarray:
        self.observe(step)
        out = super().choose(step)
        live = step.live & ~self.pinned
        self.recent_k = (self.recent_k + [int(out[live].max(initial=0))])[-2:]
        return out

    def _choose(self, step: PolicyStep) -> np.ndarray | int:
        live = step.live & ~self.pinned
        if not live.any():
            return self.cap
        self.num_choices += 1
        bucket = batch_bucket(int(step.live.sum()))
        seconds = self.costs.row(bucket, self.k_max, self.need)
        verify = self.verify_costs.row(bucket, self.k_max, self.need)
        if self.held is None:
            self.held = self._exploration(bucket, seconds)
        if self.held is not None:
            k, left = self.held
            self.held = (k, left - 1) if left > 1 else None
            self.last_k = k
            return np.full_like(self.cap, k)
        best, k_b = self.best_k(live, seconds, verify)
        self.last_k = best
        return k_b

    def _exploration(self, bucket: int, seconds: np.ndarray | None) -> tuple[int, int] | None:
        """(K, hold) to explore now, or None."""
        if seconds is None:  # the K with the fewest observations at this bucket, smallest first
            counts = [self.costs.count.get((bucket, k), 0) for k in range(self.k_max + 1)]
            return int(np.argmin(counts)), self.hold
        if self.num_choices - self.last_explored >= self.explore_interval:  # a neighbour, alternately above and below
            self.last_explored, self.explored = self.num_choices, True
            self.num_explorations += 1
            side = 1 if self.num_explorations % 2 else -1
            k = self.last_k + side if 0 <= self.last_k + side <= self.k_max else self.last_k - side
            return int(np.clip(k, 0, self.k_max)), self.hold
        return None

    def best_k(self, live: np.ndarray, seconds: np.ndarray, verify: np.ndarray | None = None) -> tuple[int, np.ndarray]:
        """(K, [N] k_b): the batch K maximising sum_b E_b(min(K, cap_b)) / T(B, K), then per slot the positions
        worth their verify cost at that rate: keep draft j iff P(draft j accepted) >= rate * c, c = (V(B, K) -
        V(B, 0)) / (drafts at K), V the verify part of the step (a substep is shared by the batch: dropping one
        slot's draft saves only its verify token). verify None: T itself."""
        accept = self.acceptance()
        gain = expected_tokens(accept)  # [N, K + 1]
        rows = np.flatnonzero(live)
        rates = []
        for k in range(self.k_max + 1):
            k_b = np.minimum(k, self.cap[rows])
            rates.append(gain[rows, k_b].sum() / max(seconds[k], 1e-9))
        best = int(np.argmax(rates))  # ties go to the smaller K
        if rates[best] < (1 + self.switch_margin) * rates[self.kept_k]:
            best = self.kept_k  # within the margin of the current K: stay (measurement noise, KV refill)
        if best != self.kept_k:
            self.explore_interval = self.explore_every
        elif self.explored:  # the exploration confirmed the choice: explore less often
            self.explore_interval = min(2 * self.explore_interval, self.explore_max)
        self.explored = False
        self.kept_k = best
        k_b = np.minimum(best, self.cap)
        drafts = int(k_b[rows].sum())
        if best == 0 or drafts == 0:
            return best, k_b
        verify = seconds if verify is None else verify
        draft_cost = max(verify[best] - verify[0], 0.0) / drafts
        reach = np.cumprod(accept, axis=1)  # [N, K]
        worth = (reach >= rates[best] * draft_cost).astype(np.int64)  # non-increasing along j
        return best, np.minimum(k_b, np.cumprod(worth, axis=1).sum(axis=1))


def build_policy(spec: SpeculativeConfig, num_slots: int) -> SpeculationPolicy:
    """The policy speculative_config.policy names, for num_slots slots."""
    k_max = spec.max_policy_draft_len
    if spec.policy == "schedule":
        return SchedulePolicy(num_slots, spec)
    if spec.policy == "adaptive":
        return AdaptivePolicy(num_slots, k_max, has_substeps=spec.method == "mtp",
                              pin_sampled=spec.verify_strategy not in DRAFT_COUNT_INVARIANT_STRATEGIES)
    return FixedPolicy(num_slots, k_max)
