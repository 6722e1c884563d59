"""StepCostModel: the adaptive policy's estimate of a decode step's wall seconds T(B, K) (and its verify part
V(B, K)) from the steps it measured (docs/adaptive.md, "Step cost"). Pure numpy; knows nothing of slots or
acceptance.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import statistics

import numpy as np

__all__ = ["RecentSteps", "StepCost", "StepCostModel"]


def _weighted_median(values: list[float], weights: list[float]) -> float:
    """The first of the values, in ascending order, whose cumulative weight reaches half the total."""
    half, cumulative = 0.5 * sum(weights), 0.0
    ranked = sorted(zip(values, weights), key=lambda pair: pair[0])
    for value, weight in ranked:
        cumulative += weight
        if cumulative >= half:
            return value
    return ranked[-1][0]


@dataclasses.dataclass(frozen=True, slots=True)
class _Fit:
    """One K's local fits at one batch size."""

    seconds: float  # T
    verify: float  # V
    support: float  # summed kernel weight of the observations


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StepCost:
    """The shape of one pure-decode step (no prefill chunk) and its wall seconds, start to next start."""

    num_slots: int  # B: decode slots the step fed
    num_drafts: int  # sum over slots of L_b - 1: draft tokens the step verified
    num_substeps: int  # draft-model substeps its proposer ran (0 for proposers without a model)
    seconds: float
    verify_seconds: float = 0.0  # of which pre_process, target forward and sampling / verify (StepOutput.seconds)


class RecentSteps:
    """The last `size` steady observations (K, B, seconds), newest last, and the pairs they make (docs/adaptive.md,
    "Paired costs"): an observation of another K than K* (the K observed most among them) against the steps of K*
    it interrupted."""

    def __init__(self, size: int = 16, pair_steps: int = 4):
        self.pair_steps = pair_steps
        self._steps: collections.deque[tuple[int, int, float]] = collections.deque(maxlen=size)
        # per K among the steps: (how many, the index of its latest), kept as they come and go (current_k is read
        # with every step's cost: a count over the deque was ~5 us of each)
        self._counts: dict[int, list[int]] = {}
        self._index = 0
        self._star: int | None = None  # current_k, kept with the counts

    def append(self, k: int, num_slots: int, seconds: float) -> None:
        """One steady step of K at batch size num_slots."""
        gone = None
        if len(self._steps) == self._steps.maxlen:
            gone = self._steps[0][0]
            self._counts[gone][0] -= 1
        self._steps.append((k, num_slots, seconds))
        self._index += 1
        entry = self._counts.setdefault(k, [0, 0])
        entry[0] += 1
        entry[1] = self._index
        star = self._star
        if gone is not None and gone == star:  # K* lost a step: another K may have passed it
            self._star = max((e[0], e[1], kk) for kk, e in self._counts.items() if e[0] > 0)[2]
        elif star is None or entry[0] >= self._counts[star][0]:  # only k gained, and it is the latest: a tie is its
            self._star = k

    def current_k(self) -> int | None:
        """K*: the K observed most in the last `size` steps (ties: the latest), None before any."""
        return self._star

    def pair(self, k: int, num_slots: int, seconds: float) -> tuple[int, float]:
        """(K*, seconds / the median of K*'s last `pair_steps` seconds at this B among the recent steps) for an
        observation of another K than K* (an exploration's steady step against the steps it interrupted); (-1, nan)
        for K* itself or when K* has fewer than 3 recent steps at this B (the median must outvote a load spike: in
        the warm-up, where every K takes turns, pairs of single steps read 0.45 for 1.23). One row per exploration:
        rows of K* paired with one explored step would share its noise."""
        partner = self._star
        if partner is None or partner == k:
            return -1, float("nan")
        level = [t for kk, bb, t in reversed(self._steps) if kk == partner and bb == num_slots][:self.pair_steps]
        if len(level) < 3:
            return -1, float("nan")
        median = statistics.median(level)
        return partner, seconds / median if median > 0 else float("nan")


class StepCostModel:
    """Wall seconds of a decode step whose batch drafted with K, as a function of the batch size B: for each K, a
    local linear fit in B over that K's recent steady observations (a step whose K equals the previous step's:
    the cycle then holds K's substeps and K's verify tokens), each weighted by how near its batch size is,
    exp(-ln(B_i / B)^2 / (2 bandwidth^2)). So a batch size not seen yet is predicted from its neighbours (requests
    finishing one by one walk B through every value), K needs no parametric form (a step's cost is not linear in
    K), and the per-step load noise of a shared machine averages over many observations instead of a few.
    The last `window` observations of each K are kept, so a K that only exploration visits keeps its evidence
    however long ago it was seen. Robust: observations farther from their K's weighted median than `outlier` x
    the median distance (load spikes, a step that waited on something else) are left out of the fit.
    The same for V, the verify part of the step (pre_process, target forward, sampling / verify).

    Paired costs (docs/adaptive.md): a shared machine's speed moves by a third within a minute, and a K seen only
    in explorations was seen at another load than the K being run. An observation of a K other than K* (the K
    observed most in the last `recent` steps) also keeps its ratio to K* at its batch size: its seconds over the
    median of K*'s last `pair_steps` steps there within the last `recent` steps, when K* has 3 of them (one row per
    exploration: its steady step against the steps it interrupted). `predict` reads K* from its own fit, which
    follows the load, and every other K as T(B, K*) times the pair ratios along the shortest chain K* - K1 - ... - K
    whose pairs each have `pair_support` (3) rows near B (a load spike in one must not stand alone), a pair fitted
    like the seconds; within `pair_trust` (2.5x) of K's own fit, else (and without a chain) from that fit, or, where
    that moves it by more than `rescale_beyond` (1.2x: the noise of the reference), as T(B, 0) now times K's ratio to
    T(B, 0) at its observations' time (`_rescale_unchained`, relative costs below). A ratio measured steps apart
    stays valid however the load moved since. (No load index: one fitted from the same steps as K*'s own fit is
    confounded with it and random-walks.)

    Relative costs (`predict_relative`): each observation of a K >= 1 also keeps the K = 0 prediction at its batch
    size at its time (when that rests on near observations), and the ratio T / T(B, 0) is fitted like the seconds.
    T(B, 0) now times that ratio is K's cost under today's load, where the seconds as measured would compare a K
    last seen at another load with a K = 0 measured now: what a decision that cannot re-measure needs (draft-less
    admission, while only K = 0 runs).
    """

    def __init__(self, *, window: int = 12, outlier: float = 4.0, bandwidth: float = 0.35, refit_every: int = 16,
                 far: float = 0.5, recent: int = 16, pair_steps: int = 4, pair_support: float = 3.0,
                 pair_trust: float = 2.5, rescale_beyond: float = 1.2):
        # a K >= 1 without a trusted chain is read relative to T(B, 0) now when that moves it by more than this
        # factor (_rescale_unchained; inf: never)
        self.rescale_beyond = rescale_beyond
        self.prefill_per_token = 0.0  # proposer seconds per prompt token prefilled: not measured while serving
        self.window, self.outlier, self.bandwidth, self.refit_every = window, outlier, bandwidth, refit_every
        self.pair_support = pair_support
        self.pair_trust = pair_trust  # a chain's T(B, K) is used within this factor of K's own fit
        self._steps = RecentSteps(recent, pair_steps)  # the last `recent` observations, and the pairs they make
        self.far = far  # support below which a K's prediction is transferred from a supported K (_transfer)
        # K -> [(B, seconds, verify seconds, T(B, 0) predicted then (seconds itself for K = 0; nan if unknown),
        #       the K paired with (-1: none), seconds / that K's recent seconds at B (nan: none))]
        self.samples: dict[int, list[tuple[float, float, float, float, float, float]]] = {}
        self.count: dict[int, int] = {}
        self._cached: dict[tuple[int, int], _Fit] = {}  # (B, K) -> its fits at B
        self._unfitted: dict[int, int] = {}  # K -> its observations since its cached fits
        self._since_any: dict[int, int] = {}  # K -> observations of any K since its cached fits
        # (B, k_max) -> predict's last fits there and its arrays
        self._predicted: dict[tuple[int, int], tuple[tuple, tuple[np.ndarray, np.ndarray], np.ndarray]] = {}

    def add(self, k: int, cost: StepCost, *, replace_near: bool = False, own_seconds: float = 0.0) -> None:
        """One steady observation of K. replace_near: K's rows near its batch size (kernel weight >= 0.5) are
        dropped first, the observation taking their place (a probe's re-measurement of a stale K, AdaptivePolicy).
        own_seconds (the policy's own host time in the step) is not left out here: these costs are what serving
        pays, decisions included (profiled costs leave it out of their served pairs)."""
        if replace_near and k in self.samples:
            self.samples[k] = [row for row in self.samples[k] if self.nearness(row[0], cost.num_slots) < 0.5]
            self._unfitted[k] = max(self._unfitted.get(k, 0), self.refit_every)  # its cached fits are stale
        reference = cost.seconds if k == 0 else self._k0_now(cost.num_slots)
        partner, ratio = self._steps.pair(k, cost.num_slots, cost.seconds)
        row = (cost.num_slots, cost.seconds, cost.verify_seconds, reference, partner, ratio)
        self.samples[k] = (self.samples.get(k, []) + [row])[-self.window:]
        self._steps.append(k, cost.num_slots, cost.seconds)
        self.count[k] = self.count.get(k, 0) + 1
        self._unfitted[k] = self._unfitted.get(k, 0) + 1
        for key in self._since_any:
            self._since_any[key] += 1

    def current_k(self) -> int | None:
        """K*: the K observed most in the last `recent` steps (ties: the latest), None before any."""
        return self._steps.current_k()

    def predict(self, num_slots: int, k_max: int) -> tuple[np.ndarray, np.ndarray]:
        """([k_max + 1] T, [k_max + 1] V) seconds at batch size num_slots at today's load: K* (current_k) from its
        fit, every other K from its chain of pairs to K* near num_slots (`_ratios_to`; its V scaled alike), else
        from its own fit; every K needs an observation. Fits are cached per (B, K) until K has `refit_every` new
        observations, or any new one after `refit_every` observations of all K (a fit is ~0.05 ms of numpy; costs
        drift slowly)."""
        fits = tuple(self._fit_one(num_slots, k) for k in range(k_max + 1))
        star = self.current_k()
        paired = (self._ratios_to(num_slots, star, k_max) if star is not None and star <= k_max
                  else (None,) * (k_max + 1))
        last = self._predicted.get((num_slots, k_max))
        key = (fits, star, paired)
        if last is None or last[0] != key:  # the same fits and ratios as last time at this B: the same arrays
            seconds, verify = np.array([f.seconds for f in fits]), np.array([f.verify for f in fits])
            self._transfer(num_slots, fits, seconds, verify)
            chained = np.zeros(k_max + 1, dtype=bool)  # K read at today's load: K* and the K with a trusted chain
            for k, ratio in enumerate(paired):
                scale = seconds[star] * ratio / seconds[k] if ratio is not None else 0.0
                if 1.0 / self.pair_trust <= scale <= self.pair_trust:  # else a load spike in few pairs: the own fit
                    seconds[k] *= scale
                    verify[k] *= scale
                    chained[k] = True
            self._rescale_unchained(num_slots, fits, seconds, verify, chained)
            last = self._predicted[num_slots, k_max] = (key, (seconds, verify), chained)
        return last[1]

    def _rescale_unchained(self, num_slots: int, fits: tuple[_Fit, ...], seconds: np.ndarray, verify: np.ndarray,
                           chained: np.ndarray) -> None:
        """A K >= 1 without a trusted chain: T(B, 0) as predicted now times K's fitted ratio to the T(B, 0) of its
        observations' time (`_ratio_one`), within `pair_trust` of its own fit, where T(B, 0) rests on near
        observations; in place. Its own fit compares seconds measured at another load with K = 0's now: on the tiny
        pair at 64 slots T(64, 2) read 46.7 ms beside T(64, 0) = 24.3 (18 when K = 2 was measured), and a draining
        batch drafted with K = 2 at 0.79x of no drafts. Only past `rescale_beyond`: the ratio's reference is one
        cached T(B, 0) fit, whose error each row of K shares (on the replay without drift, every K rescaled read r_1
        1.94 for a true 1.76 and cost 0.965x of the best fixed K at 16 slots)."""
        if fits[0].support < 1.0:
            return
        for k in range(1, len(fits)):
            ratio = self._ratio_one(num_slots, k)
            if chained[k] or not ratio > 0:  # chained, or no observation of K knew T(B, 0) (nan)
                continue
            scale = seconds[0] * ratio / seconds[k]
            if 1.0 / self.pair_trust <= scale <= self.pair_trust and not (
                    1.0 / self.rescale_beyond <= scale <= self.rescale_beyond):
                seconds[k] *= scale
                verify[k] *= scale

    def _ratios_to(self, num_slots: int, star: int, k_max: int) -> tuple[float | None, ...]:
        """[k_max + 1] T(B, K) / T(B, K*) through the pairs (breadth first from K*: the fewest pairs; a pair of K
        and K' needs `pair_support` near rows, either K's paired with K' or K''s with K); None where no chain (not
        nan: predict compares these tuples to reuse its arrays, and nan != nan)."""
        out: list[float | None] = [None] * (k_max + 1)
        out[star] = 1.0
        frontier = [star]
        while frontier:
            nxt = []
            for u in frontier:
                for v in range(k_max + 1):
                    if out[v] is None:
                        edge = self._edge(num_slots, v, u)  # T_v / T_u
                        if math.isfinite(edge):
                            out[v] = out[u] * edge
                            nxt.append(v)
            frontier = nxt
        return tuple(out)

    def _edge(self, num_slots: int, a: int, b: int) -> float:
        """T(B, a) / T(B, b) fitted over the pairs of a and b near num_slots (a's rows paired with b, and b's with a
        inverted), nan below `pair_support`; cached with a's and b's fits."""
        lo, hi = min(a, b), max(a, b)
        if lo not in self.samples or hi not in self.samples:
            return float("nan")
        self._fit_one(num_slots, lo)  # drop stale entries
        self._fit_one(num_slots, hi)
        key = (num_slots, lo, "pair", hi)
        if key not in self._cached:
            rows = [(row[0], row[5]) for row in self.samples[lo] if row[4] == hi and math.isfinite(row[5])]
            rows += [(row[0], 1.0 / row[5]) for row in self.samples[hi]
                     if row[4] == lo and math.isfinite(row[5]) and row[5] > 0]
            near = sum(self.nearness(b_, num_slots) for b_, _ in rows)
            self._cached[key] = float("nan")
            if near >= self.pair_support:
                self._cached[key] = float(self._robust_intercepts([r[0] for r in rows], [[r[1] for r in rows]],
                                                                  num_slots)[0])
        value = self._cached[key]
        if not value > 0:  # nan, or a fit extrapolated below 0: no pair
            return float("nan")
        return value if a == lo else 1.0 / value

    def _transfer(self, num_slots: int, fits: tuple[_Fit, ...], seconds: np.ndarray, verify: np.ndarray) -> None:
        """A K whose observations are all far from num_slots (support < `far`) gets the prediction of the best
        supported K there (support >= 1) times the two K's ratio at K's own batch sizes (the geometric mean of its
        rows' B), where that K is supported too; in place. A closed batch that drains from 16 slots while K = 1
        runs has K = 0 only at 16: its local fit held T(3, 0) at the 16-slot level (342 ms against K = 1's 136 ms
        at 3 slots; true 111 and 137), and the policy drafted through the tail. The ratio keeps what K costs
        relative to the other K, where both were seen."""
        ref = max(range(len(fits)), key=lambda k: fits[k].support)
        if fits[ref].support < 1.0:
            return
        for k, fit in enumerate(fits):
            if fit.support >= self.far or k == ref:
                continue
            home = int(round(math.exp(float(np.mean(np.log([row[0] for row in self.samples[k]]))))))
            there, mine = self._fit_one(home, ref), self._fit_one(home, k)
            if there.support >= 1.0 and there.seconds > 0:
                seconds[k] = seconds[ref] * mine.seconds / there.seconds
                verify[k] = verify[ref] * (mine.verify / there.verify if there.verify > 0 else 1.0)

    def predict_relative(self, num_slots: int, k_max: int) -> np.ndarray:
        """[k_max + 1] T at batch size num_slots under today's load: `predict`'s for K* and the K it reads through
        pairs; for the others T(B, 0) as measured, and for K >= 1 T(B, 0) times K's fitted ratio to the K = 0 cost of
        its time (K's measured seconds / T(B, 0) where no observation of K knew that cost)."""
        seconds = self.predict(num_slots, k_max)[0]
        chained = self._predicted[num_slots, k_max][2]
        if chained.all():
            return seconds.copy()
        fits = [self._fit_one(num_slots, k) for k in range(k_max + 1)]
        t0 = fits[0].seconds
        ratios = [self._ratio_one(num_slots, k) for k in range(1, k_max + 1)]
        own = t0 * np.array([1.0, *(r if np.isfinite(r) else f.seconds / t0 for r, f in zip(ratios, fits[1:]))])
        return np.where(chained, seconds, own)

    def _k0_now(self, num_slots: int) -> float:
        """T(B, 0) as the model predicts it now, nan when K = 0 has no observation near num_slots."""
        if 0 not in self.samples:
            return float("nan")
        fit = self._cached.get((num_slots, 0))  # the fit the policy predicted from, else one not kept
        if fit is None:
            fit = self._local_fit(np.array(self.samples[0], dtype=np.float64), num_slots)
        return fit.seconds if fit.support >= 1.0 else float("nan")

    def support(self, num_slots: int, k_max: int) -> np.ndarray:
        """[k_max + 1] the summed kernel weight of each K's observations at num_slots: about the number of them
        within one bandwidth of it (below 1: the prediction there leans on far batch sizes)."""
        return np.array([self._fit_one(num_slots, k).support for k in range(k_max + 1)])

    def relative_error(self, num_slots: int, k_max: int) -> np.ndarray:
        """[k_max + 1] the standard error of each K's own fit at num_slots relative to it: 1.4826 x the weighted
        median of its rows' |T_i / T(B, K) - 1| (the step-to-step spread of the load, robust to spikes), over the
        square root of its support (at least 1). Four steps at one batch size that read 83, 77, 109 and 89 ms give
        5.4%."""
        out = np.zeros(k_max + 1)
        for k in range(k_max + 1):
            fit = self._fit_one(num_slots, k)
            rows = self.samples[k]
            weight = [self.nearness(row[0], num_slots) + 1e-6 for row in rows]
            median = _weighted_median([abs(row[1] / fit.seconds - 1.0) for row in rows], weight)
            out[k] = 1.4826 * median / math.sqrt(max(fit.support, 1.0))
        return out

    def nearness(self, batch: float, num_slots: int) -> float:
        """The kernel weight of an observation at batch size `batch` for a prediction at num_slots:
        exp(-ln(batch / num_slots)^2 / (2 bandwidth^2))."""
        return math.exp(-0.5 * (math.log(batch / num_slots) / self.bandwidth) ** 2)

    def _fit_one(self, num_slots: int, k: int) -> _Fit:
        # K's fits are stale once K has refit_every new observations, or any new one after refit_every observations
        # of all K: a K seen every step is refitted every refit_every steps, one seen in explorations when it was
        # (each K's own clock: refitting every K on one clock cost ~0.06 ms a step, a few % of a small step).
        fresh = self._unfitted.get(k, 0)
        if fresh >= self.refit_every or (fresh and self._since_any.get(k, 0) >= self.refit_every):
            for key in [key for key in self._cached if key[1] == k or (len(key) == 4 and key[3] == k)]:
                del self._cached[key]
            self._unfitted[k] = 0
            self._since_any[k] = 0
        self._since_any.setdefault(k, 0)
        key = (num_slots, k)
        if key not in self._cached:
            self._cached[key] = self._local_fit(np.array(self.samples[k], dtype=np.float64), num_slots)
        return self._cached[key]

    def _ratio_one(self, num_slots: int, k: int) -> float:
        """K's fitted T / T(B, 0) at num_slots over the rows that knew T(B, 0) (nan: none did); cached with K's fits
        (only draft-less admission asks for it)."""
        self._fit_one(num_slots, k)  # drops K's stale entries
        key = (num_slots, k, "ratio")
        if key not in self._cached:
            rows = np.array(self.samples[k], dtype=np.float64)
            rows = rows[np.isfinite(rows[:, 3])]
            self._cached[key] = (float(self._robust_intercepts(rows[:, 0], (rows[:, 1] / rows[:, 3])[None], num_slots)[0])
                                 if len(rows) else float("nan"))
        return self._cached[key]

    def _local_fit(self, rows: np.ndarray, num_slots: int) -> _Fit:
        """One K's fits at num_slots from its rows [(B, T, V, T(B, 0) then)]: robust weighted least squares of
        y = a + b ln(B_i / B) for y = T and V."""
        batch = rows[:, 0].tolist()
        t, v = self._robust_intercepts(batch, rows[:, 1:3].T.tolist(), num_slots)
        near = sum(self.nearness(b, num_slots) for b in batch)
        return _Fit(seconds=max(float(t), 1e-6), verify=max(float(v), 0.0), support=near)

    def _robust_intercepts(self, batch, ys, num_slots: int) -> np.ndarray:
        """[Y] the fitted a of y = a + b ln(B_i / B) for each row of ys [Y, n], rows weighted by their batch size's
        nearness exp(-ln(B_i / B)^2 / (2 bandwidth^2)) (+ 1e-6: far rows still count a little, a level).
        Outliers are judged against the weighted median (a least-squares start would be pulled by them): rows whose
        distance from it exceeds `outlier` x the median distance are dropped. Least squares by the normal equations
        with a small ridge on the slope (rows at one batch size leave it undetermined: the fit is then their
        weighted mean), solved in closed form (2 x 2).
        Plain Python floats: n is at most `window` (12) rows, and between a step's tensor ops each numpy call costs
        3-10 us, so the ~30 of a numpy fit took 0.2-0.4 ms where these loops take a few tens of us."""
        u = [math.log(b / num_slots) for b in batch]
        weight = [self.nearness(b, num_slots) + 1e-6 for b in batch]
        out = []
        for y in ys:
            y = [float(v) for v in y]  # a row of a list or an array
            center = _weighted_median(y, weight)
            residual = [abs(v - center) for v in y]
            ranked = sorted(residual)
            mid = len(ranked) // 2
            median = ranked[mid] if len(ranked) % 2 else 0.5 * (ranked[mid - 1] + ranked[mid])
            # a distance within 2% of a typical step is never an outlier (exact data differs by rounding only)
            bound = max(self.outlier * median, 0.02 * center)
            s0 = s1 = s2 = sy = suy = 0.0
            for wi, ui, yi, ri in zip(weight, u, y, residual):
                if ri <= bound:
                    s0, s1, s2, sy, suy = s0 + wi, s1 + wi * ui, s2 + wi * ui * ui, sy + wi * yi, suy + wi * ui * yi
            g00 = s0 + 1e-12
            g11 = s2 + 1e-6 * (s0 + 1e-12) + 1e-12
            out.append((g11 * sy - s1 * suy) / (g00 * g11 - s1 * s1))
        return np.array(out)
