"""The adaptive policy's step costs from a profile measured at worker start (docs/adaptive.md, "Profiled step
costs"), instead of from the steps it serves: `CostProfile` (the table), `build_profile` (the table from measured
steps), `ProfiledCosts` (what the policy reads: the StepCostModel interface) and `ProfilePolicy` (the policy that
holds a set K while the profile is measured). Pure numpy; the run itself is specworker.worker.cost_profiling.
"""

from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np

from specworker.spec_decode.policy import PolicyStep, SpeculationPolicy
from specworker.spec_decode.step_cost_model import StepCost, StepCostModel

__all__ = ["CostProfile", "ProfilePolicy", "ProfiledCosts", "ProfileRow", "build_profile", "prefill_cost",
           "profile_batch_sizes", "ratio_errors"]

# a K's relative error where fewer than two rounds measured it (the policy's lower bound clips at 0.5)
_UNKNOWN_ERROR = 0.5
# served pairs correcting the profile's neighbour ratios (ProfiledCosts.add; docs/adaptive.md, "Served pairs")
PAIR_WINDOW = 64  # the newest pairs kept per (profile size, K)
PAIR_LEAST = 3  # pairs before a ratio is corrected at all
PAIR_SPREAD_FLOOR = 0.05  # least standard deviation of a pair's log ratio (a few pairs can agree by chance)
PROFILE_DRIFT = 0.04  # standard deviation of a neighbour ratio between profiles of one worker minutes apart, past
# the rounds' own error: eight profiles of the tiny pair at 4 slots on one worker read T(4, 3) / T(4, 2) 1.20-1.33


def profile_batch_sizes(max_num_seqs: int) -> list[int]:
    """1, 2, 4, ... below max_num_seqs, then max_num_seqs: the batch sizes a profile measures."""
    sizes = [1 << i for i in range(max(max_num_seqs, 1).bit_length()) if 1 << i < max_num_seqs]
    return sizes + [max_num_seqs]


@dataclasses.dataclass(frozen=True, slots=True)
class ProfileRow:
    """One steady step of the profile: the round it belongs to, the K held and the step's cost."""

    round: int
    k: int
    cost: StepCost


@dataclasses.dataclass(frozen=True, slots=True)
class CostProfile:
    """T(B, K) and its verify part V(B, K) at the batch sizes measured. T(B, K) = (median seconds of K = 0's steps
    at B) x (median over rounds of K's mean seconds / K = 0's mean seconds in the same round): a round holds every
    K a few steps, one after the other, so its ratios compare steps a second apart, and a load that moves between
    rounds cancels."""

    batch_sizes: np.ndarray  # [G] int64 ascending
    seconds: np.ndarray  # [G, K + 1] T(B, K)
    verify: np.ndarray  # [G, K + 1] V(B, K)
    error: np.ndarray  # [G, K + 1] relative standard error of T(B, K) / T(B, 0) (0 at K = 0)
    steps: np.ndarray  # [G, K + 1] int64 steady steps measured
    # proposer seconds per prompt token a prefill step writes (the MTP draft prefill; ~0 for a lookup), prefill_cost
    prefill_per_token: float = 0.0

    @property
    def k_max(self) -> int:
        return self.seconds.shape[1] - 1

    def to_dict(self) -> dict:
        """Plain lists (bench.json)."""
        return {"batch_sizes": self.batch_sizes.tolist(), "seconds": self.seconds.tolist(),
                "verify": self.verify.tolist(), "error": self.error.tolist(), "steps": self.steps.tolist(),
                "prefill_per_token": self.prefill_per_token}


def prefill_cost(samples: list[tuple[int, float]]) -> float:
    """Proposer seconds per prompt token from the profile's prefill steps, (prompt tokens written, proposer seconds)
    each: the least-squares slope of seconds on tokens (the intercept takes what a step costs whatever it writes), at
    least 0; 0 without two different token counts."""
    if len({tokens for tokens, _ in samples}) < 2:
        return 0.0
    tokens, seconds = np.array(samples, dtype=np.float64).T
    centred = tokens - tokens.mean()
    return max(float(centred @ (seconds - seconds.mean()) / (centred @ centred)), 0.0)


def build_profile(rows: list[ProfileRow], k_max: int, prefills: list[tuple[int, float]] = ()) -> CostProfile | None:
    """The profile of `rows` (steady steps), at each batch size where every K 0..k_max has a round that measured
    both it and K = 0; None when no batch size has. prefills: the prefill steps' (prompt tokens, proposer seconds),
    for prefill_cost."""
    sizes, seconds, verify, error, steps = [], [], [], [], []
    for b in sorted({row.cost.num_slots for row in rows}):
        at_b = [row for row in rows if row.cost.num_slots == b]
        ratios = _round_ratios(at_b, k_max)
        if ratios is None:
            continue
        base = [row.cost for row in at_b if row.k == 0]
        t0 = float(np.median([c.seconds for c in base]))
        v0 = float(np.median([c.verify_seconds for c in base]))
        sizes.append(b)
        seconds.append([t0 * float(np.median([r[0] for r in ratios[k]])) for k in range(k_max + 1)])
        verify.append([v0 * float(np.median([r[1] for r in ratios[k]])) for k in range(k_max + 1)])
        error.append(_errors_of(ratios))
        steps.append([sum(row.k == k for row in at_b) for k in range(k_max + 1)])
    if not sizes:
        return None
    return CostProfile(batch_sizes=np.array(sizes, dtype=np.int64), seconds=np.array(seconds),
                       verify=np.array(verify), error=np.array(error), steps=np.array(steps, dtype=np.int64),
                       prefill_per_token=prefill_cost(list(prefills)))


def _round_ratios(at_b: list[ProfileRow], k_max: int) -> list[list[tuple[float, float]]] | None:
    """Per K, per round that measured it and K = 0: (K's mean seconds / K = 0's, the same of verify seconds), from
    the rows of one batch size; None while a K has no such round."""
    means: dict[tuple[int, int], tuple[float, float]] = {}  # per round and K: mean seconds, mean verify seconds
    for key in {(row.round, row.k) for row in at_b}:
        costs = [row.cost for row in at_b if (row.round, row.k) == key]
        means[key] = (sum(c.seconds for c in costs) / len(costs), sum(c.verify_seconds for c in costs) / len(costs))
    rounds = sorted({r for r, k in means if k == 0})
    ratios = [[(means[r, k][0] / means[r, 0][0], means[r, k][1] / means[r, 0][1]) for r in rounds
               if (r, k) in means and means[r, 0][0] > 0 and means[r, 0][1] > 0] for k in range(k_max + 1)]
    return None if any(not r for r in ratios) else ratios


def ratio_errors(at_b: list[ProfileRow], k_max: int) -> np.ndarray:
    """[K + 1] the relative standard error each K's T(B, K) / T(B, 0) would have in a profile of the rows of one
    batch size (0 at K = 0; the unknown error, 0.5, for every K while one lacks a round)."""
    ratios = _round_ratios(at_b, k_max)
    return np.r_[0.0, np.full(k_max, _UNKNOWN_ERROR)] if ratios is None else np.array(_errors_of(ratios))


def _errors_of(ratios: list[list[tuple[float, float]]]) -> list[float]:
    """[K + 1] _ratio_error of each K's seconds ratios (0 at K = 0)."""
    return [_ratio_error([r[0] for r in ratios[k]]) if k else 0.0 for k in range(len(ratios))]


def _ratio_error(ratios: list[float]) -> float:
    """Relative standard error of the median of `ratios`: 1.4826 x the median absolute deviation of their logs
    (the spread, robust to a load spike) x 1.25 (a median's efficiency) over sqrt(n)."""
    if len(ratios) < 2:
        return _UNKNOWN_ERROR
    logs = np.log(ratios)
    spread = 1.4826 * float(np.median(np.abs(logs - np.median(logs))))
    return min(1.25 * spread / math.sqrt(len(ratios)), _UNKNOWN_ERROR)


class ProfiledCosts:
    """What the adaptive policy reads of step costs (StepCostModel's interface), from a CostProfile: T(B, 0) is
    interpolated linearly in B between the measured batch sizes (a step's cost is near affine in B) and each K's
    ratio to it linearly in ln B; beyond the measured sizes, the nearest. What serving measures moves it only through
    served pairs (below).

    `fill` [K]: the share of steps allowed draft j that fed one (AdaptivePolicy keeps it): a lookup proposer finds
    no draft in many steps, and a step allowed K drafts then costs what it feeds, T at n = sum_{j <= K} fill_j drafts
    a slot, interpolated between the integer n the profile measured (MTP always drafts: fill 1).

    Served pairs correct the neighbour ratios T(B, K) / T(B, K - 1) at the profile's batch sizes (`add`): two steady
    steps one after the other at one of them, of K and K - 1, both feeding full drafts (an exploration and the steps
    it interrupts), give one log ratio each; the median of a cell's pairs moves the profile's ratio by the weight of
    a normal posterior, the profile's error (its rounds' and PROFILE_DRIFT) against the median's.
    """

    profiled = True

    def __init__(self, profile: CostProfile, *, bandwidth: float = 0.35):
        self.profile = profile
        self.bandwidth = bandwidth  # nearness()'s kernel width, as StepCostModel's
        self.prefill_per_token = profile.prefill_per_token  # proposer seconds per prompt token prefilled
        k = profile.k_max
        # steps per K (the policy's evidence counts: every K is measured before the first request)
        self.count: dict[int, int] = {i: int(profile.steps[:, i].sum()) for i in range(k + 1)}
        self.observed: dict[int, int] = {}  # steady steps served per K (metrics; no effect on predictions)
        self.fill = np.ones(k)
        self._cache: dict[tuple[int, int, bytes], tuple[np.ndarray, np.ndarray]] = {}  # predict's, by fill
        self._tables: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # B -> _at's
        self.correction = np.zeros_like(profile.seconds)  # [G, K + 1] ln factor on T(B, K) / T(B, K - 1) (0 at K = 0)
        self.version = 0  # counts the changes of the correction (the policy's cached drain tables are per version)
        self._pairs: dict[tuple[int, int], collections.deque] = {}  # (size index, K) -> served pairs' ln ratios
        self._last: tuple[int, int, int, float] | None = None  # (K, B, drafts, seconds less own) of the last added
        self.pair_least = PAIR_LEAST  # pairs before a cell corrects (tests: inf, no correction)
        self._sizes = profile.batch_sizes.tolist()  # the batch sizes a pair may be served at

    def add(self, k: int, cost: StepCost, *, replace_near: bool = False, own_seconds: float = 0.0) -> None:
        """Counts a steady step served at K; with the one added before it, a served pair (class docstring) when both
        ran at one of the profile's batch sizes, at neighbouring K, each feeding K drafts a slot. own_seconds: the
        policy's own host time inside the step, left out of the pair (the profile's steps hold none of it, and the
        step that ends an exploration holds the decision after it: ~10% of a 4-slot step of the tiny pair)."""
        self.observed[k] = self.observed.get(k, 0) + 1
        last, self._last = self._last, (k, cost.num_slots, cost.num_drafts, cost.seconds - own_seconds)
        if last is None or abs(last[0] - k) != 1 or last[1] != cost.num_slots:
            return
        if cost.num_slots not in self._sizes or min(last[3], self._last[3]) <= 0 or any(
                drafts != j * b for j, b, drafts, _ in (last, self._last)):
            return
        (_, _, _, low), (top, _, _, high) = sorted((last, self._last))
        g = self._sizes.index(cost.num_slots)
        cell = self._pairs.setdefault((g, top), collections.deque(maxlen=PAIR_WINDOW))
        cell.append(math.log(high / low))
        self._correct(g, top, np.array(cell))

    def _correct(self, g: int, k: int, logs: np.ndarray) -> None:
        """The correction of T(B_g, k) / T(B_g, k - 1) from its cell's served log ratios: the posterior mean of the
        shift, prior N(0, e_k^2 + e_(k-1)^2 + PROFILE_DRIFT^2) (e: the profile's rounds' errors), the median of the
        pairs with standard error 1.25 s / sqrt(n) (s: 1.4826 x their MAD, at least PAIR_SPREAD_FLOOR); none below
        pair_least (PAIR_LEAST) pairs. The table's T and V at B_g scale by the product of the corrections up to each
        K."""
        p = self.profile
        shift = 0.0
        if len(logs) >= self.pair_least:
            median = float(np.median(logs))
            spread = max(1.4826 * float(np.median(np.abs(logs - median))), PAIR_SPREAD_FLOOR)
            data = (1.25 * spread) ** 2 / len(logs)
            prior = p.error[g, k] ** 2 + p.error[g, k - 1] ** 2 + PROFILE_DRIFT ** 2
            shift = (median - math.log(p.seconds[g, k] / p.seconds[g, k - 1])) * prior / (prior + data)
        if shift != self.correction[g, k]:
            self.correction[g, k] = shift
            self.version += 1
            self._tables.clear()
            self._cache.clear()

    def served_pairs(self) -> dict:
        """Plain lists (bench.json): per profile size and K, the served pairs counted (at most PAIR_WINDOW) and the
        correction's log shift of T(B, K) / T(B, K - 1)."""
        pairs = np.zeros(self.correction.shape, dtype=np.int64)
        for (g, k), cell in self._pairs.items():
            pairs[g, k] = len(cell)
        return {"pairs": pairs.tolist(), "log_shift": self.correction.tolist()}

    def corrected(self) -> tuple[np.ndarray, np.ndarray]:
        """([G, K + 1] T, [G, K + 1] V) of the profile with the served pairs' corrections."""
        factor = np.exp(np.cumsum(self.correction, axis=1))
        return self.profile.seconds * factor, self.profile.verify * factor

    nearness = StepCostModel.nearness  # the same kernel weight (it reads only `bandwidth`)

    def _at(self, num_slots: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """([K + 1] T, [K + 1] V, [K + 1] error) at batch size num_slots, for integer K (cached: the drain objective
        reads a dozen batch sizes per decision)."""
        if num_slots not in self._tables:
            self._tables[num_slots] = self._interpolate(num_slots)
        return self._tables[num_slots]

    def _interpolate(self, num_slots: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        p = self.profile
        seconds, verify = self.corrected()
        sizes = p.batch_sizes.astype(np.float64)
        b = float(num_slots)
        logs, at = np.log(sizes), math.log(max(b, 1.0))
        t0, v0 = np.interp(b, sizes, seconds[:, 0]), np.interp(b, sizes, verify[:, 0])
        t_ratio = np.array([np.interp(at, logs, seconds[:, k] / seconds[:, 0]) for k in range(p.k_max + 1)])
        v_ratio = np.array([np.interp(at, logs, verify[:, k] / verify[:, 0]) for k in range(p.k_max + 1)])
        error = np.array([np.interp(at, logs, p.error[:, k]) for k in range(p.k_max + 1)])
        return t0 * t_ratio, v0 * v_ratio, error

    def predict(self, num_slots: int, k_max: int) -> tuple[np.ndarray, np.ndarray]:
        """([k_max + 1] T, [k_max + 1] V) seconds at batch size num_slots: K's drafts a slot at n_K = sum_{j <= K}
        fill_j, between the profile's integer counts."""
        key = (num_slots, k_max, self.fill.tobytes())
        if key not in self._cache:
            seconds, verify, _ = self._at(num_slots)
            fed = np.concatenate([[0.0], np.cumsum(self.fill[:k_max])])  # [k_max + 1] n_K
            counts = np.arange(self.profile.k_max + 1)
            self._cache[key] = (np.interp(fed, counts, seconds), np.interp(fed, counts, verify))
        return self._cache[key]

    def predict_relative(self, num_slots: int, k_max: int) -> np.ndarray:
        """predict's T: the profile's ratios are load-free already."""
        return self.predict(num_slots, k_max)[0]

    def support(self, num_slots: int, k_max: int) -> np.ndarray:
        """Every K rests on measured steps at every batch size (the profile's)."""
        return np.full(k_max + 1, math.inf)

    def relative_error(self, num_slots: int, k_max: int) -> np.ndarray:
        """[k_max + 1] relative standard error of T(B, K) / T(B, 0) from the profile's rounds (0 at K = 0)."""
        return self._at(num_slots)[2][:k_max + 1]

    def set_fill(self, fill: np.ndarray) -> None:
        """The share of steps allowed draft j that fed one, [K] in [0, 1], kept to 0.01 (a step's cost is not known
        closer, and each new value is a new prediction); the predictions follow it."""
        fill = np.clip(np.round(np.asarray(fill, dtype=np.float64), 2), 0.0, 1.0)
        if not np.array_equal(fill, self.fill):
            self.fill = fill
            if len(self._cache) > 256:
                self._cache.clear()


class ProfilePolicy(SpeculationPolicy):
    """Every live slot gets `k` drafts (set by the profiling run between steps); each steady step (its K equal to
    the previous step's: the cycle then holds K's substeps and K's verify tokens) is kept as a ProfileRow of the
    round that was current when its K was chosen. Follows no slot moves: the profile's requests are greedy and
    carry no override."""

    def __init__(self, num_slots: int, k_max: int):
        super().__init__(num_slots, k_max)
        self.k, self.round = 0, 0
        self.rows: list[ProfileRow] = []
        self.prefills: list[tuple[int, float]] = []  # (prompt tokens, proposer seconds) of each prefill step
        self._recent: list[tuple[int, int]] = []  # (K, round) of the last two choices, newest last

    def forget(self) -> None:
        """No steady step spans what comes next (a fresh batch of requests)."""
        self._recent = []

    def _choose(self, step: PolicyStep) -> int:
        recent = self._recent
        if step.cost is not None and len(recent) == 2 and recent[0][0] == recent[1][0] and step.cost.num_slots > 0:
            self.rows.append(ProfileRow(round=recent[1][1], k=recent[1][0], cost=step.cost))
        self._recent = (recent + [(self.k, self.round)])[-2:]
        return self.k
