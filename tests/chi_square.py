"""Pearson chi-square goodness-of-fit p-value for the distribution tests: scipy when installed,
else the regularized upper incomplete gamma function computed here."""

from __future__ import annotations

import math

import numpy as np


def gamma_q(a: float, x: float) -> float:
    """Regularized upper incomplete gamma Q(a, x) (series below a + 1, continued fraction above)."""
    if x <= 0:
        return 1.0
    log_pre = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        n = 1
        while abs(term) > abs(total) * 1e-16:
            term *= x / (a + n)
            total += term
            n += 1
        return max(0.0, 1.0 - total * math.exp(log_pre))
    tiny = 1e-300  # modified Lentz
    b, c, d = x + 1 - a, 1 / tiny, 1 / (x + 1 - a)
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        h *= d * c
        if abs(d * c - 1) < 1e-16:
            break
    return math.exp(log_pre) * h


def chi2_pvalue(counts, probs) -> float:
    """Pearson chi-square p-value of observed counts against probabilities (bins with p > 0)."""
    counts = np.asarray(counts, np.float64)
    probs = np.asarray(probs, np.float64)
    assert counts[probs <= 0].sum() == 0, f"counts on zero-probability bins: {counts[probs <= 0]}"
    keep = probs > 0
    expected = probs[keep] / probs[keep].sum() * counts.sum()
    stat = float(((counts[keep] - expected) ** 2 / expected).sum())
    df = int(keep.sum()) - 1
    try:
        from scipy.stats import chi2
    except ImportError:
        return gamma_q(df / 2.0, stat / 2.0)
    return float(chi2.sf(stat, df))
