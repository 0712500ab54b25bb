import math

import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from models.privacy_accounting import calibrate_noise_multiplier, epsilon_spent


def analytic_gaussian_epsilon(sigma: float, delta: float) -> float:
    """Exact epsilon of one full-batch Gaussian mechanism (Balle and Wang, ICML 2018, Theorem 8)."""
    def gap(eps):
        return norm.cdf(-eps * sigma + 1 / (2 * sigma)) - math.exp(eps) * norm.cdf(-eps * sigma - 1 / (2 * sigma)) - delta
    return brentq(gap, 0.0, 100.0)


def test_accountants_agree_with_the_exact_gaussian_mechanism():
    exact = analytic_gaussian_epsilon(1.0, 1e-5)
    spend = epsilon_spent(1.0, sample_rate=1.0, steps=1, delta=1e-5)
    assert exact <= spend.epsilon_prv <= exact + 0.02   # PRV: tight, and an upper estimate
    assert spend.epsilon_rdp >= spend.epsilon_prv        # RDP: a looser upper bound


@pytest.mark.parametrize("target", [0.1, 1.0, 10.0])
def test_calibration_keeps_both_accountants_below_the_target(target):
    spend = calibrate_noise_multiplier(target, 1e-5, 0.05, 200)
    assert spend.epsilon_prv <= target and spend.epsilon_rdp <= target
    assert spend.epsilon_prv > 0.85 * target or spend.epsilon_rdp > 0.98 * target  # not wastefully loose
    looser = epsilon_spent(spend.noise_multiplier * 0.9, 0.05, 200, 1e-5)
    assert max(looser.epsilon_prv, looser.epsilon_rdp) > target  # sigma is (nearly) the smallest that works


def test_more_noise_means_less_epsilon():
    eps = [epsilon_spent(s, 0.02, 500, 1e-5).epsilon for s in (0.8, 1.2, 2.0, 4.0)]
    assert eps == sorted(eps, reverse=True)


def test_prv_grid_stays_bounded(monkeypatch):
    """Long, large-q compositions would need a huge PRV grid: the error widens, or RDP stands alone (None)."""
    import models.privacy_accounting as accounting

    history = [(4.0, 0.5, 20_000)]
    rdp = epsilon_spent(4.0, 0.5, 20_000, 1e-5).epsilon_rdp
    monkeypatch.setattr(accounting, "PRV_MAX_POINTS", 1_000)
    assert accounting.prv_epsilon(history, 1e-5, 0.01, rdp) is None  # would need a 10 %-coarse grid
    monkeypatch.setattr(accounting, "PRV_MAX_POINTS", 200_000)
    widened = accounting.prv_epsilon(history, 1e-5, 0.01, rdp)
    assert widened is not None and widened <= rdp * 1.01
