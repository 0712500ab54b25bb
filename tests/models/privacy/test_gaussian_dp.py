"""mu-GDP arithmetic against the own numbers of Su et al. 2023, and the sigma / mu / epsilon converter."""

import math

import pytest

from privehr.models.privacy.conversion import convert_budget
from privehr.models.privacy.gdp import gdp_delta, gdp_epsilon, gdp_mu, sigma_for_mu

# Su et al. 2023, Sec. 3.2: r = 0.5, T = 8000; sigma -> mu, and epsilon at delta = 0.01
SU_2023 = [(7.36, 6.10, 32), (11.44, 3.92, 16), (18.28, 2.45, 8), (29.93, 1.49, 4)]


@pytest.mark.parametrize("sigma, mu, epsilon", SU_2023)
def test_su_2023_budgets(sigma, mu, epsilon):
    assert gdp_mu(sigma, 0.5, 8000) == pytest.approx(mu, abs=0.01)
    assert sigma_for_mu(mu, 0.5, 8000) == pytest.approx(sigma, rel=0.005)
    assert gdp_epsilon(mu, 0.01) == pytest.approx(epsilon, rel=0.01)


def test_epsilon_inverts_delta():
    for mu in (0.3, 1.0, 4.0):
        eps = gdp_epsilon(mu, 1e-5)
        assert gdp_delta(eps, mu) == pytest.approx(1e-5, rel=1e-6)
        assert gdp_delta(eps * 0.9, mu) > 1e-5  # delta(epsilon) decreases


def test_converter_round_trips_and_reports_every_accountant():
    from_sigma = convert_budget(sample_rate=0.02, steps=500, delta=1e-5, sigma=1.2)
    from_mu = convert_budget(sample_rate=0.02, steps=500, delta=1e-5, mu=from_sigma["mu"])
    assert from_mu["noise_multiplier"] == pytest.approx(1.2, rel=1e-9)
    target = convert_budget(sample_rate=0.02, steps=500, delta=1e-5, epsilon=2.0)
    assert target["epsilon_prv"] <= 2.0 and target["epsilon_rdp"] <= 2.0
    assert max(target["epsilon_prv"], target["epsilon_rdp"]) > 1.95  # the binding accountant sits at the target
    assert math.isfinite(target["epsilon_gdp"])
    with pytest.raises(ValueError, match="exactly one"):
        convert_budget(sample_rate=0.02, steps=500, delta=1e-5, sigma=1.0, mu=1.0)
