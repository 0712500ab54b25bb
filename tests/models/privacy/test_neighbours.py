"""Replace-one from add/remove-one by group privacy (models/privacy/neighbours.py), attacked with the one mechanism
whose privacy curve is exact: the Gaussian mechanism on a sum of clipped vectors (add/remove moves the sum by C,
a replacement by 2C). The bound must hold at every noise level and say more than nothing."""

import math

import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from privehr.models.privacy.neighbours import group_privacy, neighbouring_relation


def _delta(epsilon: float, sensitivity: float, sigma: float) -> float:
    """The exact delta(epsilon) of the Gaussian mechanism (Balle and Wang, "Improving the Gaussian Mechanism for
    Differential Privacy", ICML 2018, Theorem 8)."""
    a, b = sensitivity / (2 * sigma), epsilon * sigma / sensitivity
    return norm.cdf(a - b) - math.exp(epsilon) * norm.cdf(-a - b)


def _epsilon(delta: float, sensitivity: float, sigma: float) -> float:
    return brentq(lambda e: _delta(e, sensitivity, sigma) - delta, 0.0, 500.0)


@pytest.mark.parametrize("sigma", [0.6, 1.0, 2.0, 5.0, 20.0])
def test_the_replace_one_bound_holds_for_the_exact_gaussian_curve(sigma):
    delta = 1e-5
    eps = _epsilon(delta, 1.0, sigma)  # add/remove: the sum moves by C = 1
    eps_r, delta_r = group_privacy(eps, delta, 2)
    assert _delta(eps_r, 2.0, sigma) <= delta_r  # replace-one: the sum moves by 2C
    # not vacuous: the true replace-one epsilon at that delta is within the bound, and more than the add/remove one
    assert eps < _epsilon(delta_r, 2.0, sigma) <= eps_r


def test_group_privacy_of_one_is_the_guarantee_itself_and_grows_with_the_group():
    assert group_privacy(0.7, 1e-6, 1) == (0.7, 1e-6)
    eps3, delta3 = group_privacy(0.7, 1e-6, 3)
    assert eps3 == pytest.approx(2.1) and delta3 == pytest.approx(1e-6 * (1 + math.exp(0.7) + math.exp(1.4)))
    with pytest.raises(ValueError):
        group_privacy(1.0, 1e-5, 0)


def test_the_relation_is_replace_one_only_where_the_count_is_public():
    assert neighbouring_relation(1.0, 1e-5, "patient", False) == {
        "relation": "add/remove one patient", "why": "the patient count is not released exactly"}
    public = neighbouring_relation(1.0, 1e-5, "patient", True)
    assert public["relation"] == "replace one patient" and public["epsilon"] == 2.0
    assert neighbouring_relation(None, 1e-5, "patient", True)["epsilon"] is None  # no DP total, no number
