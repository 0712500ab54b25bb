"""Accounting per patient: a patient's spend composes every release that used them, whatever source it names.

A run records which patients its releases could touch: a *membership snapshot*, the sorted keyed hashes of its
subjects (64-bit truncations of HMAC-SHA256 under the ledger's key, so the ids are never stored), whose id is the
HMAC of its bytes (content-addressed: two runs on the same patients share one snapshot, and an edited snapshot no
longer matches the id its releases cite). Every release of the run cites it (``LedgerEntry.members``). A patient's
spend is the composition of the releases citing a snapshot that holds them, plus every release that cites none (an
id-less table, an older entry: charged to every patient of the ledger, past and future, so never understated). The
source a release names is a label: the same patients under another source, a copy of the file, another spelling of
its path or a symlink hash to the same patients, and two sources whose id spaces collide are read as the same
patients (an overstatement, never an understatement).

The binding composition is the Renyi filter at the budget's one order (``models/privacy/rdp_filter.py`` states the
theorem and its premises); without a budget, views convert each patient's RDP at the minimum over orders, labelled as
such. Every DP release enters as its Renyi divergence (Gaussian steps, pure epsilon-DP, zCDP), so the composition is
one sum per order; a release without a DP guarantee makes its patients' total infinite.

What it does not cover: the unit is the subject the source names (the cohort keeps one stay per subject; one
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

from privehr.models.privacy.accounting import RDP_ORDERS, _rdp_step_computed, _rdp_step_stored
from privehr.models.privacy.ledger import GAUSSIAN_MECHANISMS, LedgerEntry, _canonical, effective_entries
from privehr.models.privacy.rdp_filter import BudgetSetting, epsilon_at, pure_dp_rdp, rdp_budget, zcdp_rdp

__all__ = ["member_hashes", "snapshot_id", "PatientSpend", "patient_spend", "snapshot_bytes", "snapshot_from_bytes",
           "PatientVerdict", "check_patient_budget", "entries_of", "PatientCurves", "patient_curves", "entry_rdp",
           "OUTSIDER"]

_MEMBER = b"privehr-member-v1\n"
_SNAPSHOT = b"privehr-members-v1\n"


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
    """Each patient's epsilon (``inf`` where a release without a DP guarantee used them) and the share of the budget's
    RDP they have used (``None`` without a budget)."""

    hashes: np.ndarray    # uint64, sorted
    epsilon: np.ndarray   # float per patient
    delta: float
    used: np.ndarray | None = None  # sum of their Renyi divergences over the budget's B, at its order

    def summary(self, budget_epsilon: float | None = None) -> dict:
        """Median, 99th percentile and maximum spend, and how many patients have reached ``budget_epsilon``."""
        eps = self.epsilon
        if not len(eps):
            return {"patients": 0, "median": None, "p99": None, "max": None, "reached_budget": None,
                    "within_1pc_of_budget": None, "budget_epsilon": budget_epsilon, "not_dp": 0,
                    "max_budget_used": None}
        finite = np.where(np.isfinite(eps), eps, np.inf)
        reached = None if budget_epsilon is None else int((finite >= budget_epsilon * (1 - 1e-12)).sum())
        # the filter stops a patient just below the budget (the next release would pass it): within 1 % is spent
        near = None if budget_epsilon is None else int((finite >= 0.99 * budget_epsilon).sum())
        number = (lambda v: float(v) if math.isfinite(v) else None)
        return {"patients": int(len(eps)), "median": number(np.median(finite)),
                "p99": number(np.quantile(finite, 0.99, method="higher")), "max": number(finite.max()),
                "reached_budget": reached, "within_1pc_of_budget": near, "budget_epsilon": budget_epsilon,
                "not_dp": int((~np.isfinite(eps)).sum()),
                "max_budget_used": None if self.used is None else number(np.max(self.used))}

    def over(self, budget_epsilon: float) -> np.ndarray:
        """The hashes of the patients above ``budget_epsilon``."""
        return self.hashes[~(self.epsilon <= budget_epsilon)]


def entry_rdp(entry: LedgerEntry, orders: tuple[float, ...], fresh: bool = True) -> np.ndarray:
    """One counted DP release's Renyi divergence at ``orders`` (``rdp_filter``'s module docstring says why each is
    what it is); ``fresh``: each per-step curve computed anew, never read from the accounting store."""
    if entry.mechanism in GAUSSIAN_MECHANISMS:
        step = _rdp_step_computed if fresh else _rdp_step_stored
        return step(float(entry.noise_multiplier), float(entry.sample_rate), orders) * int(entry.steps)
    if entry.delta:
        return zcdp_rdp(entry.epsilon, entry.delta, orders)
    return pure_dp_rdp(entry.epsilon, orders)


def _rows(counted: list[LedgerEntry], cited: list[str], orders: tuple[float, ...], fresh: bool):
    """Per snapshot (a last row for the entries citing none): the summed RDP curve (identical Gaussian mechanisms as
    one k-fold composition) and whether a release without a DP guarantee is there."""
    column = {s: i for i, s in enumerate(cited)}
    curves = np.zeros((len(cited) + 1, len(orders)))
    not_dp = np.zeros(len(cited) + 1, dtype=bool)
    steps: dict[tuple, int] = {}
    for e in counted:
        row = column[e.members] if e.members else len(cited)
        if e.guarantee != "dp":
            not_dp[row] = True
        elif e.mechanism in GAUSSIAN_MECHANISMS:
            key = (row, float(e.noise_multiplier), float(e.sample_rate))
            steps[key] = steps.get(key, 0) + int(e.steps)
        else:
            curves[row] += entry_rdp(e, orders)
    step = _rdp_step_computed if fresh else _rdp_step_stored
    for (row, sigma, q), t in steps.items():  # one k-fold composition per (snapshot, mechanism)
        curves[row] += step(sigma, q, orders) * t
    return curves, not_dp


@dataclass
class PatientCurves:
    """Each patient's summed RDP curve over the releases that used them, and whether a release without a guarantee
    did: the state a spend is converted from, kept so a run's planned releases are added without composing the past
    again. ``orders``: the budget's one order (a filter), or RDP_ORDERS (a view without a budget)."""

    patients: np.ndarray   # uint64, sorted
    rdp: np.ndarray        # patients x orders
    not_dp: np.ndarray     # bool
    delta: float
    orders: tuple[float, ...] = tuple(RDP_ORDERS)
    fresh: bool = True
    touched: np.ndarray | None = None  # bool: any release used them (a patient untouched has spent nothing)
    budget: BudgetSetting | None = None

    def spend(self) -> PatientSpend:
        eps = np.zeros(len(self.patients))
        touched = self.touched if self.touched is not None else (self.rdp > 0).any(axis=1)
        if touched.any():
            eps[touched] = epsilon_at(self.rdp[touched], self.orders, self.delta)
        eps[self.not_dp] = np.inf
        used = None
        if self.budget is not None and len(self.orders) == 1:
            used = self.rdp[:, 0] / rdp_budget(self.budget.epsilon, self.budget.delta, self.budget.order)
            used[self.not_dp] = np.inf
        return PatientSpend(self.patients, eps, self.delta, used)

    def plus(self, entries: list[LedgerEntry]) -> PatientSpend:
        """The spend if every patient here also took part in ``entries`` (a run's planned releases)."""
        everyone = [replace(e, members=None) for e in effective_entries(entries)]
        curves, not_dp = _rows(everyone, [], self.orders, self.fresh)
        return replace(self, rdp=self.rdp + curves[0], not_dp=self.not_dp | bool(not_dp[0]),
                       touched=np.ones(len(self.patients), dtype=bool) if everyone else self.touched).spend()

    def select(self, keep: np.ndarray) -> "PatientCurves":
        """The patients where ``keep`` (a boolean mask) holds."""
        return replace(self, patients=self.patients[keep], rdp=self.rdp[keep], not_dp=self.not_dp[keep],
                       touched=None if self.touched is None else self.touched[keep])


OUTSIDER = np.uint64(0)  # the row of a patient in no snapshot, where one is asked for (``outsider``)


def patient_curves(entries: list[LedgerEntry], snapshots: Mapping[str, np.ndarray], delta: float,
                   patients: np.ndarray | None = None, fresh: bool = False, budget: BudgetSetting | None = None,
                   outsider: bool = False) -> PatientCurves:
    """Each patient's curves over the ledger's ``entries`` (what counts of them: releases and unsettled reservations,
    every source).

    ``snapshots`` maps every snapshot id the entries cite to its hashes; ``patients`` (sorted uint64) are the
    patients to account, by default everyone in a snapshot; ``outsider`` adds a last row for a patient in no snapshot
    (whom only the releases citing none used: an id-less table's patients could be anyone). An entry citing no
    snapshot charges every patient. ``budget``: converted at its order (the filter), else at the minimum over orders.
    ``fresh`` computes each per-step RDP curve anew instead of taking the accounting store's (admission and
    ``--verify`` always do)."""
    counted = effective_entries(entries)
    cited = sorted({e.members for e in counted if e.members})
    missing = [s for s in cited if s not in snapshots]
    if missing:
        raise KeyError(f"membership snapshot {missing[0][:12]} is cited but not given")
    orders = budget.orders if budget is not None else tuple(RDP_ORDERS)
    curves, not_dp = _rows(counted, cited, orders, fresh)
    if patients is None:
        patients = (np.unique(np.concatenate([snapshots[s] for s in cited])) if cited
                    else np.zeros(0, dtype=np.uint64))
    membership = _membership(patients, [snapshots[s] for s in cited])
    everyone = len(cited)
    used = {e.members for e in counted}
    touched_by = np.array([s in used for s in cited] + [None in used or "" in used], dtype=float)
    rdp = membership @ curves[:everyone] + curves[everyone]
    flags = (membership @ not_dp[:everyone].astype(float) + not_dp[everyone]) > 0
    touched = (membership @ touched_by[:everyone] + touched_by[everyone]) > 0
    if outsider:
        patients = np.append(patients, OUTSIDER)
        rdp, flags = np.vstack([rdp, curves[everyone]]), np.append(flags, not_dp[everyone])
        touched = np.append(touched, touched_by[everyone] > 0)
    return PatientCurves(patients, rdp, flags, delta, orders, fresh, touched, budget)


def patient_spend(entries: list[LedgerEntry], snapshots: Mapping[str, np.ndarray], delta: float,
                  patients: np.ndarray | None = None, fresh: bool = False,
                  budget: BudgetSetting | None = None) -> PatientSpend:
    """Each patient's spend (:func:`patient_curves`, converted)."""
    return patient_curves(entries, snapshots, delta, patients, fresh, budget).spend()


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


def entries_of(entries: list[LedgerEntry], snapshots: Mapping[str, np.ndarray], patient: int) -> list[LedgerEntry]:
    """The entries that used ``patient`` (a hash): those citing a snapshot that holds them, and those citing none."""
    def holds(members: str) -> bool:
        hashes = snapshots[members]
        at = int(np.searchsorted(hashes, np.uint64(patient)))
        return at < len(hashes) and int(hashes[at]) == int(patient)
    return [e for e in entries if not e.members or holds(e.members)]


@dataclass(frozen=True)
class PatientVerdict:
    """A per-patient budget check: ``before`` and ``after`` are the most spent patient's epsilon (by the filter at the
    budget's order; without a budget, RDP at the minimum over orders); ``inf``: a release without a guarantee."""

    budget: BudgetSetting | None
    delta: float
    patients: int               # the patients checked (the run's snapshot; or everyone, and anyone unknown)
    over: int                   # how many of them the planned releases would take above the budget
    before: float
    after: float
    refused: bool
    reason: str

    @property
    def budget_epsilon(self) -> float | None:
        return None if self.budget is None else self.budget.epsilon


def check_patient_budget(existing: list[LedgerEntry], planned: list[LedgerEntry], snapshots: Mapping[str, np.ndarray],
                         patients: np.ndarray, budget: BudgetSetting | None, delta: float,
                         outsider: bool = False) -> PatientVerdict:
    """Compose, per patient of ``patients`` (and, with ``outsider``, a patient in no snapshot), every release that used
    them, and the planned ones, by the Renyi filter at the budget's order, each curve computed anew (never the
    accounting store's); refuse when a budget is set and any of them would pass it (the caller leaves such patients
    out before it plans: :meth:`PatientSpend.over`)."""
    past = patient_curves(existing, snapshots, delta, patients, fresh=True, budget=budget, outsider=outsider)
    before, after = past.spend(), past.plus(planned)
    worst = (lambda spend: float(spend.epsilon.max()) if len(spend.epsilon) else 0.0)
    common = dict(budget=budget, delta=delta, patients=len(patients), before=worst(before), after=worst(after))
    if budget is None:
        return PatientVerdict(**common, over=0, refused=False, reason="no budget set")
    over = int((~(after.epsilon <= budget.epsilon)).sum())
    if not math.isfinite(common["after"]):
        return PatientVerdict(**common, refused=True, over=over, reason=(
            "releases without a DP guarantee have no finite epsilon to fit a budget"))
    if over:  # how many, and by how much, stay in the verdict (the run directory's privacy_budget.json): a message
        # leaves through logs and Prefect's database, and whether one patient is there moves both numbers
        return PatientVerdict(**common, refused=True, over=over, reason=(
            f"patients of this run would pass it: their epsilon by the Renyi filter at order {budget.order:g} (what a "
            f"budget binds on) would rise above the budget {budget.epsilon:g} (delta {delta:.2g})"))
    return PatientVerdict(**common, refused=False, over=0, reason="within every patient's budget")
