"""Accounting per patient: a patient's spend composes the releases that used them, and a budget is per patient.

A run records which patients its releases could touch: a *membership snapshot*, the sorted keyed hashes of its
subjects (64-bit truncations of HMAC-SHA256 under the ledger's key, so the ids are never stored), whose id is the
HMAC of its bytes (content-addressed: two runs on the same patients share one snapshot, and an edited snapshot no
longer matches the id its releases cite). Every release of the run cites it (``LedgerEntry.members``). A patient's
spend is the composition of the releases citing a snapshot that holds them, plus every release that cites none (an
older entry, an audit, inference: charged to every patient of the source, past and future, so never understated).

The binding composition is a **Renyi filter per patient** (Feldman and Zrnic, "Individual Privacy Accounting via a
Renyi Filter", NeurIPS 2021): releases are chosen adaptively (tomorrow's grid depends on today's results), and a
patient's RDP, summed order by order over the releases that used them, stays a valid bound when the mechanisms, their
parameters and who takes part are chosen adaptively, as long as a patient whose next release would exceed the
budget is left out of it. Dropping such a patient is what the filter prescribes, not a loophole, provided the decision
rests on their own past spend and on public plans (``tasks/patient_budget.py`` plans on the released noisy counts,
never on the exact number of patients, which one patient's presence would move). The (epsilon, delta) conversion takes the minimum over orders as
:func:`privehr.models.privacy.accounting.rdp_epsilon` does (Lecuyer 2021 for a filter over several orders), so a
patient in every release of a source has exactly the source's filter total (tested to 1e-9).

What it does not cover: the unit is the subject the source names (two stays of one subject are one patient; one
person under two subject ids is two); a snapshot is the run's whole cohort (every split), so a test-set patient is
charged the training releases too (an overstatement, never an understatement); PRV and PLD are reported for the most
spent patient alone, beside the filter, never used to admit a release.

Everything here is vectorised over patients: a membership matrix (patients x snapshots, sparse) times the snapshots'
RDP curves (snapshots x orders), then one conversion per patient.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

import numpy as np
from scipy import sparse

from privehr.models.privacy.accounting import DEFAULT_ALPHAS, RDP_ORDERS, _rdp_step_computed, _rdp_step_stored
from privehr.models.privacy.ledger import (GAUSSIAN_MECHANISMS, BudgetVerdict, LedgerEntry, _canonical, compose_entries,
                                           effective_entries)

__all__ = ["member_hashes", "snapshot_id", "PatientSpend", "patient_spend", "snapshot_bytes", "snapshot_from_bytes",
           "PatientVerdict", "check_patient_budget", "entries_of", "PatientCurves", "patient_curves"]

_MEMBER = b"privehr-member-v1\n"
_SNAPSHOT = b"privehr-members-v1\n"
_DEFAULT = len(DEFAULT_ALPHAS)  # RDP_ORDERS starts with Opacus's default orders


def member_hashes(subject_ids: Iterable, key: bytes) -> np.ndarray:
    """The sorted distinct keyed hashes (uint64) of ``subject_ids`` (10005, 10005.0 and "10005" alike).

    >>> key = bytes(32)
    >>> list(member_hashes([3, "3.0", 1], key)) == list(member_hashes([1, 3], key))
    True
    """
    digests = {int.from_bytes(hmac.new(key, _MEMBER + _canonical(s).encode(), hashlib.sha256).digest()[:8], "little")
               for s in subject_ids}
    return np.array(sorted(digests), dtype=np.uint64)


def snapshot_bytes(hashes: np.ndarray) -> bytes:
    return np.ascontiguousarray(hashes, dtype="<u8").tobytes()


def snapshot_from_bytes(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, dtype="<u8").astype(np.uint64)


def snapshot_id(hashes: np.ndarray, key: bytes) -> str:
    """The snapshot's id: HMAC-SHA256 of its bytes under the ledger's key (content-addressed; forged only with the
    key)."""
    return hmac.new(key, _SNAPSHOT + snapshot_bytes(hashes), hashlib.sha256).hexdigest()


@dataclass
class PatientSpend:
    """Each patient's Renyi-filter epsilon (``inf`` where a release without a DP guarantee used them)."""

    hashes: np.ndarray    # uint64, sorted
    epsilon: np.ndarray   # float per patient
    delta: float

    def summary(self, budget_epsilon: float | None = None) -> dict:
        """Median, 99th percentile and maximum spend, and how many patients have reached ``budget_epsilon``."""
        eps = self.epsilon
        if not len(eps):
            return {"patients": 0, "median": None, "p99": None, "max": None, "reached_budget": None,
                    "within_1pc_of_budget": None, "budget_epsilon": budget_epsilon, "not_dp": 0}
        finite = np.where(np.isfinite(eps), eps, np.inf)
        reached = None if budget_epsilon is None else int((finite >= budget_epsilon * (1 - 1e-12)).sum())
        # the filter stops a patient just below the budget (the next release would pass it): within 1 % is spent
        near = None if budget_epsilon is None else int((finite >= 0.99 * budget_epsilon).sum())
        number = (lambda v: float(v) if math.isfinite(v) else None)
        return {"patients": int(len(eps)), "median": number(np.median(finite)),
                "p99": number(np.quantile(finite, 0.99, method="higher")), "max": number(finite.max()),
                "reached_budget": reached, "within_1pc_of_budget": near, "budget_epsilon": budget_epsilon,
                "not_dp": int((~np.isfinite(eps)).sum())}

    def over(self, budget_epsilon: float) -> np.ndarray:
        """The hashes of the patients above ``budget_epsilon``."""
        return self.hashes[~(self.epsilon <= budget_epsilon)]


def _convert(rdp: np.ndarray, delta: float) -> np.ndarray:
    """Per row: epsilon from RDP at each of RDP_ORDERS (Opacus's conversion, Balle et al. 2020), the minimum over
    Opacus's default orders, and over all orders where that minimum sits at the largest default order (exactly as
    :func:`~privehr.models.privacy.accounting.rdp_epsilon`)."""
    orders = np.asarray(RDP_ORDERS, dtype=float)
    with np.errstate(invalid="ignore"):
        eps = rdp - (math.log(delta) + np.log(orders)) / (orders - 1) + np.log((orders - 1) / orders)
    eps = np.where(np.isnan(eps), np.inf, eps)
    default = eps[:, :_DEFAULT]
    best = default.min(axis=1)
    at_edge = default.argmin(axis=1) == _DEFAULT - 1
    return np.where(at_edge, np.minimum(best, eps.min(axis=1)), best)


def _rows(counted: list[LedgerEntry], cited: list[str], fresh: bool):
    """Per snapshot (a last row for the entries citing none): the summed RDP curve (k-fold compositions of identical
    mechanisms), the other DP epsilons (basic composition), whether a Gaussian entry and a not-DP entry are there."""
    column = {s: i for i, s in enumerate(cited)}
    orders = tuple(RDP_ORDERS)
    curves = np.zeros((len(cited) + 1, len(orders)))
    other, gaussian, not_dp = np.zeros(len(cited) + 1), np.zeros(len(cited) + 1), np.zeros(len(cited) + 1)
    step = _rdp_step_computed if fresh else _rdp_step_stored
    steps: dict[tuple, int] = {}
    for e in counted:
        row = column[e.members] if e.members else len(cited)
        if e.guarantee != "dp":
            not_dp[row] = 1
        elif e.mechanism in GAUSSIAN_MECHANISMS:
            key = (row, float(e.noise_multiplier), float(e.sample_rate))
            steps[key] = steps.get(key, 0) + int(e.steps)
        else:
            other[row] += e.epsilon
    for (row, sigma, q), t in steps.items():  # one k-fold composition per (snapshot, mechanism)
        curves[row] += step(sigma, q, orders) * t
        gaussian[row] = 1
    return curves, other, gaussian, not_dp


@dataclass
class PatientCurves:
    """Each patient's summed RDP curve over the releases that used them (and what else they took part in): the state
    a spend is converted from, kept so a run's planned releases are added without composing the past again."""

    patients: np.ndarray   # uint64, sorted
    rdp: np.ndarray        # patients x RDP_ORDERS
    other: np.ndarray      # other DP epsilons, basic composition
    gaussian: np.ndarray   # bool: a Gaussian release used them
    not_dp: np.ndarray     # bool: a release without a DP guarantee used them
    delta: float
    fresh: bool = False

    def spend(self) -> PatientSpend:
        eps = np.zeros(len(self.patients))
        if self.gaussian.any():
            eps[self.gaussian] = _convert(self.rdp[self.gaussian], self.delta)
        eps = eps + self.other
        eps[self.not_dp] = np.inf
        return PatientSpend(self.patients, eps, self.delta)

    def plus(self, entries: list[LedgerEntry]) -> PatientSpend:
        """The spend if every patient here also took part in ``entries`` (a run's planned releases)."""
        everyone = [replace(e, members=None) for e in effective_entries(entries)]
        curves, other, gaussian, not_dp = _rows(everyone, [], self.fresh)
        return PatientCurves(self.patients, self.rdp + curves[0], self.other + other[0],
                             self.gaussian | bool(gaussian[0]), self.not_dp | bool(not_dp[0]), self.delta,
                             self.fresh).spend()

    def select(self, keep: np.ndarray) -> "PatientCurves":
        """The patients where ``keep`` (a boolean mask) holds."""
        return PatientCurves(self.patients[keep], self.rdp[keep], self.other[keep], self.gaussian[keep],
                             self.not_dp[keep], self.delta, self.fresh)


def patient_curves(entries: list[LedgerEntry], snapshots: Mapping[str, np.ndarray], delta: float,
                   patients: np.ndarray | None = None, fresh: bool = False) -> PatientCurves:
    """Each patient's curves over one source's ``entries`` (what counts of them: releases and unsettled reservations).

    ``snapshots`` maps every snapshot id the entries cite to its hashes; ``patients`` (sorted uint64) are the
    patients to account, by default everyone in a snapshot. An entry citing no snapshot charges every patient;
    ``fresh`` computes each per-step RDP curve anew (``--verify``) instead of taking the store's."""
    counted = effective_entries(entries)
    cited = sorted({e.members for e in counted if e.members})
    missing = [s for s in cited if s not in snapshots]
    if missing:
        raise KeyError(f"membership snapshot {missing[0][:12]} is cited but not given")
    curves, other, gaussian, not_dp = _rows(counted, cited, fresh)
    if patients is None:
        patients = (np.unique(np.concatenate([snapshots[s] for s in cited])) if cited
                    else np.zeros(0, dtype=np.uint64))
    membership = _membership(patients, [snapshots[s] for s in cited])
    everyone = len(cited)
    return PatientCurves(patients, membership @ curves[:everyone] + curves[everyone],
                         membership @ other[:everyone] + other[everyone],
                         (membership @ gaussian[:everyone] + gaussian[everyone]) > 0,
                         (membership @ not_dp[:everyone] + not_dp[everyone]) > 0, delta, fresh)


def patient_spend(entries: list[LedgerEntry], snapshots: Mapping[str, np.ndarray], delta: float,
                  patients: np.ndarray | None = None, fresh: bool = False) -> PatientSpend:
    """Each patient's spend (:func:`patient_curves`, converted)."""
    return patient_curves(entries, snapshots, delta, patients, fresh).spend()


def _membership(patients: np.ndarray, members: list[np.ndarray]) -> sparse.csr_matrix:
    """patients x snapshots: 1 where the snapshot holds the patient."""
    rows, cols = [], []
    for j, hashes in enumerate(members):
        at = np.searchsorted(patients, hashes)
        inside = at < len(patients)
        inside[inside] = patients[at[inside]] == hashes[inside]
        rows.append(at[inside])
        cols.append(np.full(int(inside.sum()), j))
    if not rows:
        return sparse.csr_matrix((len(patients), 0))
    r, c = np.concatenate(rows), np.concatenate(cols)
    return sparse.csr_matrix((np.ones(len(r)), (r, c)), shape=(len(patients), len(members)))


@dataclass(frozen=True)
class PatientVerdict(BudgetVerdict):
    """A per-patient budget check: ``before`` and ``after`` are the most spent patient's filter totals."""

    patients: int = 0           # the run's patients
    over: int = 0               # how many of them the planned releases would take above the budget


def entries_of(entries: list[LedgerEntry], snapshots: Mapping[str, np.ndarray], patient: int) -> list[LedgerEntry]:
    """The entries that used ``patient`` (a hash): those citing a snapshot that holds them, and those citing none."""
    def holds(members: str) -> bool:
        hashes = snapshots[members]
        at = int(np.searchsorted(hashes, np.uint64(patient)))
        return at < len(hashes) and int(hashes[at]) == int(patient)
    return [e for e in entries if not e.members or holds(e.members)]


def check_patient_budget(existing: list[LedgerEntry], planned: list[LedgerEntry], snapshots: Mapping[str, np.ndarray],
                         patients: np.ndarray, budget_epsilon: float | None, delta: float) -> PatientVerdict:
    """Compose, per patient of ``patients`` (the run's snapshot, which ``planned`` cites), the releases that used them
    and the planned ones by the Renyi filter; refuse when a budget is set and any of them would pass it (the caller
    leaves such patients out before it plans: :func:`patient_spend`'s ``over``)."""
    after = patient_spend(existing + planned, snapshots, delta, patients=patients)
    worst = int(patients[int(np.argmax(after.epsilon))]) if len(patients) else None
    mine = [] if worst is None else entries_of(existing, snapshots, worst)
    ours = [] if worst is None else entries_of(planned, snapshots, worst)
    before_total = compose_entries(mine, delta, filter_only=True)
    after_total = compose_entries(mine + ours, delta, filter_only=True)
    common = dict(before=before_total, after=after_total, budget_epsilon=budget_epsilon, patients=len(patients))
    if budget_epsilon is None:
        return PatientVerdict(**common, refused=False, reason="no budget set")
    over = int((~(after.epsilon <= budget_epsilon)).sum())
    if not after_total.dp:
        return PatientVerdict(**common, refused=True, over=over, reason=(
            f"releases without a DP guarantee have no finite epsilon to fit a budget ({after_total.why_not_dp})"))
    if over:
        return PatientVerdict(**common, refused=True, over=over, reason=(
            f"{over} of its {len(patients)} patient(s) would pass it: the most spent patient's epsilon by the Renyi "
            f"filter (what a budget binds on) would rise from {before_total.epsilon_dp_rdp:.4g} to "
            f"{after_total.epsilon_dp_rdp:.4g} (delta {after_total.delta:.2g}), above the budget {budget_epsilon:g}"))
    return PatientVerdict(**common, refused=False, reason="within every patient's budget")
