import math

import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from privehr.models.privacy.accounting import calibrate_noise_multiplier, epsilon_spent


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
    import privehr.models.privacy.accounting as accounting

    history = [(4.0, 0.5, 20_000)]
    rdp = epsilon_spent(4.0, 0.5, 20_000, 1e-5).epsilon_rdp
    monkeypatch.setattr(accounting, "PRV_MAX_POINTS", 1_000)
    assert accounting.prv_epsilon(history, 1e-5, 0.01, rdp) is None  # would need a 10 %-coarse grid
    monkeypatch.setattr(accounting, "PRV_MAX_POINTS", 200_000)
    widened = accounting.prv_epsilon(history, 1e-5, 0.01, rdp)
    assert widened is not None and widened <= rdp * 1.01


# The demo's releases (README, "make demo" at 4,000 stays): DP-SGD on 1,884 + 270 train+dev stays, batch 128,
# 5 epochs, at each target epsilon; DP-NF on the demo EHR table's 62 training patients, q = 0.5, T = 1000, at
# the mu budgets of Su et al. 2023 and at epsilon 1 and 4.
DEMO_DP_SGD = [(2154, 128, 5, eps) for eps in (0.1, 1.0, 3.5, 10.0)]
DEMO_DP_NF = [(62, 0.5, 1000, kind, value) for kind, value in
              [("mu", 6.10), ("mu", 3.92), ("mu", 2.45), ("mu", 1.49), ("epsilon", 1.0), ("epsilon", 4.0)]]


@pytest.mark.parametrize("release", [("dp_sgd", *r) for r in DEMO_DP_SGD] + [("dp_nf", *r) for r in DEMO_DP_NF],
                         ids=lambda r: "-".join(map(str, r)))
def test_three_accountants_agree_on_the_demo_releases(release):
    """PLD (an upper bound) is at most RDP; PLD's bracket [optimistic, pessimistic] and PRV's [upper - 2 eps_error,
    upper] both hold the true epsilon, so they must overlap."""
    from privehr.models.privacy.budget_kinds import budget_kind
    from privehr.models.privacy.release_plan import ReleasePlan

    kind, *args = release
    if kind == "dp_sgd":
        n, b, epochs, eps = args
        plan = ReleasePlan.for_epochs(n, b, epochs, target_epsilon=eps, delta=1e-5)
    else:
        n, rate, steps, budget, value = args
        plan = budget_kind(budget).plan(n, rate, steps, value, delta=1e-5)
    s = plan.spend
    assert None not in (s.epsilon_prv, s.epsilon_pld, s.epsilon_pld_lower)
    assert s.epsilon_pld <= s.epsilon_rdp
    assert s.epsilon_pld_lower <= s.epsilon_pld
    assert s.epsilon_pld_lower <= s.epsilon_prv and s.epsilon_prv - 2 * s.prv_eps_error <= s.epsilon_pld
    if plan.target_epsilon is not None:
        assert s.epsilon_prv <= plan.target_epsilon and s.epsilon_rdp <= plan.target_epsilon


def test_a_non_finite_target_is_refused():
    for bad in (math.inf, math.nan, "Infinity", -1.0, 0.0):
        with pytest.raises(ValueError, match="finite positive|not a number"):
            calibrate_noise_multiplier(bad, 1e-5, 0.05, 200)


def test_cached_rdp_equals_opacus_rdp_accountant_exactly():
    """The ledger's RDP composes cached per-step RDP vectors (T steps = T times one, each the vectorised series of
    models/privacy/sampled_gaussian_rdp.py): the same numbers as Opacus's RDPAccountant on the same history to 1e-12
    (rounding: its terms summed in another order) at the same best order, and a repeated (sigma, q) is computed once."""
    import warnings

    import numpy as np
    from opacus.accountants import RDPAccountant

    from privehr.models.privacy.accounting import RDP_ORDERS, _rdp_step_computed, _rdp_spent, rdp_epsilon

    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Opacus: "optimal order is the smallest alpha" at small sigma
        for _ in range(5):
            history = [(float(rng.uniform(0.5, 5)), float(rng.uniform(1e-3, 0.5)), int(rng.integers(1, 5000)))
                       for _ in range(int(rng.integers(1, 4)))]
            history += history[:1]  # a release repeated, as every seed of a cell is
            accountant = RDPAccountant()
            accountant.history = list(history)
            for orders in (RDPAccountant.DEFAULT_ALPHAS, RDP_ORDERS):
                eps, order = _rdp_spent(history, 1e-5, tuple(orders))
                assert (eps, order) == (pytest.approx(accountant.get_privacy_spent(delta=1e-5, alphas=orders)[0],
                                                      rel=1e-10), accountant.get_privacy_spent(delta=1e-5,
                                                                                               alphas=orders)[1])
            assert rdp_epsilon(history, 1e-5) <= accountant.get_epsilon(1e-5) * (1 + 1e-10)
    before = _rdp_step_computed.cache_info().hits
    _rdp_spent([(1.1, 0.01, 100), (1.1, 0.01, 300)], 1e-5, tuple(RDPAccountant.DEFAULT_ALPHAS))
    assert _rdp_step_computed.cache_info().hits >= before + 1


def test_an_infinite_prv_estimate_is_no_estimate_and_rdp_stands(monkeypatch):
    """Opacus's PRV returns inf for very long compositions (a year of nightly grids); the claim is then RDP's."""
    from opacus.accountants import PRVAccountant

    from privehr.models.privacy import accounting

    monkeypatch.setattr(PRVAccountant, "get_epsilon", lambda self, delta, eps_error=0.01: float("inf"))
    monkeypatch.setattr(accounting, "_STORE", None)
    monkeypatch.setattr(accounting, "_STORE_FACTORY", None)
    composed = accounting.recompose_history([(1.1, 0.02, 777)], 1e-5, eps_error=0.01)
    assert composed.prv is None and composed.claimed == composed.rdp and composed.rdp < float("inf")


def test_the_orders_and_the_conversion_are_opacus_own_without_importing_it_for_a_stored_view():
    """The ledger's views read stored curves without importing Opacus (and torch, seconds of CPU); the orders and the
    RDP-to-(epsilon, delta) conversion they use are Opacus's, value for value."""
    import subprocess
    import sys

    import numpy as np
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis import rdp as opacus_rdp

    from privehr.models.privacy.accounting import DEFAULT_ALPHAS, RDP_ORDERS, privacy_spent

    assert DEFAULT_ALPHAS == RDPAccountant.DEFAULT_ALPHAS and RDP_ORDERS[:len(DEFAULT_ALPHAS)] == DEFAULT_ALPHAS
    rng = np.random.default_rng(0)
    for sigma, q, steps in [(0.8, 0.01, 1000), (2.5, 0.06, 85), (19.6, 0.5, 10), (0.3, 1.0, 1)]:
        curve = opacus_rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=RDP_ORDERS)
        for delta in (1e-5, 1e-8):
            assert privacy_spent(RDP_ORDERS, curve, delta) == opacus_rdp.get_privacy_spent(
                orders=RDP_ORDERS, rdp=curve, delta=delta)
    noisy = rng.uniform(0, 5, len(RDP_ORDERS))
    assert privacy_spent(RDP_ORDERS, noisy, 1e-5) == opacus_rdp.get_privacy_spent(orders=RDP_ORDERS, rdp=noisy,
                                                                                  delta=1e-5)
    loaded = subprocess.run([sys.executable, "-c", "import sys, privehr.cli.privacy, privehr.io.ledger; "
                             "print('torch' in sys.modules)"], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"
