"""StepCostModel: the adaptive policy's estimate of a decode step's wall seconds T(B, K) (and its verify part
V(B, K)) from the steps it measured (docs/adaptive.md, "Step cost"). Pure numpy; knows nothing of slots or
acceptance.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["StepCost", "StepCostModel"]


@dataclasses.dataclass(frozen=True, slots=True)
class _Fit:
    """One K's local fits at one batch size."""

    seconds: float  # T
    verify: float  # V
    ratio: float  # T / T(B, 0) of the same time (nan: no observation knew T(B, 0))
    support: float  # summed kernel weight of the observations


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StepCost:
    """The shape of one pure-decode step (no prefill chunk) and its wall seconds, start to next start."""

    num_slots: int  # B: decode slots the step fed
    num_drafts: int  # sum over slots of L_b - 1: draft tokens the step verified
    num_substeps: int  # draft-model substeps its proposer ran (0 for proposers without a model)
    seconds: float
    verify_seconds: float = 0.0  # of which pre_process, target forward and sampling / verify (StepOutput.seconds)


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

    Relative costs (`predict_relative`): each observation of a K >= 1 also keeps the K = 0 prediction at its batch
    size at its time (when that rests on near observations), and the ratio T / T(B, 0) is fitted like the seconds.
    T(B, 0) now times that ratio is K's cost under today's load, where the seconds as measured would compare a K
    last seen at another load with a K = 0 measured now: what a decision that cannot re-measure needs (draft-less
    admission, while only K = 0 runs). `predict` fits the seconds as measured, so a change of the K being run
    shows at once.
    """

    def __init__(self, *, window: int = 12, outlier: float = 4.0, bandwidth: float = 0.35, refit_every: int = 16):
        self.window, self.outlier, self.bandwidth, self.refit_every = window, outlier, bandwidth, refit_every
        # K -> [(B, seconds, verify seconds, T(B, 0) predicted then; seconds itself for K = 0, nan if unknown)]
        self.samples: dict[int, list[tuple[float, float, float, float]]] = {}
        self.count: dict[int, int] = {}
        self._cached: dict[tuple[int, int], _Fit] = {}  # (B, K) -> its fits at B
        self._unfitted = 0  # observations since the cached fits

    def add(self, k: int, cost: StepCost) -> None:
        reference = cost.seconds if k == 0 else self._k0_now(cost.num_slots)
        row = (cost.num_slots, cost.seconds, cost.verify_seconds, reference)
        self.samples[k] = (self.samples.get(k, []) + [row])[-self.window:]
        self.count[k] = self.count.get(k, 0) + 1
        self._unfitted += 1

    def predict(self, num_slots: int, k_max: int) -> tuple[np.ndarray, np.ndarray]:
        """([k_max + 1] T, [k_max + 1] V) seconds at batch size num_slots, from the seconds as measured; every K
        needs an observation. Fits are cached per (B, K) until `refit_every` observations arrived (a fit is ~0.1 ms
        of numpy; costs drift slowly)."""
        fits = [self._fit_one(num_slots, k) for k in range(k_max + 1)]
        return np.array([f.seconds for f in fits]), np.array([f.verify for f in fits])

    def predict_relative(self, num_slots: int, k_max: int) -> np.ndarray:
        """[k_max + 1] T at batch size num_slots under today's load: T(B, 0) as measured, and for K >= 1 T(B, 0)
        times K's fitted ratio to the K = 0 cost of its time (K's measured seconds / T(B, 0) where no observation
        of K knew that cost)."""
        fits = [self._fit_one(num_slots, k) for k in range(k_max + 1)]
        t0 = fits[0].seconds
        ratios = [f.ratio if np.isfinite(f.ratio) else f.seconds / t0 for f in fits[1:]]
        return t0 * np.array([1.0, *ratios])

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

    def _fit_one(self, num_slots: int, k: int) -> _Fit:
        if self._unfitted >= self.refit_every:
            self._cached.clear()
            self._unfitted = 0
        key = (num_slots, k)
        if key not in self._cached:
            self._cached[key] = self._local_fit(np.array(self.samples[k], dtype=np.float64), num_slots)
        return self._cached[key]

    def _local_fit(self, rows: np.ndarray, num_slots: int) -> _Fit:
        """One K's fits at num_slots from its rows [(B, T, V, T(B, 0) then)]: weighted least squares of
        y = a + b ln(B_i / B) for y = T, V and, over the rows that know it, T / T(B, 0)."""
        u = np.log(rows[:, 0] / num_slots)
        near = np.exp(-0.5 * (u / self.bandwidth) ** 2)
        weight = near + 1e-6  # far rows still count a little (a level)
        x = np.stack([np.ones_like(u), u], axis=1)
        t, v = (float(self._robust_fit(x, y, weight)[0]) for y in (rows[:, 1], rows[:, 2]))
        known = np.isfinite(rows[:, 3])
        ratio = (float(self._robust_fit(x[known], rows[known, 1] / rows[known, 3], weight[known])[0]) if known.any()
                 else float("nan"))
        return _Fit(seconds=max(t, 1e-6), verify=max(v, 0.0), ratio=ratio, support=float(near.sum()))

    def _robust_fit(self, x: np.ndarray, y: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """Outliers are judged against the weighted median (a least-squares start would be pulled by them): rows
        whose distance from it exceeds `outlier` x the median distance are dropped, then least squares."""
        order = np.argsort(y)
        cumulative = np.cumsum(weight[order])
        center = y[order][np.searchsorted(cumulative, 0.5 * cumulative[-1])]
        residual = np.abs(y - center)
        # a distance within 2% of a typical step is never an outlier (exact data differs by rounding only)
        keep = residual <= max(self.outlier * float(np.median(residual)), 0.02 * center)
        return _weighted_lstsq(x[keep], y[keep], weight[keep])


def _weighted_lstsq(x: np.ndarray, y: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Weighted least squares by the normal equations with a small ridge on the slope (rows at one batch size
    leave it undetermined: the fit is then their weighted mean)."""
    gram = (x * weight[:, None]).T @ x
    ridge = np.diag([0.0] + [1e-6 * (gram[0, 0] + 1e-12)] * (x.shape[1] - 1))
    return np.linalg.solve(gram + ridge + 1e-12 * np.eye(x.shape[1]), (x * weight[:, None]).T @ y)
