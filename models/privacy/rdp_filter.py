"""The per-patient budget: a Renyi filter at one order fixed in advance, and the budget setting that fixes it.

The theorem the budget rests on (Feldman and Zrnic, "Individual Privacy Accounting via a Renyi Filter", NeurIPS 2021,
arXiv 2008.11193; Theorem 3.1, with the individual filter of Section 4, numbered as in arXiv v4): fix an order
alpha > 1 and a budget B **before** the first release. Let each release t be chosen, with its parameters, as a
function of the releases before it, and let rho_t(x) bound its Renyi divergence of order alpha for patient x
(add/remove neighbours). If every patient x is left out of every release that would take sum_t rho_t(x) above B,
then the whole adaptive sequence is (alpha, B)-RDP for every patient. Converted once (Balle et al. 2020, "Hypothesis
Testing Interpretations and Renyi Differential Privacy", AISTATS, Theorem 21, the conversion Opacus uses):

    epsilon = B + log((alpha - 1) / alpha) - (log(delta) + log(alpha)) / (alpha - 1)

so a budget of epsilon at delta is the RDP budget B of that equation at the setting's order. The minimum over orders
of the same conversion, which a fixed sequence of releases may take, is **not** a filter: for releases chosen
adaptively no theorem covers it (taken over 159 orders it admitted patients at 1.944 under a budget of 2 whose union
bound is 2.64), so a budget binds at its one order, and views without a budget show the minimum labelled as what it is.

Each kind of DP release enters at its Renyi divergence of order alpha:

* Poisson-subsampled Gaussian steps (DP-SGD, DP-NF, Gaussian statistics): Opacus's RDP of the sampled Gaussian
  mechanism (Mironov, Talwar and Zhang 2019), T times one step;
* a pure epsilon-DP release (the noisy counts): min(epsilon, alpha epsilon^2 / 2) (epsilon-DP is (alpha, epsilon)-RDP,
  and (epsilon^2 / 2)-zCDP: Bun and Steinke 2016, Proposition 1.4);
* an approximate-DP release: privehr's only ones are the marginal synthesizers (AIM, MST, aim_dyadic), rho-zCDP with
  rho = ``cdp_rho(epsilon, delta)``, so rho alpha (``models/synthesis/marginal_synthesizers.py`` calibrates them so,
  and a test holds it to that).

What the budget setting is: a line of the ledger (chained like every other), written by ``privehr privacy budget
--set`` or by the first run that asks for a budget where the ledger has none. Its order and delta are fixed with it.
A raise is a recorded act (``--raise --reason``): the filter's theorem needs B fixed in advance, so after a raise the
guarantee that holds is the filter's at the largest budget ever set, and only if that is the most the project would
ever have allowed (a raise decided on what the releases showed is an adaptive choice no theorem covers).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np

from privehr.models.privacy.accounting import DEFAULT_ALPHAS, RDP_ORDERS
from privehr.models.privacy.zcdp import cdp_rho

__all__ = ["BudgetSetting", "filter_order", "epsilon_at", "rdp_budget", "pure_dp_rdp", "zcdp_rdp", "BUDGET_KIND"]

BUDGET_KIND = "budget"  # a budget line's "kind" (a release line has none)
_DEFAULT = len(DEFAULT_ALPHAS)  # RDP_ORDERS starts with Opacus's default orders


def filter_order(epsilon: float, delta: float) -> float:
    """The order a budget of ``epsilon`` at ``delta`` is fixed at, from those two public numbers alone: the order
    (among the accountant's, Opacus's defaults and the large ones) under which the most Gaussian zCDP rho fits the
    budget (rho alpha is a Gaussian mechanism's RDP; DP-SGD's curves are of that shape where a budget binds). Where
    the releases are sampled Gaussians with sigma below 1, whose curves turn up steeply at high orders, a steward
    chooses a lower order (``privehr privacy budget --set E --order A``).

    >>> filter_order(2.0, 1e-5), filter_order(1.0, 1e-5), filter_order(8.0, 1e-5), filter_order(0.1, 1e-5)
    (10.2, 18, 3.9, 128.0)
    """
    orders = np.asarray(RDP_ORDERS, dtype=float)
    rho = (epsilon + (math.log(delta) + np.log(orders)) / (orders - 1) - np.log((orders - 1) / orders)) / orders
    return RDP_ORDERS[int(np.argmax(rho))]


def epsilon_at(rdp, orders, delta: float) -> np.ndarray:
    """Per row of ``rdp`` (rows x orders): epsilon at ``delta`` (Balle et al. 2020, Theorem 21). One order: that
    order's epsilon, a filter's. Several: their minimum (Opacus's default orders, and the large ones where that minimum
    sits at the largest default), which is valid for a sequence of releases fixed in advance only."""
    rdp = np.atleast_2d(np.asarray(rdp, dtype=float))
    orders = np.asarray(orders, dtype=float)
    with np.errstate(invalid="ignore"):
        eps = rdp - (math.log(delta) + np.log(orders)) / (orders - 1) + np.log((orders - 1) / orders)
    eps = np.where(np.isnan(eps), np.inf, eps)
    if len(orders) == 1:
        return eps[:, 0]
    default = eps[:, :_DEFAULT]
    best = default.min(axis=1)
    at_edge = default.argmin(axis=1) == _DEFAULT - 1
    return np.where(at_edge, np.minimum(best, eps.min(axis=1)), best)


def rdp_budget(epsilon: float, delta: float, order: float) -> float:
    """B: the Renyi divergence of order ``order`` a budget of ``epsilon`` at ``delta`` allows.

    >>> b = rdp_budget(2.0, 1e-5, 10.2)
    >>> round(b, 4), float(epsilon_at([[b]], [10.2], 1e-5)[0]) == 2.0
    (1.1042, True)
    """
    return epsilon + (math.log(delta) + math.log(order)) / (order - 1) - math.log((order - 1) / order)


def pure_dp_rdp(epsilon: float, orders) -> np.ndarray:
    """An epsilon-DP release's Renyi divergence at ``orders``: min(epsilon, alpha epsilon^2 / 2)."""
    orders = np.asarray(orders, dtype=float)
    return np.minimum(epsilon, orders * epsilon ** 2 / 2)


def zcdp_rdp(epsilon: float, delta: float, orders) -> np.ndarray:
    """A marginal synthesizer's release at (epsilon, delta): rho-zCDP with rho = cdp_rho(epsilon, delta), so rho alpha."""
    return cdp_rho(epsilon, delta) * np.asarray(orders, dtype=float)


@dataclass(frozen=True)
class BudgetSetting:
    """The project's per-patient budget, as a ledger line: epsilon at delta, bound by the Renyi filter at ``order``."""

    epsilon: float
    delta: float
    order: float
    previous: float | None = None   # the budget before this setting (None: the first)
    raised: bool = False            # above ``previous``: an explicit act, with its reason
    reason: str = ""
    set_by: str = ""                # "steward" (privehr privacy budget --set) or the run that first asked for it
    created_utc: str = ""
    kind: str = BUDGET_KIND

    def __post_init__(self):
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ValueError("a budget's epsilon is a positive number")
        if not 0 < self.delta < 1:
            raise ValueError("a budget's delta is between 0 and 1")
        if not (self.order > 1 and math.isfinite(self.order)):
            raise ValueError("a Renyi filter's order is above 1")
        if not rdp_budget(self.epsilon, self.delta, self.order) > 0:
            raise ValueError(f"epsilon {self.epsilon:g} at delta {self.delta:g} leaves no Renyi divergence to spend "
                             f"at order {self.order:g} (the conversion alone costs more): choose a larger budget, or "
                             "another order")
        if self.kind != BUDGET_KIND:
            raise ValueError(f"not a budget line (kind {self.kind!r})")

    @property
    def orders(self) -> tuple[float]:
        return (float(self.order),)

    @classmethod
    def from_dict(cls, raw: dict) -> "BudgetSetting":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})

    def as_dict(self) -> dict:
        return asdict(self)


