"""Zero-concentrated DP (Bun & Steinke 2016) and its conversion to (epsilon, delta): the budget of the marginal
mechanisms (AIM, MST), which measure under rho-zCDP and are recorded at (epsilon, delta).

References:
    Canonne, Kamath, Steinke (2020). The Discrete Gaussian for Differential Privacy. NeurIPS (CKS20).
"""

from __future__ import annotations

import math

__all__ = ["cdp_delta", "cdp_rho", "cdp_epsilon"]



def _log_delta(alpha: float, rho: float, epsilon: float) -> float:
    # log of exp((a - 1)(a rho - eps)) / (a - 1) * (1 - 1/a)^a, CKS20 Prop. 12 at order a
    return (alpha - 1) * (alpha * rho - epsilon) + alpha * math.log1p(-1 / alpha) - math.log(alpha - 1)


def cdp_delta(rho: float, epsilon: float) -> float:
    """delta such that rho-zCDP implies (epsilon, delta)-DP (CKS20, Prop. 12 / Cor. 13).

    The bound holds at every order alpha > 1; its log is convex in alpha with derivative
    (2 alpha - 1) rho - epsilon + log(1 - 1/alpha), increasing, so the best order is found by
    bisection (an inexact order only loosens delta).

    >>> round(cdp_delta(0.5, 3.0), 6) <= round(math.exp(-(3.0 - 0.5) ** 2 / 2), 6)
    True
    """
    if not (rho >= 0 and epsilon >= 0 and math.isfinite(rho) and math.isfinite(epsilon)):
        raise ValueError("need finite rho >= 0 and epsilon >= 0")
    if rho == 0:
        return 0.0
    lo, hi = 1.0, max(2.0, (epsilon + 1) / (2 * rho) + 2)  # slope < 0 near 1, > 0 at hi
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid == lo or mid == hi:
            break
        if (2 * mid - 1) * rho - epsilon + math.log1p(-1 / mid) < 0:
            lo = mid
        else:
            hi = mid
    alpha = max(hi, 1.0 + 1e-12)
    return min(1.0, math.exp(min(0.0, _log_delta(alpha, rho, epsilon))))


def cdp_rho(epsilon: float, delta: float) -> float:
    """The largest rho (to bisection precision, from below) with cdp_delta(rho, epsilon) <= delta.

    >>> rho = cdp_rho(1.0, 1e-5)
    >>> cdp_delta(rho, 1.0) <= 1e-5 < cdp_delta(rho * 1.001, 1.0)
    True
    """
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite positive number, got {epsilon!r}")
    if not (0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    lo, hi = 0.0, epsilon + 1.0
    while cdp_delta(hi, epsilon) <= delta:
        lo, hi = hi, 2 * hi
    return _bisect(lo, hi, lambda rho: cdp_delta(rho, epsilon) <= delta)[0]


def _bisect(lo: float, hi: float, below) -> tuple[float, float]:
    """Narrow [lo, hi] to the floating-point boundary of a monotone predicate, true at lo and false at hi."""
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid == lo or mid == hi:
            break
        lo, hi = (mid, hi) if below(mid) else (lo, mid)
    return lo, hi


def cdp_epsilon(rho: float, delta: float) -> float:
    """The smallest epsilon (from above) with cdp_delta(rho, epsilon) <= delta."""
    if not (0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    if rho == 0:
        return 0.0
    lo, hi = 0.0, rho + 2 * math.sqrt(rho * math.log(1 / delta))  # the standard bound holds at hi
    return _bisect(lo, hi, lambda epsilon: cdp_delta(rho, epsilon) > delta)[1]
