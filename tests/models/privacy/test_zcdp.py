"""zCDP to (epsilon, delta): the CKS20 bound, checked against Google's RDP accountant."""

import numpy as np
import pytest

from privehr.models.privacy.zcdp import cdp_delta, cdp_epsilon, cdp_rho


def test_zcdp_conversion_matches_the_bound_and_an_independent_accountant():
    from dp_accounting import dp_event, rdp

    for epsilon, delta in [(0.1, 1e-5), (1.0, 1e-5), (4.0, 1e-6), (50.0, 1e-5)]:
        rho = cdp_rho(epsilon, delta)
        assert cdp_delta(rho, epsilon) <= delta < cdp_delta(rho * 1.0001, epsilon)
        assert cdp_epsilon(rho, delta) == pytest.approx(epsilon, rel=1e-9)
        # Google's RDP accountant on a rho-zCDP event (the same CKS20 bound on a grid of orders)
        orders = np.linspace(1.02, 2000, 200_000)
        accountant = rdp.RdpAccountant(orders=list(orders))
        accountant.compose(dp_event.ZCDpEvent(rho))
        assert accountant.get_epsilon(delta) == pytest.approx(epsilon, rel=2e-3)
    assert cdp_rho(1.0, 1e-5) == pytest.approx(0.030556595, rel=1e-6)  # the papers' cdp_rho(1, 1e-5)
