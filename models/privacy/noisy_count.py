"""A patient count released with noise: the two-sided geometric mechanism.

Ghosh, Roughgarden, Sundararajan, "Universally Utility-Maximizing Privacy Mechanisms", STOC 2009.
A count has sensitivity 1 under add/remove-one neighbours; releasing c + Z with
P(Z = k) = (1 - a) / (1 + a) a^|k|, a = exp(-epsilon), is epsilon-DP (the discrete Laplace
mechanism). Integer-valued, so the floating-point attacks on continuous Laplace samplers (Mironov,
"On Significance of the Least Significant Bits for Differential Privacy", CCS 2012) do not apply. Z
is the difference of two independent geometric variables with success probability 1 - a.
Clamping the result to at least ``minimum`` is post-processing.

>>> import numpy as np
>>> draws = [noisy_count(100, 1.0, np.random.default_rng(s)) for s in range(2000)]
>>> bool(abs(np.mean(draws) - 100) < 0.2)
True
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["noisy_count", "geometric_noise_sd"]


def noisy_count(count: int, epsilon: float, rng: np.random.Generator, minimum: int = 1) -> int:
    """``count`` + two-sided geometric noise at ``epsilon``, at least ``minimum``."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite positive number, got {epsilon!r}")
    p = -math.expm1(-epsilon)  # 1 - exp(-epsilon), accurate for small epsilon
    z = int(rng.geometric(p)) - int(rng.geometric(p))
    return max(minimum, int(count) + z)


def geometric_noise_sd(epsilon: float) -> float:
    """Standard deviation of the noise: sqrt(2 a) / (1 - a), a = exp(-epsilon)."""
    a = math.exp(-epsilon)
    return math.sqrt(2 * a) / (1 - a)
