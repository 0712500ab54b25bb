"""Gaussian differential privacy (Dong, Roth, Su 2019; Bu, Dong, Long, Su 2020), for comparisons.

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.

Noisy SGD with Poisson sampling rate q, noise multiplier sigma and T steps is asymptotically
(central limit theorem, q -> 0, T -> inf with q sqrt(T) fixed) mu-GDP with

    mu = q * sqrt(T * (exp(1 / sigma^2) - 1)),

and mu-GDP is (epsilon, delta(epsilon))-DP for every epsilon >= 0 with

    delta(epsilon) = Phi(-epsilon / mu + mu / 2) - exp(epsilon) * Phi(-epsilon / mu - mu / 2).

The CLT is an approximation that can *underestimate* the privacy loss (Opacus warns so in its GDP
accountant), badly so for large q. privehr therefore claims epsilon from the PRV accountant (RDP
alongside, :mod:`privehr.models.privacy.accounting`) and reports mu only so that results can be set beside
papers that state budgets in mu-GDP (Su et al. 2023: mu = 6.10, 3.92, 2.45, 1.49 at q = 0.5, T = 8000).
"""

from __future__ import annotations

import math

from scipy.optimize import brentq
from scipy.stats import norm

__all__ = ["gdp_mu", "sigma_for_mu", "gdp_delta", "gdp_epsilon"]


def gdp_mu(noise_multiplier: float, sample_rate: float, steps: int) -> float:
    """mu of T Poisson-subsampled Gaussian steps (the CLT approximation); inf where exp(1/sigma^2) overflows."""
    try:
        return sample_rate * math.sqrt(steps * math.expm1(noise_multiplier ** -2))
    except OverflowError:
        return math.inf


def sigma_for_mu(mu: float, sample_rate: float, steps: int) -> float:
    """The noise multiplier whose T steps at rate q are mu-GDP: sigma = 1 / sqrt(log(1 + (mu/q)^2 / T))."""
    if mu <= 0:
        raise ValueError("mu must be positive")
    return 1.0 / math.sqrt(math.log1p((mu / sample_rate) ** 2 / steps))


def gdp_delta(epsilon: float, mu: float) -> float:
    """delta(epsilon) of mu-GDP; the second term in log space, exp(eps + log Phi(.)), so large eps cannot overflow."""
    return float(norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon + norm.logcdf(-epsilon / mu - mu / 2)))


def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest epsilon with delta(epsilon) <= delta under mu-GDP (delta(epsilon) decreases in epsilon)."""
    if not 0 < delta < 1:
        raise ValueError("delta must lie in (0, 1)")
    if math.isinf(mu):
        return math.inf
    if gdp_delta(0.0, mu) <= delta:
        return 0.0
    high = 1.0
    while gdp_delta(high, mu) > delta:
        high *= 2
    return float(brentq(lambda e: gdp_delta(e, mu) - delta, 0.0, high, xtol=1e-10))
