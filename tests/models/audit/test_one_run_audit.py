"""The one-run audit reproduces the published test vectors (Steinke, Nasr, Jagielski 2023)."""

import math

import numpy as np
import pytest

from privehr.models.audit.one_run import audit_scores, epsilon_ceiling, epsilon_lower_bound, p_value


def test_p_value_vector():
    assert p_value(100, 100, 75, math.log(3), 0.0) == pytest.approx(0.5535, abs=1e-3)


@pytest.mark.parametrize("m, r, v, delta, expected", [
    (100, 100, 75, 0.0, 0.7022),
    (100, 100, 75, 1e-4, 0.6995),
    (1000, 100, 75, 1e-4, 0.6730),
    (100_000, 1510, 1439, 1e-5, 2.676),   # paper section 7, Fig. 11: ">= 2.675"
    (10_000, 10_000, 9820, 1e-5, 3.871),  # paper section 7, Fig. 10: "3.87"
])
def test_epsilon_lower_bound_vectors(m, r, v, delta, expected):
    assert epsilon_lower_bound(m, r, v, delta) == pytest.approx(expected, abs=1e-3)


def test_closed_form_for_a_perfect_guesser_without_delta():
    r, p = 50, 0.05
    assert epsilon_ceiling(50, r, 0.0, p) == pytest.approx(-math.log(p ** (-1 / r) - 1), abs=1e-6)


@pytest.mark.parametrize("r, expected", [(100, 3.5), (1000, 5.8)])
def test_ceilings_of_clinical_size_canary_sets(r, expected):
    assert epsilon_ceiling(1000, r, 1e-5) == pytest.approx(expected, abs=0.1)


def test_random_scores_certify_nothing_and_perfect_scores_reach_the_ceiling():
    rng = np.random.default_rng(0)
    included = rng.random(1000) < 0.5
    null = audit_scores(rng.normal(size=1000), included, delta=1e-5)
    assert null.epsilon_lower < 0.3
    perfect = audit_scores(included + rng.normal(scale=1e-3, size=1000), included, delta=1e-5)
    assert perfect.correct == perfect.guesses and perfect.epsilon_lower == pytest.approx(perfect.epsilon_ceiling)


def test_choosing_thresholds_after_looking_costs_significance():
    rng = np.random.default_rng(1)
    included = rng.random(500) < 0.5
    scores = included * 0.8 + rng.normal(size=500)
    single = audit_scores(scores, included, 1e-5, k_grid=[(50, 50)])
    grid = audit_scores(scores, included, 1e-5, k_grid=[(k, k) for k in (25, 50, 100)])
    assert grid.thresholds_tried == 3
    # the (50, 50) pair alone, tested at a third of the significance, certifies less than untested
    assert epsilon_lower_bound(500, 100, single.correct, 1e-5, 0.05 / 3) <= single.epsilon_lower
    assert grid.epsilon_ceiling <= epsilon_ceiling(500, grid.guesses, 1e-5, 0.05)
