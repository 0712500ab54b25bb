"""What the ledger shows: each source's total, each patient's spend, and a verification that recomposes them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from privehr.core.errors import InputError
from privehr.io.ledger.chain import LedgerTampered, LedgerUnreadable
from privehr.io.ledger.file import Ledger
from privehr.models.privacy.ledger import GAUSSIAN_MECHANISMS, LedgerEntry, LedgerTotal, compose_entries, \
    effective_entries
from privehr.models.privacy.patient_accounting import entries_of, patient_spend

__all__ = ["ledger_totals", "source_patients", "verify_ledger", "dataset_delta", "VIEW_MAX_DISTINCT", "short_dataset",
           "source_entries", "LEGACY_PREFIX"]


def short_dataset(dataset: str) -> str:
    """A dataset id short enough for a message: "subjects-hmac:" ids keep 12 hex digits, a source's path stays whole.

    >>> short_dataset("subjects-hmac:" + "a" * 64), short_dataset("path:/data/x.h5")
    ('subjects-hmac:aaaaaaaaaaaa', 'path:/data/x.h5')
    """
    kind, _, digest = dataset.partition(":")
    if kind == "path":
        return dataset
    return f"{kind}:{digest[:12]}" if digest else dataset[:40]


def dataset_delta(entries: list[LedgerEntry]) -> float | None:
    """The delta a dataset's DP-SGD releases are composed at: the delta they were all made at (None if none)."""
    deltas = {e.delta for e in entries if e.mechanism in GAUSSIAN_MECHANISMS and e.status != "void"}
    return min(deltas) if deltas else None


VIEW_MAX_DISTINCT = 64  # a view composes PRV and PLD over at most this many distinct mechanisms not yet stored


def ledger_totals(path: str | Path, delta: float | None = None, budget_epsilon: float | None = None,
                  fresh: bool = False, max_distinct: int | None = None) -> list[LedgerTotal]:
    """Every dataset's total, composed at ``delta`` or, by default, at the delta of its own releases, as if every
    release had used every patient; where releases cite membership snapshots, ``patients`` adds the spend per patient
    (median, 99th percentile, maximum, how many reached ``budget_epsilon``; the most spent patient by PRV and PLD).
    ``max_distinct``: PRV and PLD only where at most that many distinct mechanisms (or already stored)."""
    ledger = Ledger(path)
    entries = ledger.read()
    totals = []
    for d in sorted({e.dataset for e in entries}):
        mine = [e for e in entries if e.dataset == d]
        at = delta if delta is not None else dataset_delta(mine) or 1e-5
        total = compose_entries(mine, at, fresh=fresh, max_distinct=max_distinct)
        total.patients = source_patients(ledger, mine, at, budget_epsilon, fresh=fresh, max_distinct=max_distinct)
        totals.append(total)
    return totals


def source_patients(ledger: Ledger, entries: list[LedgerEntry], delta: float, budget_epsilon: float | None = None,
                    fresh: bool = False, accountants: bool = True, max_distinct: int | None = None) -> dict | None:
    """One source's spend per patient (None where no release cites a snapshot); ``accountants``: the most spent
    patient by PRV and PLD too."""
    if not {e.members for e in effective_entries(entries) if e.members}:
        return None
    entries = effective_entries(entries)  # a voided reservation's snapshot is neither needed nor loaded
    cited = {e.members for e in entries if e.members}
    snapshots = ledger.members(cited)
    spend = patient_spend(entries, snapshots, delta, fresh=fresh)
    summary = spend.summary(budget_epsilon)
    if accountants and len(spend.hashes):  # the most spent patient by every accountant (PRV and PLD beside the filter)
        worst = compose_entries(entries_of(entries, snapshots, int(spend.hashes[int(np.argmax(spend.epsilon))])),
                                delta, fresh=fresh, max_distinct=max_distinct)
        summary |= {"most_spent": {"epsilon_rdp_filter": worst.epsilon_dp_rdp, "epsilon_prv": worst.epsilon_dp_prv,
                                   "epsilon_pld": worst.epsilon_dp_pld, "dp": worst.dp}}
    summary["snapshots"] = len(cited)
    return summary


LEGACY_PREFIX = "subjects-hmac:"  # the default dataset ids of ledgers written before sources (a keyed subject-set hash)


def source_entries(entries: list[LedgerEntry], dataset: str) -> list[LedgerEntry]:
    """What a source's budget composes: its own entries, and every entry under an older default id (a keyed hash of a
    delivery's subject set, which no source can be matched to any more) charged to every patient of every source:
    an overstatement where they were another source's, never a budget reset by the upgrade."""
    return [e if e.dataset == dataset else LedgerEntry(**{**e.as_dict(), "dataset": dataset, "members": None})
            for e in entries if e.dataset == dataset or (e.dataset.startswith(LEGACY_PREFIX)
                                                          and not dataset.startswith(LEGACY_PREFIX))]



def verify_ledger(path: str | Path) -> dict:
    """Check a ledger alone: {"ledger", "ok", "lines", "unchained", "line", "problem"} (never raises on tampering)."""
    report = {"ledger": str(path), "ok": True, "lines": 0, "unchained": 0, "line": None, "problem": None}
    try:
        state = Ledger(path).state()
    except (LedgerTampered, LedgerUnreadable) as err:
        return report | {"ok": False, "line": err.line, "problem": err.why}
    except InputError as err:
        return report | {"ok": False, "problem": str(err)}
    report |= {"lines": state.lines, "unchained": state.unchained, "head_lag": state.head_lag}
    for dataset in sorted({e.dataset for e in state.entries}):  # the totals every view shows, against a recomposition
        mine = [e for e in state.entries if e.dataset == dataset]
        at = dataset_delta(mine) or 1e-5
        shown, fresh = compose_entries(mine, at), compose_entries(mine, at, fresh=True)
        if not math.isclose(shown.epsilon_dp, fresh.epsilon_dp, rel_tol=1e-9, abs_tol=1e-9):
            return report | {"ok": False, "problem": f"dataset {short_dataset(dataset)}'s cached total "
                                                     f"{shown.epsilon_dp:.6g} differs from its recomposition "
                                                     f"{fresh.epsilon_dp:.6g}: the accounting cache is damaged; "
                                                     "delete it (privehr/io/accounting_cache.py says where)"}
        cited = {e.members for e in effective_entries(mine) if e.members}
        if cited:  # every patient's filter total, from the store's curves and recomputed
            ledger = Ledger(path)
            try:
                snapshots = ledger.members(cited)
            except LedgerTampered as err:
                return report | {"ok": False, "line": err.line, "problem": err.why}
            kept, again = patient_spend(mine, snapshots, at), patient_spend(mine, snapshots, at, fresh=True)
            if not np.allclose(kept.epsilon, again.epsilon, rtol=1e-9, atol=1e-9):
                return report | {"ok": False, "problem": f"dataset {short_dataset(dataset)}'s per-patient totals "
                                                         "differ from their recomposition: the accounting cache is "
                                                         "damaged; delete it (privehr/io/accounting_cache.py says "
                                                         "where)"}
            report["patients"] = report.get("patients", 0) + len(kept.hashes)
    return report


