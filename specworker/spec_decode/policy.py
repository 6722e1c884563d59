"""Speculation policies: on the host, after a step's one host copy, how many drafts k_b (0..k_max) each slot may
have next step (docs/spec.md §2.3).
Python, numpy and, for the per-step counting, E by K and the drain objective, compiled host arithmetic (policy_host:
ctypes into the ops library): no tensor, no device value; the ModelRunner uploads the choice and the proposers cap by
it.

Vocabulary: a slot is *live* when it decodes next step; its *cap* is min(k_max, the request's
SamplingParams.num_speculative_tokens); a *draft-less* slot has cap 0 for its whole life (override 0, or admitted
so by the policy: `admit`), so the proposer need not prepare drafts for it; position j (1-based) of a verify step
is *reached* when drafts 1..j-1 were accepted, and the *conditional acceptance* a_j is P(draft j accepted |
reached).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable

import numpy as np

from specworker.config import SpeculativeConfig
from specworker.model_executor.layers.sampler import GREEDY_TEMPERATURE
from specworker.slot_request import SlotRequest
from specworker.spec_decode.policy_host import PolicyHost
from specworker.spec_decode.step_cost_model import StepCost, StepCostModel

# Verify strategies whose emitted tokens do not depend on how many drafts a slot fed: greedy, and target_match
# (the target's own sample at each position, drafts accepted while equal). Under the others (rejection, topp) a
# sampled request's tokens depend on k_b, so a policy keeps such a request at its cap (seeded output reproducible
# and batch invariant).
DRAFT_COUNT_INVARIANT_STRATEGIES = ("greedy", "target_match")

__all__ = ["DRAFT_COUNT_INVARIANT_STRATEGIES", "AdaptivePolicy", "FixedPolicy", "PolicyStep", "SchedulePolicy",
           "SpeculationPolicy", "build_policy", "expected_tokens"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PolicyStep:
    """What a policy learns from one step (host values, one entry per slot)."""

    live: np.ndarray  # [N] bool: the slot decodes next step
    drafted: np.ndarray  # [N] int64: drafts this step verified for the slot (L_b - 1; 0 for prefill or idle)
    emitted: np.ndarray  # [N] int64: tokens this step emitted (accept_num; drafted + 1 at most)
    cost: StepCost | None  # the previous step, when it was a pure decode step
    # [N] int64 tokens each slot may still emit after this step at most (max_tokens less what it has), when no
    # request waits for a slot (the batch drains), or a function that builds them, called during choose only (the
    # worker's: they are read only when a decision is made, a few steps in 40); None: requests wait, or the caller
    # does not know
    remaining: np.ndarray | Callable[[], np.ndarray] | None = None

    def remaining_tokens(self) -> np.ndarray | None:
        """`remaining`, built if it is a function."""
        return self.remaining() if callable(self.remaining) else self.remaining


def expected_tokens(accept: np.ndarray) -> np.ndarray:
    """E(k) = 1 + sum_{j <= k} prod_{i <= j} a_i for k = 0..K, per row: tokens one verify step emits.

    Args:
        accept: [N, K] conditional acceptance a_1..a_K.
    Returns:
        [N, K + 1] float64. Example: a = [[0.5, 0.5]] -> [[1.0, 1.5, 1.75]].
    """
    reach = np.cumprod(accept, axis=1)  # [N, K]: P(draft j accepted)
    return 1.0 + np.concatenate([np.zeros((accept.shape[0], 1)), np.cumsum(reach, axis=1)], axis=1)


def expected_excess(mean: np.ndarray, sd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(E[max(X, 0)], P(X > 0)) for X ~ Normal(mean, sd^2), elementwise: mean Phi(mean / sd) + sd phi(mean / sd) and
    Phi(mean / sd); max(mean, 0) and [mean > 0] where sd is 0. Example: mean 0, sd 1 -> (0.399, 0.5)."""
    mean, sd = np.asarray(mean, dtype=np.float64), np.asarray(sd, dtype=np.float64)
    z = np.clip(mean / np.maximum(sd, 1e-300), -40.0, 40.0)
    # math.erf element by element (a [K + 1] vector: through np.vectorize a call took ~21 us, ~16 now)
    erf = np.array([math.erf(v) for v in (z / math.sqrt(2.0)).ravel().tolist()]).reshape(z.shape)
    cdf = 0.5 * (1.0 + erf)
    pdf = np.exp(-0.5 * z ** 2) / math.sqrt(2.0 * math.pi)
    known = sd > 0
    return (np.where(known, mean * cdf + sd * pdf, np.maximum(mean, 0.0)),
            np.where(known, cdf, (mean > 0).astype(np.float64)))


def _laplace(totals: np.ndarray) -> np.ndarray:
    """[K] Laplace-smoothed acceptance per position of [reaches, successes][K] totals (the worker prior)."""
    return (totals[1] + 1.0) / (totals[0] + 2.0)


def _shrunk(counts: np.ndarray, prior: np.ndarray, weight: float, decay: float = 1.0) -> np.ndarray:
    """[N, K] per-slot acceptance of [reaches, successes][N, K] counts (scaled by decay), shrunk to prior with
    `weight` pseudo-reaches."""
    return (decay * counts[1] + weight * prior) / (decay * counts[0] + weight)


@functools.lru_cache(maxsize=64)
def _drain_grid(size: int) -> np.ndarray:
    """The batch sizes drain_seconds predicts T at for a batch of `size`: 1, 1.4, 2, 2.8, ..., size rounded
    (2 ceil(log2 size) + 1 points, duplicates dropped); read-only."""
    grid = np.unique(np.round(np.geomspace(1, size, 2 * int(np.ceil(np.log2(size))) + 1)).astype(np.int64))
    grid.flags.writeable = False
    return grid


@functools.lru_cache(maxsize=64)
def _blom_scores(size: int) -> np.ndarray:
    """[size] Blom's normal scores of the order statistics of `size` draws, ascending (the normal quantile of
    (i + 0.625) / (size + 0.25) in Tukey's lambda form, within 1%); read-only."""
    p = (np.arange(size) + 0.625) / (size + 0.25)
    scores = 4.91 * (p ** 0.14 - (1 - p) ** 0.14)
    scores.flags.writeable = False
    return scores


class _Fixed:
    """An array attribute whose buffer, once set, is never replaced: assigning copies into it (np.copyto; a shape
    that does not broadcast raises). The compiled arithmetic (PolicyHost) keeps the buffer's address."""

    def __set_name__(self, owner, name):
        self.slot = f"_{name}_buffer"

    def __get__(self, obj, owner=None):
        return self if obj is None else getattr(obj, self.slot)

    def __set__(self, obj, value):
        buffer = getattr(obj, self.slot, None)
        if buffer is None:
            setattr(obj, self.slot, value)
        else:
            np.copyto(buffer, value)


class SpeculationPolicy:
    """Base: per-slot caps that follow the slot moves (a SlotFollower), and `choose`.

    `steady_k`: a request's k_b stays its cap for its life (fixed), so speculate_update's budget, which a lookup
    proposer drafts at most, needs capping by k_b only where an override is below k_max; otherwise it is capped
    every step (ModelRunner._choose_draft_lens). `reads_remaining`: choose uses PolicyStep.remaining.
    """

    steady_k = False
    reads_remaining = False  # choose reads PolicyStep.remaining (the worker passes it only then)

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

    def admit(self, slot: int, num_slots: int, remaining: np.ndarray | None = None,
              prompt_left: np.ndarray | None = None) -> bool:
        """Once per request, before its first prompt chunk, num_slots = the occupied slots after this step's
        admissions: whether the request may ever draft. False: the slot is draft-less (cap 0 for its life) and the
        proposer may skip what only drafting needs (the MTP draft prefill). remaining: [N] tokens each occupied
        slot may still generate when no request waits after these admissions (the batch will drain; 0 for a free
        slot), else None (as PolicyStep.remaining); prompt_left: [N] prompt tokens each slot has still to prefill,
        this step's chunks included, given with remaining. Here: only an override of 0."""
        return self.may_draft(slot)

    def may_draft(self, slot: int) -> bool:
        return bool(self.cap[slot] > 0)

    def choose(self, step: PolicyStep) -> np.ndarray:
        """[N] int64 k_b for next step: the policy's choice, capped per request (pinned slots and slots not live:
        their cap)."""
        chosen = np.minimum(self._choose(step), self.cap)
        return np.where(step.live & ~self.pinned, chosen, self.cap)

    def _choose(self, step: PolicyStep) -> np.ndarray | int:
        raise NotImplementedError


class FixedPolicy(SpeculationPolicy):
    """k_max for every slot, every step (today's behaviour; speculate_update's budget applies as before)."""

    steady_k = True

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
    """argmax over K of expected emitted tokens per second, then per-slot trimming (docs/spec.md §2.3).

    Acceptance: per slot and position, a_bj = (s_bj + m * p_j) / (n_bj + m): s, n the slot's decayed successes and
    reaches (decay `decay` per step), p_j the worker's Laplace-smoothed totals, m = `prior_weight`. A step that allows
    a slot k drafts scales it by r_kj = p_kj / p_j, p_kj the worker's acceptance at position j in steps whose previous
    step allowed k drafts, shrunk to p_j with weight `k_prior_weight`: where a step of k drafts leaves the next step's
    anchor depends on k, and so does the acceptance that anchor sees (docs/adaptive.md). A request's first verification
    of drafts after admission counts only in first_totals (`fresh`: it accepts less than the ones after it).
    Cost: T(B, K) and its verify part V from a profile measured at worker start (use_profile: ProfiledCosts), or,
    without one, from StepCostModel: per K, a local linear fit in B of the measured wall seconds of recent steady
    decode steps.
    Exploration: until every K has `need` observations of a step whose K equals the previous step's, the least
    observed K is held for `hold` steps (so K = 0..k_max take turns and load drift hits them all; with profiled costs
    the K >= 1 with the fewest anchored verifications); afterwards a neighbour of the current K (alternately above
    and below; only the other where one is ruled out: `unsettled`) is held for `hold` steps every `explore_every`
    decode steps, an interval that
    doubles (up to `explore_max`) each time the exploration leaves the choice as it was (once the worker totals hold
    `admit_min_reaches` verifications of draft position 1, and each neighbour has `settle_costs` steady cost
    observations and a rate at its optimistic acceptance, `confidence` standard errors up, below the choice's, or
    the last `confirm_explorations` explorations in a row left the choice as it was) and returns to `explore_every`
    when the choice changes.
    The chosen K changes only when a K above it beats its rate by more than `switch_margin`, also at its pessimistic
    acceptance (_doubtful_switch), or a K below it beats it by more than `down_margin` (0: any gain; rate objective)
    (`optimism`: the choice reads the optimistic acceptance too; off by default).
    Draft-less admission (`admit`): a request admitted where K = 0 is settled (`_no_drafts_verdict`; it also needs
    `admit_min_reaches` verifications of draft position 1 in the worker totals) gets cap 0 for
    its life, so its draft prefill is skipped and a batch of such slots runs no proposer at all. A step holding
    draft-less slots files no K >= 1 cost (it drafted for fewer slots than T(B, K) assumes); so admission probes a
    settled K = 0 once no K >= 1 cost was filed near the batch size for `probe_after` steps (doubling up to
    `probe_max` while probes leave it settled): the batch is admitted with drafts and holds the nearest K >= 1 for
    `probe_hold` steps (_probed). Demotion (`demote_after`, profiled costs, MTP): a batch whose exploitation
    decisions keep choosing K = 0 becomes draft-less (_demote).
    """

    reads_remaining = True
    # the arrays the compiled arithmetic writes or reads in place (PolicyHost): assignment copies into them
    cap, allowed, prev_allowed, fresh = _Fixed(), _Fixed(), _Fixed(), _Fixed()

    def __init__(self, num_slots: int, k_max: int, *, pin_sampled: bool = False,
                 prior_weight: float = 6.0, decay: float = 0.92, need: int = 3, hold: int = 2,
                 explore_every: int = 32, explore_max: int = 256, switch_margin: float = 0.02, down_margin: float = 0.0,
                 admit_min_reaches: int = 64, k_prior_weight: float = 8.0,
                 redecide_every: int = 8, redecide_max: int = 32, confidence: float = 1.0, optimism: bool = False,
                 settle_costs: int = 6, probe_after: float = 128, probe_max: float = 2048, probe_hold: int = 4,
                 warm_reaches: float = 12.0, demote_after: int = 0, by_anchor: bool = True, doubt_reaches: int = 6,
                 confirm_explorations: int = 3, counts_fill: bool = True, carry_prior: float = 2.0):
        super().__init__(num_slots, k_max, pin_sampled=pin_sampled)
        # acceptance per k of the step that placed the anchor (prior_by_k); off: the worker prior for every k
        # (lookup proposers, docs/adaptive.md "Anchors and lookups")
        self.by_anchor = by_anchor
        # demotion (_demote): exploitation decisions of K = 0 in a row after which the live slots become draft-less
        # (0: never); profiled costs only
        self.demote_after, self.zero_decisions, self.num_demoted = demote_after, 0, 0
        # probes of a settled K = 0 (_admission_settles): steps without a K >= 1 cost near the batch size before
        # admission takes drafts again (doubling up to probe_max each time a probe leaves K = 0 settled), and the
        # steps the probing batch then holds the runner-up K
        self.probe_after, self.probe_max, self.probe_hold = probe_after, probe_max, probe_hold
        self.probe_interval = probe_after
        self.probe: tuple[int, int, int] | None = None  # (B, runner-up K, clock at its start) of the probe under way
        self.probe_k: int | None = None  # the K a probing batch holds once every live slot may draft
        self.probe_fresh: set[int] = set()  # the K re-measured since the probe began
        self.num_probes = 0
        self.clock = 0  # steps observed
        self.k_cost_at: dict[int, int] = {}  # B -> the clock of the last K >= 1 cost filed at B
        self.settle_costs = settle_costs  # steady cost observations a neighbour needs before explorations back off
        # explorations in a row that left the choice as it was, and how many of them back the interval off even where a
        # neighbour's optimistic rate stays above the choice's (_settle)
        self.confirmations, self.confirm_explorations = 0, confirm_explorations
        self.confidence = confidence  # standard errors of optimism on the per-k acceptance (optimistic_prior_by_k)
        self.optimism = optimism  # the choice itself reads the optimistic acceptance (else only the back-off does)
        self.redecide_every = redecide_every  # steps a decision is kept while the live slots and caps stay the same
        self.redecide_max = redecide_max  # ... at most, once decisions keep repeating (the period doubles up to it)
        self.keep_period = redecide_every  # steps the current decision is kept (redecide_every .. redecide_max)
        self._last_decision: tuple[int, np.ndarray] | None = None  # (K, [N] k_b) of the last decision made
        self.decision: tuple[tuple[bytes, bytes], int, int, np.ndarray] | None = None  # (key, steps, K, [N] k_b)
        self._decided: np.ndarray | None = None  # the decision's k_b when this step's _choose returned it
        # (signature, k_b, output, allowed, recent K, draft-less) of the last step that returned a decision (_kept_choice)
        self._kept: tuple | None = None
        self._no_drafts: tuple | None = None  # (signature, _no_draft_choice's answer) of the last signature it judged
        self._own_seconds = 0.0  # host seconds of the last choose (ProfiledCosts' served pairs leave them out)
        self.host_clock = time.perf_counter  # what times choose (a replay of synthetic costs: a clock standing still)
        self.k_prior_weight = k_prior_weight
        self.admit_min_reaches = admit_min_reaches  # draft-position-1 verifications before admission may settle K = 0
        self.prior_weight, self.decay = prior_weight, decay
        self.need, self.hold, self.explore_every, self.switch_margin = need, hold, explore_every, switch_margin
        # the rate objective's margin for a switch down to a smaller K (best_k): a K below the current one is read
        # from verifications anchored by the current K's steps, which read it low (docs/adaptive.md, "The one-slot
        # K = 3 lock-in"), and its positions are verified in every step: no margin by default
        self.down_margin = down_margin
        self.explore_max = explore_max
        self.explore_interval = explore_every  # decode steps between neighbour explorations (backs off)
        self.last_explored = 0  # num_choices at the last neighbour exploration
        self.num_explorations = 0
        # (K, the neighbours of K not ruled out) at the last _neighbours_settled: explorations of K go to those
        self.unsettled: tuple[int, tuple[int, ...]] | None = None
        # the K above the choice that the last rate decision doubted (_doubtful_switch), explored next for
        # 1 + ceil(doubt_reaches / B) steps (_exploration)
        self.doubted: int | None = None
        self.doubt_reaches = doubt_reaches
        self.explored = False  # a neighbour exploration ended since the last exploitation choice
        # the K exploitation last chose (switching away needs a margin); None before its first choice, which no margin
        # holds back: at one slot on the tiny pair K = 3, kept from the start, read 0.988 of K = 2's rate at the first
        # choice and ran until its own steps' acceptance pulled it below K = 2 by the margin
        self.kept_k: int | None = None
        self._slot_counts = np.zeros((2, num_slots, k_max))  # [reaches, successes][N, K] decayed, per position j
        self._slot_raw = np.zeros((2, num_slots, k_max))  # the same, not decayed: the request's whole evidence
        self._totals = np.zeros((2, k_max))  # [reaches, successes][K]: worker totals (the prior)
        # a request's first verification of drafts since its admission is counted apart (observe): on the tiny pair
        # position 1 is accepted 0.53 of the time there, 0.85 later; counted with the rest, one such rejection cut
        # the slot's estimate ~14% for its life
        self.fresh = np.zeros(num_slots, dtype=bool)  # [N] admitted, no verification of drafts counted yet
        self._first_totals = np.zeros((2, k_max))  # [reaches, successes][K]: worker totals of first verifications
        self._k_totals = np.zeros((2, k_max, k_max))  # [.., k - 1, j]: worker totals of steps after one allowed k
        # [k - 1, j]: sum over the reaches in _k_totals of the slot's acceptance less the prior, each as known when
        # counted (prior_by_k: what a k's steps should have accepted, given the slots and stretches they ran in)
        self._k_shift = np.zeros((k_max, k_max))
        # [sum x, sum y, sum x y, sum x^2, reaches] over counted reaches: x the slot's acceptance less the prior as known
        # before the step, y the outcome less the prior (carry(): how much of a slot's lead or lag its next
        # verifications keep); carry_prior: the weight of the prior slope 1 (the plain shrunk estimate), in units of
        # x's sum of squares
        self._carry = np.zeros(5)
        self.carry_prior = carry_prior
        self._scalars = np.ones(1)  # [pending_decay]: decay owed by successes / reaches for steps no slot drafted in
        self.prev_allowed = np.zeros(num_slots, dtype=np.int64)  # [N] k_b of the slot's last verified step (0: none)
        self._below_k = (np.arange(k_max)[None, :] < np.arange(k_max + 1)[:, None]).astype(np.float64)  # [K + 1, K]
        self.costs = StepCostModel()  # or ProfiledCosts (use_profile)
        self._drain_tables: dict[tuple[int, bytes], np.ndarray] = {}  # _drain_costs' tables (profiled costs)
        self._counted = False  # _costs_counted, once true
        self.profiled = False  # costs from a profile measured at worker start: no probes, no cost exploration
        # profiled: verifications each K >= 1 must anchor before the first exploitation choice (_acceptance_warm)
        self.warm_reaches, self._warm = warm_reaches, False
        self._fill = np.zeros((2, k_max))  # [offered, fed][j]: steps allowed draft j, and those that fed it
        # whether the proposer may feed fewer drafts than allowed (a lookup; MTP with_ngram's n-gram part): else every
        # step feeds what it is allowed, the fill stays 1, and observe skips counting it
        self.counts_fill = counts_fill
        self._fill_stale = False  # _fill changed since the cost model was told (_sync_fill)
        # [W, 2, K] (reaches, successes) of the last W finished requests over their whole life, oldest first, the
        # first _num_profiles rows filled (population_spread; add_profile)
        self.profile_window, self.profile_min_reaches = 128, 3.0
        self._profiles, self._num_profiles = np.zeros((self.profile_window, 2, k_max)), 0
        self._spread: np.ndarray | None = None
        self.allowed = np.zeros(num_slots, dtype=np.int64)  # [N] k_b of the step being verified next (0: not decoding)
        self.draftless = np.zeros(num_slots, dtype=bool)  # [N] admitted draft-less by this policy (cap 0 for life)
        self.admitted = np.zeros(num_slots, dtype=bool)  # [N] admit() has decided the slot's request
        self.num_draftless = 0  # requests admitted draft-less (metrics, tests)
        self._admission: tuple[tuple, bool] | None = None  # (key, decision) of this step's admissions
        self.recent_k: list[int] = []  # the batch K of the last two choices, newest last
        self.recent_draftless: list[bool] = []  # whether a live slot was draft-less at each of them
        self.held: tuple[int, int] | None = None  # (K, steps left) of an exploration hold
        self.num_choices = 0  # decode steps chosen for
        self.last_k = 0  # the batch K of the last choice (metrics, tests)
        # the compiled arithmetic over the arrays above (counting, E by K, the drain objective)
        self._host = PolicyHost(slot_counts=self._slot_counts, slot_raw=self._slot_raw, totals=self._totals,
                                first_totals=self._first_totals, k_totals=self._k_totals, k_shift=self._k_shift,
                                carry=self._carry, fill=self._fill, scalars=self._scalars, allowed=self.allowed,
                                prev_allowed=self.prev_allowed, cap=self.cap, fresh=self.fresh)

    def use_profile(self, profile) -> None:
        """Step costs from `profile` (a CostProfile measured at worker start, docs/adaptive.md "Profiled step
        costs") from now on, instead of from the steps served: every K is measured before the first request, so
        there is no warm-up turn of every K and no probe of a draft-less batch size; explorations remain, for the
        acceptance of each K."""
        from specworker.spec_decode.cost_profile import ProfiledCosts

        self.costs = ProfiledCosts(profile)
        self._drain_tables = {}  # the tables of the profile before it
        self._counted = False
        self.profiled = True
        self.decision = None

    # ---- per-slot state follows the slots ----
    def on_insert(self, slot: int, request: SlotRequest) -> None:
        super().on_insert(slot, request)
        self._reset(slot)
        self.fresh[slot] = True

    def on_clear(self, slot: int) -> None:
        evidence = self.slot_raw[:, slot]  # [2, K] (reaches, successes): the finished request's whole evidence
        if evidence[0, 0] >= self.profile_min_reaches:
            self.add_profile(evidence)
        super().on_clear(slot)
        self._reset(slot)

    @property
    def profiles(self) -> list[np.ndarray]:
        """The finished requests' [2, K] (reaches, successes) that population_spread reads, oldest first (copies)."""
        return list(self._profiles[:self._num_profiles].copy())

    def add_profile(self, evidence: np.ndarray) -> None:
        """A finished request's [2, K] (reaches, successes) over its life, into the last `profile_window` kept."""
        if self._num_profiles == len(self._profiles):
            self._profiles[:-1] = self._profiles[1:]
        else:
            self._num_profiles += 1
        self._profiles[self._num_profiles - 1] = evidence
        self._spread = None

    def population_spread(self) -> np.ndarray:
        """[K + 1] how far apart requests are (an n-gram lookup finds a lot in one prompt and nothing in another): the
        standard deviation of E(K) over the last `profile_window` finished requests, each from its own acceptance
        (its counts over its whole life, not decayed), less what sampling noise alone would spread them by. Per
        request, position j reads s_j / n_j (the worker prior where it was never reached, not 0), with the binomial
        noise variance a_j (1 - a_j) / max(n_j, 1), carried to E(K) by its derivative; the spread is
        sqrt(max(Var(E) - mean noise, 0)). On a replay where every request accepts 0.5 / 0.4 / 0.3, raw ratios of
        decayed counts (and 0 for unreached positions) read E(1) 0.12 apart, and the drain then put the slowest slot
        so late that K = 0 won where fixed K = 1 drains 7% sooner. 0 until two requests are known; recomputed when
        one is filed. Computed by PolicyHost.spread (the numpy formulas are tests/spec_decode/policy_reference.py's)."""
        if self._spread is None:
            self._spread = self._host.spread(self._profiles, self._num_profiles)
        return self._spread

    def on_swap(self, i: int, j: int) -> None:
        super().on_swap(i, j)
        self.decision = None  # its per-slot k_b belong to the old rows
        for a in (self.allowed, self.prev_allowed, self.draftless, self.fresh, self.admitted):
            a[[i, j]] = a[[j, i]]
        self.slot_counts[:, [i, j]] = self.slot_counts[:, [j, i]]
        self.slot_raw[:, [i, j]] = self.slot_raw[:, [j, i]]

    def on_move(self, src: int, dst: int) -> None:
        super().on_move(src, dst)
        self.decision = None
        for a in (self.allowed, self.prev_allowed, self.draftless, self.fresh, self.admitted):
            a[dst] = a[src]
        self.slot_counts[:, dst] = self.slot_counts[:, src]
        self.slot_raw[:, dst] = self.slot_raw[:, src]
        self._reset(src)

    def _reset(self, slot: int) -> None:
        self.decision = None
        self.slot_counts[:, slot] = 0.0
        self.slot_raw[:, slot] = 0.0
        self.allowed[slot] = 0
        self.prev_allowed[slot] = 0
        self.draftless[slot] = False
        self.fresh[slot] = False
        self.admitted[slot] = False

    def admit(self, slot: int, num_slots: int, remaining: np.ndarray | None = None,
              prompt_left: np.ndarray | None = None) -> bool:
        """Draft-less when K = 0 is settled at num_slots (_no_drafts_verdict, unless _probed re-measures it; on the
        drain objective when `remaining` says the batch drains, the draft prefill of `prompt_left` priced in); never a
        pinned request (its tokens depend on k_b, so timing must not decide it). The admissions of one step share one
        decision (the batch they join is the same; a drain prediction for 64 slots is ~0.2 ms, 64 of them 12 ms)."""
        if self.cap[slot] > 0 and not self.pinned[slot] and self._admission_settles(num_slots, remaining,
                                                                                       prompt_left):
            self.cap[slot] = 0
            self.draftless[slot] = True
            self.num_draftless += 1
        self.admitted[slot] = True
        return self.may_draft(slot)

    def _admission_settles(self, num_slots: int, remaining: np.ndarray | None,
                           prompt_left: np.ndarray | None = None) -> bool:
        """_no_drafts_verdict and _probed, decided once per step's admissions: the memo is dropped at every choose,
        and keyed by the batch and the evidence (verifications of position 1, cost observations) besides."""
        self._sync_fill()
        key = (num_slots, None if remaining is None else np.asarray(remaining).tobytes(),
               None if prompt_left is None else np.asarray(prompt_left).tobytes(), float(self.total_reaches[0]),
               sum(self.costs.count.values()))
        if self._admission is None or self._admission[0] != key:
            verdict = self._no_drafts_verdict(num_slots, remaining, self._draft_prefill_seconds(prompt_left))
            self._admission = (key, self._probed(num_slots, *verdict))
        return self._admission[1]

    def _draft_prefill_seconds(self, prompt_left: np.ndarray | None) -> float:
        """Proposer seconds the prompts still to prefill cost if they draft (docs/adaptive.md, "The draft
        prefill"): prefill_per_token (the cost profile's) times the prompt tokens left of the slots not admitted yet
        (this step's admissions among them) that may draft. A slot admitted in an earlier step drafts or not as it
        was admitted: its prefill is not this decision's."""
        if prompt_left is None:
            return 0.0
        open_ = ~self.admitted & (self.cap > 0) & ~self.pinned
        return float(self.costs.prefill_per_token * np.asarray(prompt_left)[open_].sum())

    def _probed(self, num_slots: int, settled: bool, runner_up: int) -> bool:
        """`settled`, unless no K >= 1 cost was filed near num_slots (kernel weight >= 0.5) in the last
        `probe_interval` steps: then a probe, admission with drafts until one is, and the batch holds the runner-up K
        for `probe_hold` steps once every live slot may draft (_choose). A batch size whose requests are all draft-less
        files no K >= 1 cost, so without probes a K = 0 settled on a few noisy warm-up steps is never re-measured
        (SmolLM2 at 4 slots: T(4, 1) / T(4, 0) read 1.62 from the warm-up, 1.42 once measured; fixed k = 1 ran at
        1.09x of no drafts). A probe that leaves K = 0 settled doubles the interval (up to `probe_max`); one that
        ends it returns the interval to `probe_after`."""
        if self.profiled:  # costs were measured at start, for every K and batch size: nothing to re-measure
            return settled
        if not settled:
            if self.probe is not None:  # the probe's costs (or other evidence) favour drafts
                self.probe, self.probe_k, self.probe_interval = None, None, self.probe_after
            return False
        last = max((at for b, at in self.k_cost_at.items() if self.costs.nearness(b, num_slots) >= 0.5), default=0)
        if self.probe is not None and last > self.probe[2]:  # the probe measured, and K = 0 is still settled
            self.probe, self.probe_k = None, None
            self.probe_interval = min(2 * self.probe_interval, self.probe_max)
        if self.clock - last < self.probe_interval:
            return True
        if self.probe is None:
            self.probe, self.probe_k, self.probe_fresh = (num_slots, runner_up, self.clock), runner_up, set()
            self.num_probes += 1
        return False

    def _no_drafts_verdict(self, num_slots: int, remaining: np.ndarray | None,
                           draft_prefill: float = 0.0) -> tuple[bool, int]:
        """(settled, the K >= 1 nearest to K = 0 at the bounds below). K = 0 is settled at batch size num_slots when
        every K has `need` steady observations, with a summed kernel weight >= 1 at num_slots (the prediction there
        rests on near observations, not on far ones), the worker totals hold `admit_min_reaches` verifications of
        position 1, and (docs/adaptive.md, "Draft-less admission"):
        - K = 1 does not beat K = 0 by `switch_margin` even at its optimistic acceptance (optimistic_prior_by_k,
          `confidence` standard errors up) and, with costs learnt while serving, its cost's lower bound
          (relative_error, `confidence` standard errors down). A batch that may draft and runs K = 0 explores K = 1,
          so keeping the drafts is how that doubt is ever resolved: on SmolLM2's MTP head at 4 slots the warm-up's
          verifications read position 1 as 0.54 (0.61 once K = 1 ran), D(1) / D(0) 1.04-1.09 on them, every request
          was admitted draft-less, where fixed k = 1 is 1.05-1.08x of `none`. With profiled costs nothing served
          narrows the profile's cost doubt, so K = 1's is judged as K >= 2's is (below), at its optimistic
          acceptance.
        - No K >= 2 is expected to beat K = 0 by more than keeping drafts costs: its regret E[max(0, gain over
          K = 0)], the gain taken as normal about the point estimate with the acceptance and cost doubts above
          combined (not both at once), must be at most `switch_margin` plus explore_overhead times the probability
          that K = 0 wins. A batch at K = 0 never explores K >= 2, so their doubt would never shrink; at both bounds
          at once the tiny pair at 64 slots read K = 2's drain 6-10% faster (6-10% slower at the point estimates),
          every batch was admitted with drafts, paid the MTP draft prefill and the explorations, and adaptive ran
          0.93x of `none` (draft-less: 0.99x).
        The objective is the one the steps will be chosen by: the rate at the prior; when the batch drains
        (`remaining` given, more than one slot left), the drain time (drain_seconds), the slots as they are (the new
        ones at the prior). (A settled choice, not the current one: a draft-less request cannot draft later, so
        neither an exploration nor an extrapolation may make it so.)"""
        if num_slots < 1 or not self._costs_counted():
            return False, 1
        # The acceptance must rest on evidence too: after one request's exploration the Laplace-smoothed totals hold a
        # handful of verifications (SmolLM2's MTP head, held-out P1 = 0.52, read 0.27 from its first ones), and an
        # irreversible K = 0 settled on them left 1.21x unused at batch 1.
        if self.total_reaches[0] < self.admit_min_reaches:
            return False, 1
        if self.costs.support(num_slots, self.k_max).min() < 1.0:
            return False, 1
        # the cost's relative doubt, `confidence` standard errors (at most half): a K seen in a few noisy steps
        cost_error = np.minimum(self.confidence * self.costs.relative_error(num_slots, self.k_max), 0.5)
        cost_error[0] = 0.0
        live = None if remaining is None else np.asarray(remaining) > 0
        if live is not None and live.sum() > 1:
            remaining = np.asarray(remaining)
            # every K >= 1 also pays the draft prefill of the prompts still to come (_draft_prefill_seconds)
            prefill = np.where(np.arange(self.k_max + 1) > 0, draft_prefill, 0.0)
            point = self.drain_seconds(live, remaining) + prefill  # [K + 1]
            optimistic = self.drain_seconds(live, remaining, optimistic=True) + prefill
            # D is linear in each K's step cost: at its lower bound, D (1 - error). Ties go to no drafts: a draining
            # batch admitted with drafts pays the explorations and the policy's per-step work for its whole drain
            bound = optimistic * (1 - cost_error)
            first, runner_up = point[0] <= (1 + self.switch_margin) * bound[1], 1 + int(np.argmin(bound[1:]))
            gain, doubt = point[0] - point, np.hypot(point - optimistic, point * cost_error)
            gain[1], doubt[1] = point[0] - optimistic[1], optimistic[1] * cost_error[1]
        else:
            # relative costs: while only K = 0 runs, the load may change since K >= 1 was last measured
            seconds = self.costs.predict_relative(num_slots, self.k_max)
            point = self.expected_by_k(self.prior()[None, :])[0][0] / seconds  # [K + 1]; every slot at the prior
            optimistic = self.expected_by_k(self.prior()[None, :], self.optimistic_prior_by_k())[0][0] / seconds
            bound = optimistic / (1 - cost_error)
            first, runner_up = point[0] >= (1 + self.switch_margin) * bound[1], 1 + int(np.argmax(bound[1:]))
            gain, doubt = point - point[0], np.hypot(optimistic - point, point * cost_error / (1 - cost_error))
            gain[1], doubt[1] = optimistic[1] - point[0], optimistic[1] * cost_error[1] / (1 - cost_error[1])
        # K = 1 at its optimistic acceptance; its cost doubt too where the costs are learnt while serving (a batch at
        # K = 0 explores K = 1, which measures both), as regret where they come from the profile (nothing served
        # narrows that doubt); K >= 2 as regret only
        judged = slice(1 if self.profiled else 2, None)
        if not (first or self.profiled) or self.k_max < judged.start:
            return bool(first), runner_up
        regret, wins = expected_excess(gain, doubt)
        # keeping drafts costs the explorations only where K = 0 then wins: at most where the likeliest K >= 1 loses
        allowed = self.switch_margin + self.explore_overhead(num_slots) * (1.0 - wins[1:].max())
        return bool(regret[judged].max() <= allowed * point[0]), runner_up

    def explore_overhead(self, num_slots: int) -> float:
        """The share of a batch's time its explorations take while it may draft and K = 0 is chosen: `hold` steps
        at K = 1 every `explore_interval` steps, each T(B, 1) / T(B, 0) - 1 dearer than a step at K = 0 (the tiny
        pair at 64 slots: 2 x 1.0 / 32, 6%)."""
        if self.k_max < 1:
            return 0.0
        seconds = self.costs.predict_relative(num_slots, 1)
        return self.hold * max(seconds[1] / max(seconds[0], 1e-12) - 1.0, 0.0) / self.explore_interval

    # ---- estimates ----
    def observe(self, step: PolicyStep) -> None:
        """Acceptance counts from this step's verify results (PolicyHost.count); the previous step's seconds into the
        cost model when its cycle held one K (its verified drafts and its substeps chosen alike).

        Per slot b: positions count from what the slot was allowed (max(k_b, drafted)), not what its proposer
        drafted: a lookup proposer that finds nothing drafts fewer, and E_b(K) must be the tokens a step *allowed*
        K brings, as T(B, K) is that step's cost. Position j (0-based) is reached when j < min(allowed, emitted),
        accepted when j < min(allowed, emitted - 1); a slot that emitted nothing (paused, not decoding) adds
        nothing. The slot counts are decayed by `decay` (times the decay owed by steps in which no slot was allowed
        or drafted a draft: those count nothing) and gain the step's; the worker totals gain them, and so do the
        per-k totals under the slot's previous k_b (the k that placed the anchor: a fully accepted step of k drafts
        moves it k + 1 tokens on, and the acceptance seen from it depends on where it lies; on the tiny pair,
        position 1 after a fully accepted step: 0.65 at k = 3, 0.94 at k = 2), and k_shift and the carry sums the
        slot's acceptance above the prior as known before the step. A request's first verification of drafts since
        admission goes to first_totals alone (`fresh`; docs/adaptive.md, "First verifications"). With a lookup
        proposer and profiled costs, the fill counts (offered, fed) per position too."""
        if self._host.count(step.drafted, step.emitted, self.decay, self.prior_weight, by_anchor=self.by_anchor,
                            count_fill=self.profiled and self.counts_fill):
            self._fill_stale = self._fill_stale or (self.profiled and self.counts_fill)
        self._observe_cost(step)

    def _sync_fill(self) -> None:
        """The fill into the profiled costs, when counted since (ProfiledCosts.fill: a step costs what it feeds):
        the share of steps allowed draft j that fed one (a lookup finds none in many steps; MTP always drafts),
        Laplace-smoothed towards 1 (the profile's own full drafts). Before the costs are read for a choice."""
        if self._fill_stale:
            self._fill_stale = False
            self.costs.set_fill((self._fill[1] + 1.0) / (self._fill[0] + 1.0))

    @property
    def pending_decay(self) -> float:
        """The decay the slot counts owe for steps in which no slot was allowed or drafted a draft."""
        return float(self._scalars[0])

    # the counts (read and written in place by tests and metrics)
    slot_counts = property(lambda self: self._slot_counts)  # [reaches, successes][N, K] decayed
    slot_raw = property(lambda self: self._slot_raw)  # [reaches, successes][N, K] not decayed
    totals = property(lambda self: self._totals)  # [reaches, successes][K]: worker totals (the prior)
    k_totals = property(lambda self: self._k_totals)  # [.., k - 1, j]: totals of steps after k
    k_shift = property(lambda self: self._k_shift)  # [k - 1, j]: the slots' excess, steps after k
    first_totals = property(lambda self: self._first_totals)  # [2, K]: of first verifications
    carry_totals = property(lambda self: self._carry)  # [sum x, y, x y, x^2, reaches] (carry)

    def _observe_cost(self, step: PolicyStep) -> None:
        """The previous step's seconds into the cost model, when its cycle held one K."""
        self.clock += 1
        steady = len(self.recent_k) == 2 and self.recent_k[0] == self.recent_k[1]
        partial = self.recent_k[-1:] != [0] and any(self.recent_draftless)  # drafted for fewer slots than T assumes
        if step.cost is not None and steady and not partial and step.cost.num_slots > 0:
            k, b = self.recent_k[1], step.cost.num_slots
            # a probe's first steady step of K replaces K's stale rows near its batch size (_probed)
            fresh = (k > 0 and self.probe is not None and k not in self.probe_fresh
                     and self.costs.nearness(b, self.probe[0]) >= 0.5)
            self.costs.add(k, step.cost, replace_near=fresh, own_seconds=self._own_seconds)
            if fresh:
                self.probe_fresh.add(k)
            if k > 0:
                self.k_cost_at[b] = self.clock

    # views of the counts (tests, metrics)
    reaches = property(lambda self: self.slot_counts[0])  # [N, K] decayed times position j was reached
    successes = property(lambda self: self.slot_counts[1])  # [N, K] decayed accepted drafts at position j
    total_reaches = property(lambda self: self.totals[0])
    total_successes = property(lambda self: self.totals[1])
    k_reaches = property(lambda self: self.k_totals[0])
    k_successes = property(lambda self: self.k_totals[1])

    def prior(self) -> np.ndarray:
        """[K] the worker's Laplace-smoothed acceptance per position (totals, not decayed)."""
        return _laplace(self.totals)

    def prior_by_k(self) -> np.ndarray:
        """[K, K] row k - 1: the worker's acceptance per position in steps after a step that allowed k drafts (the
        steady state of k), read against what those steps' slots accepted at the time: p_j (A_kj + w p_j) /
        (R_kj p_j + X_kj + w p_j), X_kj (k_shift) the sum over those reaches of the slot's acceptance less the prior,
        both as known when counted. A k that ran while its slots accepted more (or less) than the prior, a stretch
        of easy text or a hard prompt, is not credited (or blamed) for it: the ratio to p_j is its own. Shrunk to
        prior() with weight k_prior_weight (no such step yet: prior()); X = 0 gives (A + w p) / (R + w).
        docs/adaptive.md, "Acceptance depends on the K that placed the anchor"."""
        if not self.by_anchor:
            return np.tile(self.prior(), (self.k_max, 1))
        w, p, (reaches, successes) = self.k_prior_weight, self.prior(), self.k_totals
        expected = reaches * p + self.k_shift  # successes at the acceptance of the slots when they verified
        return np.minimum(p * (successes + w * p) / (expected + w * p), 1.0)

    def acceptance(self) -> np.ndarray:
        """[N, K] conditional acceptance per slot and position, for no particular k: the worker prior plus carry()
        times the slot's lead over it (its prior-weighted EMA less the prior)."""
        prior = self.prior()
        own = _shrunk(self.slot_counts, prior, self.prior_weight, self.pending_decay)
        return prior + self.carry() * (own - prior)

    def carry(self) -> float:
        """How much of a slot's lead over the worker prior (its shrunk estimate less the prior) its next verifications
        keep, learnt from the verifications counted so far: the least-squares slope of their outcomes (accepted, less
        the prior) on the lead as known before them, with an intercept (the prior moves while it is learnt, and a
        common offset of every outcome is not the lead's), (Sxy + c) / (Sxx + c) over the centred sums, shrunk to the
        prior slope 1 (the plain estimate) by c = `carry_prior` (2: what 200 reaches at a lead of 0.1 weigh), clipped
        to [0, 1]. Where requests accept alike, a slot's recent run of rejections says little of its next steps: on
        the tiny pair at 16 slots the slots that finish last read E(2) 2.33 from their recent steps and then emitted
        2.60 a step, and the drain objective switched the tail to K = 0 (docs/adaptive.md, "What a slot's lead
        carries"). Where they differ (a hard prompt, a copied span) the slope stays near 1."""
        x, y, xy, xx, reaches = self.carry_totals
        if reaches <= 0.0:
            return 1.0
        covariance, variance = xy - x * y / reaches, xx - x * x / reaches
        return min(max((covariance + self.carry_prior) / (variance + self.carry_prior), 0.0), 1.0)

    def optimistic_prior_by_k(self) -> np.ndarray:
        """[K, K] prior_by_k raised by `confidence` standard errors (its k_totals reaches plus the k_prior_weight
        pseudo-reaches), at most 1: the best a k's acceptance plausibly is on the evidence so far."""
        return self._prior_by_k_bound(1.0)

    def pessimistic_prior_by_k(self) -> np.ndarray:
        """[K, K] prior_by_k lowered as optimistic_prior_by_k raises it, at least 0: the worst plausible."""
        return self._prior_by_k_bound(-1.0)

    def _prior_by_k_bound(self, sign: float) -> np.ndarray:
        p = self.prior_by_k()
        reaches = self.k_totals[0] if self.by_anchor else self.totals[0]  # [K, K] or [K]
        bound = p + sign * self.confidence * np.sqrt(p * (1 - p) / (reaches + self.k_prior_weight))
        return np.clip(bound, 0.0, 1.0)

    def expected_by_k(self, accept: np.ndarray, by_k: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(E [N, K + 1], reach [K + 1, N, K]): E[b, k] = tokens a step allowing slot b k drafts emits, with its
        acceptance a_bj scaled by r_kj = by_k[k - 1, j] / prior[j] (at most 1); reach[k] = P(draft j accepted)
        under that scaling. Args: accept [N, K] (acceptance()); by_k [K, K] (default prior_by_k())."""
        by_k = self.prior_by_k() if by_k is None else by_k
        ratio = np.concatenate([np.ones((1, self.k_max)), by_k / self.prior()])  # [K + 1, K]; k = 0: 1
        reach = np.cumprod(np.minimum(accept[None] * ratio[:, None, :], 1.0), axis=2)  # [K + 1, N, K]
        # E[b, k] = 1 + sum_{j < k} reach[k, b, j]
        gain = 1.0 + (reach * self._below_k[:, None, :]).sum(axis=2).T  # [N, K + 1]
        return gain, reach

    # ---- the choice ----
    def choose(self, step: PolicyStep) -> np.ndarray:
        start = self.host_clock()
        try:
            return self._choose_step(step)
        finally:
            self._own_seconds = self.host_clock() - start  # inside the step whose cost the next choose observes

    def _choose_step(self, step: PolicyStep) -> np.ndarray:
        self._admission = None  # the next step's admissions decide afresh
        self.observe(step)
        signature = (step.live.tobytes(), self.pinned.tobytes(), self.cap.tobytes(), self.draftless.tobytes())
        kept = self._kept_choice(signature)
        if kept is not None:
            return kept
        nothing = self._no_draft_choice(signature, step.live)
        if nothing is not None:
            # no live slot may draft (draft-less, overrides 0: the common step at large batch): what the general path
            # below gives, in fewer numpy calls
            out, draftless = nothing
            self.last_k = 0
            self.allowed[:] = 0
            self.recent_k = (self.recent_k + [0])[-2:]
            self.recent_draftless = (self.recent_draftless + [draftless])[-2:]
            return out.copy()
        live = step.live & ~self.pinned
        self._decided = None
        out = super().choose(step)
        self.allowed = np.where(step.live, out, 0)  # what each slot may draft for the step verified next
        self.recent_k = (self.recent_k + [int(out[live].max(initial=0))])[-2:]
        self.recent_draftless = (self.recent_draftless + [bool(self.draftless[live].any())])[-2:]
        if self._decided is not None:  # a decision's output: the next steps of the same signature repeat it
            self._kept = (signature, self._decided, out.copy(), self.allowed.copy(), self.recent_k[-1],
                          self.recent_draftless[-1])
        return out

    def _no_draft_choice(self, signature: tuple[bytes, ...], live: np.ndarray) -> tuple[np.ndarray, bool] | None:
        """(k_b: 0 for the live slots, the cap elsewhere; whether a live slot is draft-less) when no slot is pinned
        and no live slot may draft, else None. A function of the signature (live slots, pins, caps, draft-less
        slots), kept for the last one: a draft-less batch's steps repeat it, and each numpy call costs ~5 us inside
        a worker (the ~8 here were ~40 us of a 11 ms step at 32 slots)."""
        if self._no_drafts is not None and self._no_drafts[0] == signature:
            return self._no_drafts[1]
        live = live & ~self.pinned
        answer = None
        if not self.pinned.any() and live.any() and not self.cap[live].any():
            answer = (np.where(live, 0, self.cap), bool(self.draftless[live].any()))
        self._no_drafts = (signature, answer)
        return answer

    def _kept_choice(self, signature: tuple[bytes, ...]) -> np.ndarray | None:
        """What choose returns when _choose would keep the current decision (same live slots, pins, caps and
        draft-less slots as the step that made or last kept it, no exploration due, fewer than `keep_period`
        steps): the same output, with _choose's bookkeeping, in a few Python operations instead of ~20 numpy calls
        (~40 us of a 7 ms step); None otherwise."""
        kept, decision = self._kept, self.decision
        if (kept is None or decision is None or kept[0] != signature or kept[1] is not decision[3]
                or self.held is not None or decision[1] >= self.keep_period
                or self.num_choices + 1 - self.last_explored >= self.explore_interval
                or not self._costs_counted()):
            return None
        self.num_choices += 1
        self._keep_decision()
        self.allowed = kept[3]  # copied into the buffer (_Fixed)
        self.recent_k = (self.recent_k + [kept[4]])[-2:]
        self.recent_draftless = (self.recent_draftless + [kept[5]])[-2:]
        return kept[2].copy()

    def _keep_decision(self) -> np.ndarray:
        """One more step of the current decision (same key): its step count + 1, last_k its K; returns its k_b."""
        key, steps, k, k_b = self.decision
        self.decision = (key, steps + 1, k, k_b)
        self.last_k = k
        return k_b

    def _choose(self, step: PolicyStep) -> np.ndarray | int:
        self._sync_fill()
        live = step.live & ~self.pinned
        if not live.any():
            return self.cap
        if not self.cap[live].any():  # no live slot may draft (draft-less, overrides 0): nothing to choose or explore
            self.last_k = 0
            return 0
        self.num_choices += 1
        ready = self._costs_counted() and self._acceptance_warm()
        if self.held is None and self.probe_k is not None and not self.draftless[live].any():
            # a probe's measurement (_probed), once no live slot is draft-less: the live slots or the draft-less flags
            # change on the way there, and so the signature a kept decision needs (_kept_choice)
            self.held, self.probe_k = (self.probe_k, self.probe_hold), None
        if self.held is None:
            self.held = self._exploration(ready, int(live.sum()))
        if self.held is not None:
            self.decision = None  # decide afresh after the exploration
            k, left = self.held
            self.held = (k, left - 1) if left > 1 else None
            self.last_k = k
            return np.full_like(self.cap, k)
        key = (live.tobytes(), self.cap.tobytes())
        if self.decision is not None and self.decision[0] == key and self.decision[1] < self.keep_period:
            # the same slots and caps as at the last decision, a few steps ago: keep it (a decision is ~0.1-0.2 ms of
            # numpy, a few % of a small model's step; the acceptance it rests on moves slowly)
            self._decided = self._keep_decision()
            return self._decided
        remaining = step.remaining_tokens()  # built here only: a kept decision or the no-drafts path reads none
        if remaining is not None and live.sum() > 1:  # one slot: the same choice as the rate's
            best, k_b = self.best_k_draining(live, remaining)
        else:
            seconds, verify = self.predicted_costs(live)
            best, k_b = self.best_k(live, seconds, verify)
        self.decision = (key, 1, best, k_b)
        self._back_off_decisions(best, k_b)
        self.last_k = best
        self._decided = k_b
        self._demote(best, live, remaining)
        return k_b

    def _demote(self, best: int, live: np.ndarray, remaining: np.ndarray | None) -> None:
        """After `demote_after` exploitation decisions of K = 0 in a row, where K = 0 is also settled for the live batch
        as admission judges it (_no_drafts_verdict: K = 1's bounds and the regret rule, on the drain objective when the
        batch drains), the live slots that may still draft become draft-less, as if admitted so: no more explorations,
        and the no-drafts path of choose. Profiled costs only. The point estimates alone are not enough: on SmolLM2's
        MTP head at 4 slots they read D(1) / D(0) = 1.045, two decisions demoted the batch, and every later batch ran
        K = 0 (1.00x of `none`, where fixed k = 1 read 1.00-1.22x). A batch admitted with drafts whose decisions then
        keep choosing K = 0 pays for every exploration of K = 1 (tiny pair, 16 slots, MTP: 6 of 94 steps at 1.8x the
        cost). Off (0) for lookup proposers, whose acceptance follows the text a request has reached."""
        self.zero_decisions = self.zero_decisions + 1 if best == 0 else 0
        if not self.demote_after or self.zero_decisions < self.demote_after or not self.profiled:
            return
        if not self._no_drafts_verdict(int(live.sum()), remaining)[0]:
            return
        rows = live & (self.cap > 0)  # live: not pinned
        self.cap[rows] = 0
        self.draftless[rows] = True
        self.num_demoted += int(rows.sum())
        self.zero_decisions = 0

    def _back_off_decisions(self, best: int, k_b: np.ndarray) -> None:
        """The keep period: doubled (up to `redecide_max`) when a decision repeats the last one made (K and every
        k_b), back to `redecide_every` when it differs: a settled batch re-decides every 32 steps, not every 8, and a
        change (acceptance, costs, the batch) is seen within `redecide_every` steps of the decision after it."""
        last = self._last_decision
        same = last is not None and last[0] == best and np.array_equal(last[1], k_b)
        self.keep_period = min(2 * self.keep_period, self.redecide_max) if same else self.redecide_every
        self._last_decision = (best, k_b)

    def predicted_costs(self, live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """([K + 1] T, [K + 1] V) seconds of next step for K = 0..k_max at B = the live slots."""
        return self.costs.predict(int(live.sum()), self.k_max)

    def _exploration(self, ready: bool, num_live: int) -> tuple[int, int] | None:
        """(K, hold) to explore now, or None. A K above the current one that the last decision doubted
        (_doubtful_switch) is the one explored, for 1 + ceil(doubt_reaches / B) steps: its anchored evidence is what
        the doubt lacks, and a 2-step hold brings one anchored verification a slot (docs/adaptive.md, "A doubted K is
        explored next, longer")."""
        if not ready and self.profiled:  # the K >= 1 whose steps anchored the fewest verifications, smallest first
            return 1 + int(np.argmin(self._warm_counts())), self.hold
        if not ready:  # the K with the fewest steady observations, smallest first
            counts = [self.costs.count.get(k, 0) for k in range(self.k_max + 1)]
            return int(np.argmin(counts)), self.hold
        if self.num_choices - self.last_explored >= self.explore_interval:  # a neighbour, alternately above and below
            self.last_explored, self.explored = self.num_choices, True
            self.num_explorations += 1
            if self.doubted is not None:
                k, self.doubted = self.doubted, None
                return k, 1 + -(-self.doubt_reaches // max(num_live, 1))
            side = 1 if self.num_explorations % 2 else -1
            k = self.last_k + side if 0 <= self.last_k + side <= self.k_max else self.last_k - side
            if self.unsettled is not None and self.unsettled[0] == self.last_k and len(self.unsettled[1]) == 1:
                k = self.unsettled[1][0]  # the other neighbour is ruled out: exploring it would only cost
            return int(np.clip(k, 0, self.k_max)), self.hold
        return None

    def _costs_counted(self) -> bool:
        """Whether every K has `need` steady cost observations (counts only grow: once true, kept)."""
        if not self._counted:
            self._counted = all(self.costs.count.get(k, 0) >= self.need for k in range(self.k_max + 1))
        return self._counted

    def _acceptance_warm(self) -> bool:
        """Whether each K >= 1 has anchored `warm_reaches` verifications of position min(K, 2) (_warm_counts;
        profiled costs only: without a profile the cost warm-up's turns of every K bring them). The worker prior alone
        reads a position never reached as 0.5: on the tiny pair at 4 slots it chose K = 1 over K = 2 (E(2) 2.35 at
        the prior, 2.72 measured) for two warm-up runs and two timed ones, until explorations had measured position
        2."""
        if self._warm or not self.profiled:
            return True
        self._warm = bool((self._warm_counts() >= self.warm_reaches).all())
        return self._warm

    def _warm_counts(self) -> np.ndarray:
        """[K] verifications each K >= 1 anchored of position min(K, 2): K >= 2's choice turns on position 2, which a
        step reaches only after position 1 was accepted. Counting position 1 only, SmolLM2's MTP head at batch 1
        left the warm-up with 6 reaches of position 2 after a K = 2 step (accepted at ~0.5 in the steps after), read
        K = 2 at the rate of K = 1 and stayed at K = 1 through five timed runs (0.87 of fixed2)."""
        k = np.arange(self.k_max)
        if not self.by_anchor:  # any step's verifications count: position 1 for K = 1, position 2 for K >= 2
            return self.totals[0, np.minimum(k, 1)]
        return self.k_totals[0, k, np.minimum(k, 1)]

    def _neighbours_settled(self, k: int, rows: np.ndarray, seconds: np.ndarray, point: np.ndarray | None) -> bool:
        """Whether K = k's rate at its point estimate beats each neighbour K = k +- 1's optimistic rate (from
        optimistic_prior_by_k): then exploring the neighbours less often loses little. A neighbour whose acceptance
        rests on few steps anchored by its own drafts has a wide bound and keeps being explored every
        `explore_every` steps; so does one whose cost rests on fewer than `settle_costs` steady observations (two
        load spikes among the warm-up's three read T(4, 2) at 2.4x its cost, which no later exploration corrected
        once the interval had backed off). point: the [N, K + 1] point-estimate gains when the caller has them.
        Keeps the neighbours not ruled out in `unsettled`: where one of two is, explorations go to the other alone (on
        the tiny pair at one slot K = 1's bound is 20% below K = 2's rate while K = 3's stays within reach, and every
        other exploration of K = 1 cost 20% of two steps' tokens)."""
        neighbours = [n for n in (k - 1, k + 1) if 0 <= n <= self.k_max]
        open_ = [n for n in neighbours if not self._cost_settled(n)]
        if len(open_) < len(neighbours):
            if point is None:
                point, _ = self._expected(0)
            bound, _ = self._expected(1)
            rate = lambda gain, n: gain[rows, np.minimum(n, self.cap[rows])].sum() / max(seconds[n], 1e-9)  # noqa: E731
            open_ += [n for n in neighbours if n not in open_ and rate(bound, n) >= rate(point, k)]
        self.unsettled = (k, tuple(sorted(open_)))
        return not open_

    def _cost_settled(self, k: int) -> bool:
        """Whether K = k's cost rests on `settle_costs` steady observations (a profile's always does)."""
        return self.costs.count.get(k, 0) >= self.settle_costs

    def drain_seconds(self, live: np.ndarray, remaining: np.ndarray, optimistic: bool = False) -> np.ndarray:
        """[K + 1] predicted seconds until every live slot has emitted its remaining tokens, the batch drafting with
        K throughout (docs/adaptive.md, "Draining batches"): slot b needs n_b = R_b / E_b(min(K, cap_b)) steps;
        with n sorted ascending, D(K) = sum_i (n_(i) - n_(i-1)) T(B - i, K), each step paying for the slots still
        decoding. n_b is random (at K = 0 exactly R_b; a step that drafts spreads it), and the i-th slot to finish
        does so later than the i-th smallest mean: n_(i) = the i-th smallest mean plus that slot's standard
        deviation times the i-th of B normal order statistics' expected values (Blom's scores; over B = 64 slots
        the last is +2.4 deviations). Slot b's steps: mean R_b / E_b, variance R_b Var_b / E_b^3 (a renewal count;
        E[X^2] of the tokens X a step emits is 1 + sum_j (2j + 1) P(draft j accepted)) plus (R_b / E_b^2)^2 times
        the variance of E_b itself: the population's spread (population_spread) shrunk by the slot's own evidence,
        prior weight m over its reaches of position 1 plus m; the order statistics made non-decreasing. T at a
        batch size between the points of a geometric grid (1, 1.4, 2, 2.8, ..., B, rounded: 2 ceil(log2 B) + 1
        points) is interpolated linearly in B, so a batch of 64 needs 12 predictions, not 64. optimistic: E at
        optimistic_prior_by_k (admission reads it at that bound too). Computed by PolicyHost.drain (the numpy
        formulas are tests/spec_decode/policy_reference.py's)."""
        live, remaining = np.ascontiguousarray(live, dtype=bool), np.ascontiguousarray(remaining, dtype=np.int64)
        gain, reach = self._expected(1 if optimistic else 0)
        size = int(np.count_nonzero(live))
        return self._host.drain(gain, reach, live, remaining, self._drain_costs(size), self.population_spread(),
                                _blom_scores(size), self.prior_weight)

    def _expected(self, sign: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """expected_by_k(acceptance(), by_k) by PolicyHost.expected, by_k prior_by_k() (sign 0), its optimistic
        (+1) or pessimistic (-1) bound: arrays reused by the next call with the same sign."""
        return self._host.expected(sign, by_anchor=self.by_anchor, prior_weight=self.prior_weight,
                                   k_prior_weight=self.k_prior_weight, confidence=self.confidence,
                                   carry_prior=self.carry_prior)

    def _drain_costs(self, size: int) -> np.ndarray:
        """[size, K + 1] T(size - i, K) of drain_seconds' segments i (the slots still decoding in each), read at the
        points of _drain_grid and interpolated linearly in B between them. Profiled costs change only with the fill
        (set_fill) and the served pairs' corrections (ProfiledCosts.version): the table is kept per (size, fill,
        version), which spares a decision ~15 numpy calls (a numpy call costs ~5 us inside a worker's step); costs
        learnt while serving change every step and are read afresh."""
        key = (size, self.costs.fill.tobytes(), self.costs.version) if self.profiled else None
        if key is not None and key in self._drain_tables:
            return self._drain_tables[key]
        grid = _drain_grid(size)
        table = np.array([self.costs.predict(int(b), self.k_max)[0] for b in grid])  # [G, K + 1]
        left = np.arange(size, 0, -1)  # slots still decoding in segment i
        seconds = np.stack([np.interp(left, grid, column) for column in table.T], axis=1)
        if key is not None:
            if len(self._drain_tables) > 256:
                self._drain_tables.clear()
            seconds.flags.writeable = False
            self._drain_tables[key] = seconds
        return seconds

    def best_k_draining(self, live: np.ndarray, remaining: np.ndarray) -> tuple[int, np.ndarray]:
        """(K, [N] k_b = min(K, cap_b)) with the least drain_seconds; the current K is kept unless another saves
        more than `switch_margin` of its time. No per-slot trimming: a draft's worth depends on whether its slot
        bounds the drain, which D(K) weighs and a per-token rate does not."""
        seconds = self.drain_seconds(live, remaining)
        best = int(np.argmin(seconds))  # ties go to the smaller K
        if self.kept_k is not None and seconds[best] > (1 - self.switch_margin) * seconds[self.kept_k]:
            best = self.kept_k
        self._settle(best, live, None)
        return best, np.minimum(best, self.cap)

    def _settle(self, best: int, live: np.ndarray, gain: np.ndarray | None, seconds: np.ndarray | None = None) -> None:
        """Keeps `best` as the current K and sets the exploration interval: back to `explore_every` when the choice
        changed; doubled when an exploration just confirmed it, once the acceptance rests on evidence (a choice of
        K = 0 made on a few early verifications gathers none but in explorations; at batch 1 an exploration of
        K - 1 brings 2 verifications anchored by it, and its acceptance can differ from K's) and each neighbour's
        optimistic rate at T(B, K) is below the choice's, or once `confirm_explorations` explorations in a row left
        the choice as it was (the neighbours' costs on `settle_costs` observations). seconds: T(B, K) (default:
        predicted at the live B)."""
        if self.kept_k is not None and best != self.kept_k:
            self.explore_interval = self.explore_every
            self.confirmations = 0
        elif self.explored and self.total_reaches[0] >= self.admit_min_reaches:
            self.confirmations += 1
            seconds = self.predicted_costs(live)[0] if seconds is None else seconds
            settled = self._neighbours_settled(best, np.flatnonzero(live), seconds, gain)
            # a neighbour whose explorations keep leaving the choice as it was, its cost on evidence, is explored less
            # often even where its optimistic rate stays above: its anchored rows come from 2-step turns, whose anchors
            # still fall where the choice's steps left them (docs/adaptive.md, "Explorations that keep confirming")
            confirmed = (self.confirmations >= self.confirm_explorations
                         and all(self._cost_settled(n) for n in self.unsettled[1]))
            if settled or confirmed:
                self.explore_interval = min(2 * self.explore_interval, self.explore_max)
        self.explored = False
        self.kept_k = best

    def best_k(self, live: np.ndarray, seconds: np.ndarray, verify: np.ndarray | None = None) -> tuple[int, np.ndarray]:
        """(K, [N] k_b): the batch K maximising sum_b E_b(min(K, cap_b)) / T(B, K), then per slot the positions
        worth their verify cost at that rate: keep draft j iff P(draft j accepted) >= rate * c, c = (V(B, K) -
        V(B, 0)) / (drafts at K), V the verify part of the step (a substep is shared by the batch: dropping one
        slot's draft saves only its verify token). verify None: T itself."""
        gain, reach_by_k = self._expected(1 if self.optimism else 0)
        rows = np.flatnonzero(live)
        k_b = np.minimum(np.arange(self.k_max + 1)[:, None], self.cap[rows][None, :])  # [K + 1, B]
        rates = np.take_along_axis(gain[rows].T, k_b, axis=0).sum(axis=1) / np.maximum(seconds, 1e-9)  # [K + 1]
        best = int(np.argmax(rates))  # ties go to the smaller K
        # within the margin of the current K (measurement noise, KV refill), or a K above it that wins only on thin
        # evidence: stay
        self.doubted = None
        if self.kept_k is not None and best != self.kept_k:
            up, kept_rate = best > self.kept_k, rates[self.kept_k]
            if (rates[best] < (1 + self.switch_margin) * kept_rate if up  # a tie keeps the current K either way
                    else rates[best] <= (1 + self.down_margin) * kept_rate):
                best = self.kept_k
            elif up and self._doubtful_switch(best, rows, k_b, seconds, kept_rate):
                best, self.doubted = self.kept_k, best
        self._settle(best, live, None if self.optimism else gain, seconds)
        k_b = np.minimum(best, self.cap)
        drafts = int(k_b[rows].sum())
        if best == 0 or drafts == 0:
            return best, k_b
        verify = seconds if verify is None else verify
        draft_cost = max(verify[best] - verify[0], 0.0) / drafts
        worth = (reach_by_k[best] >= rates[best] * draft_cost).astype(np.int64)  # [N, K], non-increasing along j
        return best, np.minimum(k_b, np.cumprod(worth, axis=1).sum(axis=1))

    def _doubtful_switch(self, best: int, rows: np.ndarray, k_b: np.ndarray, seconds: np.ndarray,
                         kept_rate: float) -> bool:
        """Whether the rate of `best`, a K above the current one, beats the current K's by the switch margin only on
        acceptance its anchored evidence does not establish: at its pessimistic acceptance (pessimistic_prior_by_k,
        `confidence` standard errors down) it does not. The positions above the current K are reached only in
        explorations, which hold a K 2 steps, so a K above rests on few verifications anchored by it, shrunk towards
        the worker prior of the K that runs: at one slot on the tiny pair K = 3 read position 1 as 0.955 after
        explorations (0.80 in a run of K = 3), its rate 1.0-1.03x K = 2's (0.90x measured), and the policy ran
        K = 3 for 24 steps a few times a bench until its own steps corrected it (0.96 of fixed k = 2). A K below
        drafts positions every step verifies: no such doubt (with it, a replay at 16 slots and low acceptance,
        costs learnt online, stayed above K = 0 and read 0.949 of it, against 0.974). The current K's rate is read
        at the point estimate: its own steps anchor most of the evidence."""
        low, _ = self._expected(-1)
        rate = low[rows, k_b[best]].sum() / max(seconds[best], 1e-9)
        return bool(rate < (1 + self.switch_margin) * kept_rate)


def build_policy(spec: SpeculativeConfig, num_slots: int) -> SpeculationPolicy:
    """The policy speculative_config.policy names, for num_slots slots."""
    k_max = spec.max_policy_draft_len
    if spec.policy == "schedule":
        return SchedulePolicy(num_slots, spec)
    if spec.policy == "adaptive":
        pin = spec.verify_strategy not in DRAFT_COUNT_INVARIANT_STRATEGIES
        # demotion and acceptance by anchor for a draft model's drafts only: a lookup's acceptance follows the text
        # a request has reached (_demote; docs/adaptive.md "Anchors and lookups")
        mtp = spec.method == "mtp"
        # an MTP chain feeds every draft it is allowed; a lookup (n-gram, suffix, MTP with_ngram's n-gram part) may not
        return AdaptivePolicy(num_slots, k_max, pin_sampled=pin, demote_after=2 if mtp else 0, by_anchor=mtp,
                              counts_fill=not mtp or spec.with_ngram)
    return FixedPolicy(num_slots, k_max)
