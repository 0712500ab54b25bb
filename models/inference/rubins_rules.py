"""Rubin's rules: pool an estimate computed on each of m imputed datasets (Rubin 1987; van Buuren 2018).

With estimates Q_i and their variances U_i, i = 1..m:
    Q_bar = mean Q_i,  W = mean U_i (within),  B = var(Q_i, ddof=1) (between),
    T = W + (1 + 1/m) B (total variance),  lambda = (1 + 1/m) B / T (fraction of missing information),
    nu = (m - 1) / lambda^2 (Rubin's degrees of freedom for the t reference distribution).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PooledEstimate", "pool"]


@dataclass(frozen=True)
class PooledEstimate:
    estimate: float
    within: float
    between: float
    total_variance: float
    std_error: float
    fraction_missing_information: float
    degrees_of_freedom: float
    m: int


def pool(estimates, variances) -> PooledEstimate:
    """Pool m >= 2 scalar estimates with their sampling variances."""
    q = np.asarray(estimates, dtype=float)
    u = np.asarray(variances, dtype=float)
    if q.ndim != 1 or q.shape != u.shape or q.size < 2:
        raise ValueError("pool needs m >= 2 estimates and as many variances")
    m = q.size
    within, between = float(u.mean()), float(q.var(ddof=1))
    total = within + (1 + 1 / m) * between
    lam = (1 + 1 / m) * between / total if total > 0 else 0.0
    nu = (m - 1) / lam**2 if lam > 0 else float("inf")
    return PooledEstimate(float(q.mean()), within, between, total, float(np.sqrt(total)), lam, nu, m)
