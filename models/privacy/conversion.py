"""Convert between a noise multiplier sigma, mu-GDP and (epsilon, delta) for T Poisson-subsampled
Gaussian steps at rate q (what ``privehr privacy convert`` prints).

Given one of sigma, mu or a target epsilon, the others follow: mu from sigma by the GDP central
limit theorem (:mod:`privehr.models.privacy.gdp`), sigma from mu by its inverse, sigma from a target epsilon
by calibrating PRV and RDP (:mod:`privehr.models.privacy.accounting`). For the resulting sigma every
accountant's epsilon at delta is reported: PRV (the claim), RDP (an upper bound) and GDP (the CLT
approximation papers quote; it can underestimate).
"""

from __future__ import annotations

from privehr.models.privacy.gdp import gdp_epsilon, gdp_mu, sigma_for_mu
from privehr.models.privacy.accounting import calibrate_noise_multiplier, epsilon_spent

__all__ = ["convert_budget"]


def convert_budget(*, sample_rate: float, steps: int, delta: float, sigma: float | None = None,
                   mu: float | None = None, epsilon: float | None = None) -> dict:
    """Exactly one of sigma, mu, epsilon; returns all of them for the same (q, T, delta)."""
    given = [name for name, v in (("sigma", sigma), ("mu", mu), ("epsilon", epsilon)) if v is not None]
    if len(given) != 1:
        raise ValueError("give exactly one of sigma, mu and epsilon")
    if not (0 < sample_rate <= 1 and steps >= 1 and 0 < delta < 1):
        raise ValueError("need 0 < sample_rate <= 1, steps >= 1 and 0 < delta < 1")
    if mu is not None:
        sigma = sigma_for_mu(mu, sample_rate, steps)
    elif epsilon is not None:
        sigma = calibrate_noise_multiplier(epsilon, delta, sample_rate, steps).noise_multiplier
    spend = epsilon_spent(sigma, sample_rate, steps, delta)
    mu_out = gdp_mu(sigma, sample_rate, steps)
    return {"given": given[0], "sample_rate": sample_rate, "steps": steps, "delta": delta,
            "noise_multiplier": sigma, "mu": mu_out, "epsilon_prv": spend.epsilon_prv,
            "epsilon_rdp": spend.epsilon_rdp, "epsilon_gdp": gdp_epsilon(mu_out, delta)}
