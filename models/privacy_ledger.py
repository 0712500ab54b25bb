"""The privacy ledger: what every release from a dataset has cost, composed.

Each release (a model, a synthetic dataset, a density) is one entry with its mechanism. For a
dataset, the entries compose:

* DP-SGD entries (Poisson-subsampled Gaussian, parameters sigma, q, T) compose *exactly* as one
  heterogeneous history in the PRV accountant (claimed) and the RDP accountant (upper bound);
* every other entry with an (epsilon, delta) guarantee composes by basic composition:
  epsilon = sum epsilon_i, delta = sum delta_i (Dwork and Roth, Theorem 3.16);
* the grand total adds the two parts by basic composition; the PRV-composed DP-SGD part spends
  delta of the ledger's query, so the total delta is that plus the other entries' deltas;
* ExpM+NF entries carry a training parameter epsilon~ but no proven guarantee: they are listed
  and counted, never added to a guarantee;
* non-private releases have epsilon = infinity: while one exists, the dataset has no guarantee
  at all; the DP-only total is still shown.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

from opacus.accountants import RDPAccountant

from models.privacy_accounting import RDP_ORDERS, prv_epsilon

__all__ = ["LedgerEntry", "LedgerTotal", "compose_entries", "MECHANISMS"]

MECHANISMS = ("dp_sgd", "non_private", "expm_nf", "dp")  # dp: any other (epsilon, delta)-DP release


@dataclass(frozen=True)
class LedgerEntry:
    dataset: str                # the dataset's identity (sha256 of the raw input)
    release: str                # what was released (a model file, a synthetic table)
    mechanism: str
    epsilon: float              # inf for non-private; epsilon~ (a training parameter) for ExpM+NF
    delta: float = 0.0
    noise_multiplier: float | None = None
    sample_rate: float | None = None
    steps: int | None = None
    run_id: str = ""

    def __post_init__(self):
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"unknown mechanism {self.mechanism!r}; choose one of {MECHANISMS}")
        if self.mechanism == "dp_sgd" and None in (self.noise_multiplier, self.sample_rate, self.steps):
            raise ValueError("a dp_sgd entry needs noise_multiplier, sample_rate and steps")


@dataclass
class LedgerTotal:
    dataset: str
    releases: int
    delta: float
    epsilon: float                      # the guarantee of everything released (inf if a non-private release)
    epsilon_dp: float                   # the guarantee of the DP releases alone
    epsilon_dp_sgd_prv: float | None
    epsilon_dp_sgd_rdp: float | None
    epsilon_other_basic: float
    delta_other: float
    counts: dict = field(default_factory=dict)
    unproven_epsilon_tilde: list = field(default_factory=list)


def _compose_dp_sgd(entries: list[LedgerEntry], delta: float) -> tuple[float | None, float | None]:
    if not entries:
        return 0.0, 0.0
    steps: dict[tuple[float, float], int] = {}
    for e in entries:  # T1 steps then T2 steps of one mechanism are T1 + T2 steps of it
        steps[(e.noise_multiplier, e.sample_rate)] = steps.get((e.noise_multiplier, e.sample_rate), 0) + e.steps
    history = [(sigma, q, t) for (sigma, q), t in steps.items()]
    rdp = RDPAccountant()
    rdp.history = list(history)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        eps_rdp, order = rdp.get_privacy_spent(delta=delta)
        if order >= max(RDPAccountant.DEFAULT_ALPHAS):  # the optimum lies beyond Opacus's orders (small epsilon)
            eps_rdp = min(eps_rdp, rdp.get_epsilon(delta, alphas=RDP_ORDERS))
    eps_rdp = float(eps_rdp)
    return prv_epsilon(history, delta, 0.01, eps_rdp), eps_rdp


def compose_entries(entries: list[LedgerEntry], delta: float = 1e-5) -> LedgerTotal:
    """Compose the entries of one dataset; ``delta`` is what the DP-SGD part may spend."""
    datasets = {e.dataset for e in entries}
    if len(datasets) > 1:
        raise ValueError("compose one dataset at a time")
    by = {m: [e for e in entries if e.mechanism == m] for m in MECHANISMS}
    eps_prv, eps_rdp = _compose_dp_sgd(by["dp_sgd"], delta)
    dp_sgd_part = eps_prv if eps_prv is not None else eps_rdp
    eps_other = sum(e.epsilon for e in by["dp"])
    delta_other = sum(e.delta for e in by["dp"])
    epsilon_dp = dp_sgd_part + eps_other
    return LedgerTotal(
        dataset=next(iter(datasets), ""), releases=len(entries),
        delta=(delta if by["dp_sgd"] else 0.0) + delta_other,
        epsilon=math.inf if by["non_private"] else epsilon_dp, epsilon_dp=epsilon_dp,
        epsilon_dp_sgd_prv=eps_prv if by["dp_sgd"] else None, epsilon_dp_sgd_rdp=eps_rdp if by["dp_sgd"] else None,
        epsilon_other_basic=eps_other, delta_other=delta_other,
        counts={m: len(v) for m, v in by.items() if v},
        unproven_epsilon_tilde=[e.epsilon for e in by["expm_nf"]])
