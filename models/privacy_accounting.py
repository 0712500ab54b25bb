"""Privacy accounting of DP-SGD with Poisson subsampling (Opacus accountants).

A run of T steps with sampling rate q and noise multiplier sigma is (epsilon, delta)-DP with
epsilon from the PRV accountant (Gopi, Lee, Wutschitz 2021; numerically tight, reported as the
claim) and from the RDP accountant (Mironov 2017; an upper bound, reported alongside). The noise
multiplier is calibrated so that *both* accountants give epsilon <= the target. RDP uses orders up to
2^14: with Opacus's default orders (<= 63) it cannot certify epsilon below log(1/delta)/62 (0.19 at
delta = 1e-5) at any sigma, and even with these orders it stops near 4e-3 at delta = 1e-5. Below that
floor the claim rests on PRV alone and the RDP value (above the target) is still reported. Where an
accountant cannot give a value at all, it is reported as None.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from functools import lru_cache

from opacus.accountants import PRVAccountant, RDPAccountant
from opacus.accountants.utils import get_noise_multiplier

__all__ = ["PrivacySpend", "calibrate_noise_multiplier", "epsilon_spent", "prv_epsilon", "RDP_ORDERS"]

PRV_MAX_POINTS = 2_000_000  # PRV's discretisation grid: 2 L / mesh points, several float64 arrays each

RDP_ORDERS = RDPAccountant.DEFAULT_ALPHAS + [2.0 ** k for k in range(7, 15)]


@dataclass(frozen=True)
class PrivacySpend:
    noise_multiplier: float
    sample_rate: float
    steps: int
    delta: float
    epsilon_prv: float | None
    epsilon_rdp: float | None
    target_epsilon: float | None = None

    @property
    def epsilon(self) -> float:
        """The claimed epsilon: PRV where it could be computed, else RDP."""
        if self.epsilon_prv is None and self.epsilon_rdp is None:
            raise RuntimeError("no accountant could compute epsilon")
        return self.epsilon_prv if self.epsilon_prv is not None else self.epsilon_rdp

    def as_dict(self) -> dict:
        return asdict(self) | {"epsilon": self.epsilon, "accountant": "prv" if self.epsilon_prv is not None
                               else "rdp"}


def _tolerance(target: float) -> float:
    """Bisection tolerance on epsilon: 1 % of the target, at most 0.01."""
    return max(min(0.01, target / 100), 1e-8)


def _prv_error(target: float) -> float:
    """PRV's eps_error: it returns the *upper* end of its estimate, so a coarser error only spends less
    of the budget; 10 % of the target keeps calibrations at epsilon <= 1e-3 to seconds per evaluation."""
    return max(min(0.01, target / 10), 1e-8)


def prv_epsilon(history: list[tuple[float, float, int]], delta: float, eps_error: float,
                epsilon_rdp: float) -> float | None:
    """PRV's epsilon for a (heterogeneous) history of (sigma, q, steps), or None where it cannot be had.

    PRV discretises the privacy loss on a grid of about 2 L / mesh points, L >= the composed epsilon
    (estimated by RDP's) and mesh = eps_error / sqrt(N log(12 / delta_error) / 2) for N steps in all:
    long, large-q compositions (DP-NF on a small table: q = 0.5, tens of thousands of steps) would need
    tens of millions of points and gigabytes. The error is widened to keep the grid under
    PRV_MAX_POINTS; if that would make it coarser than 10 % of the RDP value, PRV is skipped (None)
    and the RDP bound stands.
    """
    steps = sum(t for _, _, t in history)
    spread = math.sqrt(steps * math.log(12 / (delta / 1000)) / 2)
    needed = 2 * (2 * epsilon_rdp) * spread / PRV_MAX_POINTS
    if needed > eps_error:
        if needed > 0.1 * epsilon_rdp:
            return None
        eps_error = needed
    try:
        prv = PRVAccountant()
        prv.history = list(history)
        with warnings.catch_warnings():  # log(0) at the edge of PRV's domain for large q: harmless
            warnings.simplefilter("ignore", RuntimeWarning)
            return float(prv.get_epsilon(delta, eps_error=eps_error))
    except (ValueError, RuntimeError, AssertionError, MemoryError):  # known numerical failures (opacus #591, #601)
        return None


@lru_cache(maxsize=1024)  # pure in its arguments; every run of a grid cell asks for the same (sigma, q, T, delta)
def epsilon_spent(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                  target_epsilon: float | None = None) -> PrivacySpend:
    """epsilon after ``steps`` Poisson-subsampled Gaussian steps, from PRV and RDP."""
    rdp = RDPAccountant()
    rdp.history = [(noise_multiplier, sample_rate, steps)]
    with warnings.catch_warnings():  # "optimal order is the largest alpha": still a valid upper bound
        warnings.simplefilter("ignore", UserWarning)
        eps_rdp = float(rdp.get_epsilon(delta))
        if target_epsilon is None or eps_rdp > target_epsilon:  # the large orders are slower; use them if needed
            eps_rdp = min(eps_rdp, float(rdp.get_epsilon(delta, alphas=RDP_ORDERS)))
    eps_prv = prv_epsilon([(noise_multiplier, sample_rate, steps)], delta, _prv_error(target_epsilon or eps_rdp), eps_rdp)
    return PrivacySpend(noise_multiplier, sample_rate, steps, delta, eps_prv, eps_rdp, target_epsilon)


def _sigma_for(accountant: str, target_epsilon: float, delta: float, sample_rate: float, steps: int):
    options = [{}, {"alphas": RDP_ORDERS}] if accountant == "rdp" else [{"eps_error": _prv_error(target_epsilon)}]
    for extra in options:  # RDP: Opacus's orders first (fast), the large orders only where those cannot reach
        try:
            with warnings.catch_warnings():  # RDP's "largest alpha" note; PRV's log(0) at its domain edge
                warnings.simplefilter("ignore", UserWarning)
                warnings.simplefilter("ignore", RuntimeWarning)
                return get_noise_multiplier(target_epsilon=target_epsilon, target_delta=delta,
                                            sample_rate=sample_rate, steps=steps, accountant=accountant,
                                            epsilon_tolerance=_tolerance(target_epsilon), **extra)
        except (ValueError, RuntimeError, AssertionError):
            continue
    return None


@lru_cache(maxsize=256)  # the grid asks again for the same (epsilon, delta, q, T) for every seed
def calibrate_noise_multiplier(target_epsilon: float, delta: float, sample_rate: float, steps: int) -> PrivacySpend:
    """Smallest sigma (to Opacus's tolerance) for which PRV and RDP both give epsilon <= target
    (PRV alone where the target is below what RDP can certify at any sigma).

    RDP's bisection is cheap and RDP is almost always the looser bound, so its sigma is found first
    and PRV is only evaluated there; PRV's own (slow) bisection runs only if PRV still exceeds the
    target at that sigma.
    """
    sigma = _sigma_for("rdp", target_epsilon, delta, sample_rate, steps)
    spend = epsilon_spent(sigma, sample_rate, steps, delta, target_epsilon) if sigma else None
    if spend is None or spend.epsilon_prv is None or spend.epsilon_prv > target_epsilon:
        sigma_prv = _sigma_for("prv", target_epsilon, delta, sample_rate, steps)
        candidates = [s for s in (sigma, sigma_prv) if s is not None]
        if not candidates:
            raise RuntimeError(f"no accountant can reach epsilon {target_epsilon} at delta {delta} with q = "
                               f"{sample_rate:.4g} and {steps} steps; raise the target or change q and steps")
        spend = epsilon_spent(max(candidates), sample_rate, steps, delta, target_epsilon)
    binding = [spend.epsilon_prv] + ([spend.epsilon_rdp] if sigma is not None else [])
    if any(e is not None and e > target_epsilon for e in binding):
        raise RuntimeError(f"calibration failed: sigma {spend.noise_multiplier} gives epsilon {spend.as_dict()} "
                           f"above the target {target_epsilon}")
    return spend
