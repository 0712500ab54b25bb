import numpy as np
import pytest

from privehr.models.inference.rubins_rules import pool


def test_pool_matches_hand_computation():
    q, u = [1.0, 2.0, 3.0], [0.5, 0.5, 0.5]
    p = pool(q, u)
    between = 1.0  # var([1, 2, 3], ddof=1)
    total = 0.5 + (1 + 1 / 3) * between
    assert p.estimate == 2.0 and p.within == 0.5 and p.between == between
    assert np.isclose(p.total_variance, total) and np.isclose(p.std_error, np.sqrt(total))
    lam = (4 / 3) / total
    assert np.isclose(p.fraction_missing_information, lam)
    assert np.isclose(p.degrees_of_freedom, 2 / lam**2)


def test_identical_imputations_have_no_between_variance():
    p = pool([2.0, 2.0], [0.1, 0.3])
    assert p.between == 0 and np.isclose(p.total_variance, 0.2) and p.degrees_of_freedom == float("inf")


def test_needs_two_estimates():
    with pytest.raises(ValueError):
        pool([1.0], [0.1])
