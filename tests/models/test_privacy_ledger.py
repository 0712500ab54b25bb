import math

import pytest
from opacus.accountants import PRVAccountant

from models.privacy_accounting import epsilon_spent
from models.privacy_ledger import LedgerEntry, compose_entries


def _sgd(sigma, q, steps, release):
    spend = epsilon_spent(sigma, q, steps, 1e-5)
    return LedgerEntry("d1", release, "dp_sgd", spend.epsilon, 1e-5, sigma, q, steps)


def test_two_dp_sgd_releases_compose_like_one_longer_run():
    a, b = _sgd(1.2, 0.05, 300, "m1"), _sgd(1.2, 0.05, 500, "m2")
    total = compose_entries([a, b], delta=1e-5)
    by_hand = PRVAccountant()
    by_hand.history = [(1.2, 0.05, 800)]  # the same mechanism for 300 + 500 steps
    assert total.epsilon_dp_sgd_prv == pytest.approx(by_hand.get_epsilon(1e-5, eps_error=0.01), rel=0.02)
    assert total.epsilon_dp_sgd_prv < a.epsilon + b.epsilon  # tighter than basic composition
    assert total.epsilon_dp_sgd_rdp >= total.epsilon_dp_sgd_prv
    assert total.epsilon == total.epsilon_dp == total.epsilon_dp_sgd_prv and total.delta == 1e-5


def test_other_mechanisms_basic_composition_unproven_and_non_private():
    entries = [_sgd(2.0, 0.1, 100, "m1"),
               LedgerEntry("d1", "synthetic-1", "dp", 0.5, 1e-6),
               LedgerEntry("d1", "synthetic-2", "dp", 0.25, 2e-6),
               LedgerEntry("d1", "expm-1", "expm_nf", 1.0)]
    total = compose_entries(entries)
    assert total.epsilon_other_basic == pytest.approx(0.75) and total.delta_other == pytest.approx(3e-6)
    assert total.epsilon == pytest.approx(total.epsilon_dp_sgd_prv + 0.75)
    assert total.delta == pytest.approx(1e-5 + 3e-6)
    assert total.unproven_epsilon_tilde == [1.0]  # listed, never part of a guarantee
    with_baseline = compose_entries(entries + [LedgerEntry("d1", "baseline", "non_private", math.inf)])
    assert math.isinf(with_baseline.epsilon) and with_baseline.epsilon_dp == pytest.approx(total.epsilon_dp)


def test_entries_are_validated():
    with pytest.raises(ValueError, match="needs noise_multiplier"):
        LedgerEntry("d1", "m", "dp_sgd", 1.0)
    with pytest.raises(ValueError, match="one dataset"):
        compose_entries([LedgerEntry("d1", "a", "dp", 1.0), LedgerEntry("d2", "b", "dp", 1.0)])
