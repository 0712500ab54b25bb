"""Budget kinds of a synthesis release and their registry: ``mu`` (mu-GDP, as Su et al. 2023 state their
budgets), ``epsilon`` (an (epsilon, delta) target, sigma calibrated by PRV and RDP) and ``non_private``
(no noise, no plan). A kind says how a flow release of T steps at sampling rate q is planned; the synthesis
tasks look it up by the config's ``Budget.kind`` (the names are declared there, in the bottom layer, with
which kinds take a value; ``tests/models/test_budget_kinds.py`` fails when the two disagree).

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.

>>> budget_kind("non_private").plan(100, 0.1, 10, None, delta=1e-5) is None
True
>>> budget_kind("mu").plan(100, 0.1, 10, 2.0, delta=1e-5).target_mu
2.0
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, get_args

from privehr.core.config import Budget
from privehr.core.registry import Registry
from privehr.models.privacy.release_plan import ReleasePlan

__all__ = ["BudgetKind", "BUDGET_KINDS", "register_budget_kind", "budget_kind"]

BUDGET_KINDS: Registry["BudgetKind"] = Registry("budget kind",
                                                declared=get_args(Budget.model_fields["kind"].annotation))
register_budget_kind = BUDGET_KINDS.register
budget_kind = BUDGET_KINDS.create


class BudgetKind(ABC):
    name: ClassVar[str]
    #: whether a release under this kind is a DP release (planned, noised, accounted)
    private: ClassVar[bool] = True

    @abstractmethod
    def plan(self, n: int, rate: float, steps: int, value: float | None, *, delta: float,
             max_grad_norm: float = 1.0) -> ReleasePlan | None:
        """The plan of T = ``steps`` Poisson steps at ``rate`` on ``n`` records (None: no DP release)."""


@register_budget_kind
class MuBudget(BudgetKind):
    name = "mu"

    def plan(self, n, rate, steps, value, *, delta, max_grad_norm=1.0):
        return ReleasePlan.for_mu(n, rate, steps, mu=value, delta=delta, max_grad_norm=max_grad_norm)


@register_budget_kind
class EpsilonBudget(BudgetKind):
    name = "epsilon"

    def plan(self, n, rate, steps, value, *, delta, max_grad_norm=1.0):
        return ReleasePlan.for_epsilon(n, rate, steps, target_epsilon=value, delta=delta, max_grad_norm=max_grad_norm)


@register_budget_kind
class NoBudget(BudgetKind):
    """The non-private column (Su et al. 2023's mu = infinity): trained without noise, entered as not DP."""

    name = "non_private"
    private = False

    def plan(self, n, rate, steps, value, *, delta, max_grad_norm=1.0):
        return None
