"""Budget kinds: the registry matches the config's declaration and plans as the accountants say."""

import math
from typing import get_args

import pytest

from privehr.core.config import Budget
from privehr.models.privacy.budget_kinds import BUDGET_KINDS, budget_kind
from privehr.models.privacy.gdp import gdp_mu


def test_registry_matches_the_config():
    declared = set(get_args(Budget.model_fields["kind"].annotation))
    assert set(BUDGET_KINDS) == declared
    for name, kind in BUDGET_KINDS.items():  # a kind takes a value exactly when it is private
        value = None if not kind.private else 1.0
        assert Budget(kind=name, value=value).kind == name


def test_plans():
    mu = budget_kind("mu").plan(400, 0.05, 300, 1.5, delta=1e-5, max_grad_norm=2.0)
    assert math.isclose(gdp_mu(mu.noise_multiplier, mu.sample_rate, mu.steps), 1.5, rel_tol=1e-9)
    assert (mu.steps, mu.max_grad_norm, mu.target_mu, mu.target_epsilon) == (300, 2.0, 1.5, None)
    eps = budget_kind("epsilon").plan(400, 0.05, 300, 2.0, delta=1e-5)
    assert eps.target_epsilon == 2.0 and eps.epsilon <= 2.0 and eps.spend.epsilon_rdp <= 2.0
    assert budget_kind("non_private").plan(400, 0.05, 300, None, delta=1e-5) is None
    with pytest.raises(ValueError, match="finite positive"):
        budget_kind("mu").plan(400, 0.05, 300, float("inf"), delta=1e-5)
    with pytest.raises(ValueError, match="unknown budget kind"):
        budget_kind("rho")
