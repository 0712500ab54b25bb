"""The vectorised RDP of the subsampled Gaussian (models/privacy/sampled_gaussian_rdp.py) against Opacus's own
series, term for term: the same values over a grid of sampling rates, noise levels and every order the accountants
use, the same calibrated sigma, and the same refusals."""

import warnings

import numpy as np
import pytest
from opacus.accountants.analysis import rdp as opacus_rdp
from opacus.accountants.utils import get_noise_multiplier

from privehr.models.privacy.accounting import DEFAULT_ALPHAS, RDP_ORDERS, _sigma_for, _tolerance
from privehr.models.privacy.sampled_gaussian_rdp import rdp_per_step


@pytest.mark.parametrize("q", [1e-3, 0.01, 1 / 17, 1 / 7, 0.25, 0.5, 0.9])
@pytest.mark.parametrize("sigma", [0.4, 0.8, 1.5, 4.0, 20.0])
def test_the_series_is_opacus_series(q, sigma):
    ours = rdp_per_step(q, sigma, RDP_ORDERS)
    theirs = opacus_rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=RDP_ORDERS)
    assert (np.isfinite(ours) == np.isfinite(theirs)).all()
    finite = np.isfinite(theirs)
    # rounding of a different summation order, relative to the value or to 1e-12 of the largest order's (tiny RDP
    # values are differences of numbers near 1 in both codes)
    np.testing.assert_allclose(ours[finite], theirs[finite], rtol=1e-8, atol=1e-13)


def test_the_edge_cases_are_opacus_own():
    for q, sigma in ((0.0, 1.0), (0.3, 0.0), (1.0, 2.0)):
        np.testing.assert_array_equal(rdp_per_step(q, sigma, [1.5, 2.0, 64.0]),
                                      opacus_rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=1,
                                                             orders=[1.5, 2.0, 64.0]))
    assert np.isposinf(rdp_per_step(0.1, 1.0, [float("inf")])).all()


@pytest.mark.parametrize(("epsilon", "q", "steps"), [(1.0, 0.5, 2), (10.0, 0.5, 10), (2.0, 0.125, 16),
                                                     (1.0, 1 / 17, 85), (0.5, 1.0, 1), (0.1, 0.05, 200)])
def test_a_calibration_finds_opacus_sigma(epsilon, q, steps):
    """Opacus's get_noise_multiplier (its default orders, then the large ones where those cannot reach the target,
    as accounting.py asks it), and the bisection on the vectorised curve: the same sigma."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for alphas in (DEFAULT_ALPHAS, RDP_ORDERS):
            try:
                theirs = get_noise_multiplier(target_epsilon=epsilon, target_delta=1e-5, sample_rate=q, steps=steps,
                                              accountant="rdp", epsilon_tolerance=_tolerance(epsilon), alphas=alphas)
                break
            except ValueError:
                continue
    assert _sigma_for("rdp", epsilon, 1e-5, q, steps) == theirs


@pytest.mark.parametrize("history", [[(3.4765625, 0.5, 2)], [(1.1, 0.5, 10)], [(18.36, 0.5, 1000)],
                                     [(2.5, 1 / 17, 85), (1.0, 0.01, 1000)], [(0.8, 0.05, 200)]])
def test_prv_on_the_vectorised_domain_is_opacus_prv(history):
    """PRV's safe domain sized by the vectorised RDP (accounting._prv_accountant): the claimed epsilon is Opacus's
    PRVAccountant's own, to the last bit on these histories (the domain's size moves by rounding at most)."""
    from opacus.accountants import PRVAccountant

    from privehr.models.privacy.accounting import _prv_accountant

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, theirs = _prv_accountant()(), PRVAccountant()
        ours.history, theirs.history = list(history), list(history)
        assert ours.get_epsilon(1e-5, eps_error=0.01) == pytest.approx(theirs.get_epsilon(1e-5, eps_error=0.01),
                                                                        rel=1e-9)
