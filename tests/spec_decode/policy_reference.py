"""numpy references of AdaptivePolicy's compiled arithmetic (PolicyHost, custom_ops/cpu_ops/kernels/
speculation_policy.cc), written from the formulas of its docstrings: the drain objective, the population's spread,
and the counting of one step as a plain loop over slots and positions."""

from __future__ import annotations

import numpy as np

from specworker.spec_decode.policy import AdaptivePolicy, _blom_scores, _laplace, _shrunk, expected_tokens


def drain_seconds(policy: AdaptivePolicy, live: np.ndarray, remaining: np.ndarray,
                  by_k: np.ndarray | None = None) -> np.ndarray:
    """[K + 1] D(K) of AdaptivePolicy.drain_seconds, every K at once in numpy; by_k: expected_by_k's."""
    gain, reach = policy.expected_by_k(policy.acceptance(), by_k)
    k_max = policy.k_max
    rows = np.flatnonzero(live)
    size = len(rows)
    # E[X^2] of the tokens X a step emits: 1 + sum_j (2j + 1) P(draft j accepted), j 1-based, j <= K
    below = np.arange(k_max)[None, :] < np.arange(k_max + 1)[:, None]  # [K + 1, K]
    square = 1.0 + (reach[:, rows] * ((2 * np.arange(1, k_max + 1) + 1) * below)[:, None, :]).sum(axis=2)
    seconds = policy._drain_costs(size)  # [B, K + 1]
    tokens = np.maximum(remaining[rows], 1)
    m = policy.prior_weight
    unknown = m / (policy.pending_decay * policy.slot_counts[0, rows, 0] + m)  # [B]
    spread_e = policy.population_spread()  # [K + 1]
    column = np.arange(k_max + 1)[:, None]
    k_b = np.minimum(column, policy.cap[rows][None, :])  # [K + 1, B]
    mean = gain[rows[None, :], k_b]
    variance = np.maximum(square[k_b, np.arange(size)[None, :]] - mean ** 2, 0.0)
    needed = tokens / mean
    order = np.argsort(needed, axis=1, kind="stable")
    unsure = (needed / mean * unknown * spread_e[k_b]) ** 2
    spread = np.sqrt(needed * variance / mean ** 2 + unsure)[column, order]
    steps = np.maximum.accumulate(np.maximum(needed[column, order] + spread * _blom_scores(size), 0.0), axis=1)
    lengths = steps.copy()
    lengths[:, 1:] -= steps[:, :-1]
    return (lengths * seconds.T).sum(axis=1)


def population_spread(profiles: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """[K + 1] AdaptivePolicy.population_spread of profiles [R, 2, K] (each finished request's reaches and successes)
    at the worker prior [K], in numpy: each request's own a_j (the prior where never reached), the variance of E(K)
    over the requests less the mean of each one's binomial noise carried to E(K) by dE(K) / da_j; zeros below two."""
    k = len(prior)
    if len(profiles) < 2:
        return np.zeros(k + 1)
    reaches, successes = profiles[:, 0], profiles[:, 1]
    own = np.where(reaches > 0, successes / np.maximum(reaches, 1e-12), prior)  # [R, K]
    noise = own * (1.0 - own) / np.maximum(reaches, 1.0)  # [R, K] variance of each a_j
    # dE(K)/da_j = sum over i = j .. K - 1 of prod_{l <= i, l != j} a_l
    grad = np.zeros((len(own), k + 1, k))
    for j in range(k):
        without = own.copy()
        without[:, j] = 1.0
        reach = np.cumprod(without, axis=1)  # [R, K]: prod_{l <= i, l != j} a_l
        grad[:, j + 1:, j] = np.cumsum(reach[:, j:], axis=1)  # K = j + 1 .. k
    noise_e = (grad ** 2 * noise[:, None, :]).sum(axis=2)  # [R, K + 1]
    spread = expected_tokens(own).var(axis=0) - noise_e.mean(axis=0)
    return np.sqrt(np.maximum(spread, 0.0))


class CountingLoop:
    """AdaptivePolicy.observe's counts, one step at a time by a plain loop: slot counts (decayed), totals, per-k
    totals and k_shift under the slot's previous k_b, first verifications apart, the carry sums and the fill."""

    def __init__(self, n: int, k: int, *, decay: float, prior_weight: float, by_anchor: bool = True):
        self.n, self.k, self.decay, self.w, self.by_anchor = n, k, decay, prior_weight, by_anchor
        self.counts, self.raw = np.zeros((2, n, k)), np.zeros((2, n, k))
        self.totals, self.first_totals, self.fill = np.zeros((2, k)), np.zeros((2, k)), np.zeros((2, k))
        self.k_totals, self.k_shift, self.carry = np.zeros((2, k, k)), np.zeros((k, k)), np.zeros(5)
        self.prev, self.fresh, self.pending = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), 1.0

    def step(self, allowed: np.ndarray, drafted: np.ndarray, emitted: np.ndarray, count_fill: bool) -> None:
        if not allowed.any() and not drafted.any():
            self.pending *= self.decay
            self.prev[:] = 0
            return
        factor, self.pending = self.pending * self.decay, 1.0
        prior = _laplace(self.totals)
        above = _shrunk(self.counts, prior, self.w) - prior  # [N, K], as known before the step
        counts = np.zeros((2, self.n, self.k))
        for b in range(self.n):
            a = min(max(allowed[b], drafted[b]), self.k)
            prev, self.prev[b] = self.prev[b], a if emitted[b] > 0 else 0
            first = self.fresh[b] and self.prev[b] > 0
            self.fresh[b] &= not first
            if count_fill and emitted[b] > 0:
                for j in range(a):
                    self.fill[0, j] += 1
                    self.fill[1, j] += j < drafted[b]
            for j in range(self.k):
                hit = np.array([j < min(a, emitted[b]), j < min(a, emitted[b] - 1)], dtype=float)
                if not hit[0]:
                    continue
                if first:
                    self.first_totals[:, j] += hit
                    continue
                counts[:, b, j] = hit
                self.totals[:, j] += hit
                self.raw[:, b, j] += hit
                outcome = hit[1] - prior[j]
                self.carry += (above[b, j], outcome, outcome * above[b, j], above[b, j] ** 2, 1.0)
                if prev > 0:
                    self.k_totals[:, prev - 1, j] += hit
                    if self.by_anchor:
                        self.k_shift[prev - 1, j] += above[b, j]
        self.counts = self.counts * factor + counts
