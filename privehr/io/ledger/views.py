"""What the ledger shows: each source's total (a label: as if its every release had used its every patient), each
patient's spend across every source, and a verification that recomposes both without the accounting cache."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from privehr.core.errors import InputError
from privehr.io.ledger.budget import ledger_delta
from privehr.io.ledger.chain import LedgerTampered, LedgerUnreadable
from privehr.io.ledger.file import Ledger
from privehr.models.privacy.ledger import LedgerEntry, LedgerTotal, compose_entries, effective_entries
from privehr.models.privacy.patient_accounting import entries_of, patient_spend
from privehr.models.privacy.rdp_filter import BudgetSetting

__all__ = ["ledger_totals", "ledger_patients", "source_patients", "verify_ledger", "VIEW_MAX_DISTINCT", "short_dataset"]


def short_dataset(dataset: str) -> str:
    """A dataset id short enough for a message: "subjects-hmac:" ids keep 12 hex digits, a source's path stays whole.

    >>> short_dataset("subjects-hmac:" + "a" * 64), short_dataset("path:/data/x.h5")
    ('subjects-hmac:aaaaaaaaaaaa', 'path:/data/x.h5')
    """
    kind, _, digest = dataset.partition(":")
    if kind == "path":
        return dataset
    return f"{kind}:{digest[:12]}" if digest else dataset[:40]


VIEW_MAX_DISTINCT = 64  # a view composes PRV and PLD over at most this many distinct mechanisms not yet stored


def ledger_totals(path: str | Path, delta: float | None = None, budget_epsilon: float | None = None,
                  fresh: bool = False, max_distinct: int | None = None) -> list[LedgerTotal]:
    """Every source's total, composed at ``delta`` (by default the ledger's), as if every release of the source had
    used every patient; where its releases cite membership snapshots, ``patients`` adds the spend of its patients,
    each composed over **every** release of the ledger that used them, whatever source it names (median, 99th
    percentile, maximum, how many reached ``budget_epsilon``, by default the ledger's budget; the most spent patient
    by PRV and PLD). ``max_distinct``: PRV and PLD only where at most that many distinct mechanisms (or stored)."""
    ledger = Ledger(path)
    state = ledger.state()
    at = delta if delta is not None else ledger_delta(state.entries, state.budget) or 1e-5
    totals = []
    for d in sorted({e.dataset for e in state.entries}):
        total = compose_entries([e for e in state.entries if e.dataset == d], at, fresh=fresh,
                                max_distinct=max_distinct)
        total.patients = source_patients(ledger, state.entries, d, at, state.budget, budget_epsilon, fresh=fresh,
                                         max_distinct=max_distinct)
        totals.append(total)
    return totals


def ledger_patients(path: str | Path, delta: float | None = None, budget_epsilon: float | None = None,
                    fresh: bool = False, accountants: bool = True, max_distinct: int | None = None) -> dict | None:
    """One total per patient across every source of the ledger (:func:`source_patients` over all of them), with the
    budget it is held to; None where no release cites a snapshot."""
    ledger = Ledger(path)
    state = ledger.state()
    at = delta if delta is not None else ledger_delta(state.entries, state.budget) or 1e-5
    return source_patients(ledger, state.entries, None, at, state.budget, budget_epsilon, fresh=fresh,
                           accountants=accountants, max_distinct=max_distinct)


def source_patients(ledger: Ledger, entries: list[LedgerEntry], source: str | None, delta: float,
                    budget: BudgetSetting | None, budget_epsilon: float | None = None, fresh: bool = False,
                    accountants: bool = True, max_distinct: int | None = None) -> dict | None:
    """The spend of ``source``'s patients (those its releases' snapshots hold; None: every patient of the ledger),
    each composed over every release of the ledger that used them (``entries``: the whole ledger's), by the filter at
    ``budget``'s order (without one, RDP at the minimum over orders); None where no release of the source cites a
    snapshot. ``accountants``: the most spent patient by PRV and PLD too."""
    counted = effective_entries(entries)  # a voided reservation's snapshot is neither needed nor loaded
    mine = {e.members for e in counted if e.members and (source is None or e.dataset == source)}
    if not mine:
        return None
    snapshots = ledger.members({e.members for e in counted if e.members})
    patients = np.unique(np.concatenate([snapshots[s] for s in mine]))
    spend = patient_spend(counted, snapshots, delta, patients=patients, fresh=fresh, budget=budget)
    summary = spend.summary(budget_epsilon if budget_epsilon is not None else budget and budget.epsilon)
    summary |= {"accountant": f"renyi_filter_order_{budget.order:g}" if budget else "rdp_min_over_orders",
                "snapshots": len(mine)}
    if accountants and len(spend.hashes):  # the most spent patient by every accountant (PRV and PLD beside the filter)
        worst = int(spend.hashes[int(np.argmax(spend.epsilon))])
        total = compose_entries(entries_of(counted, snapshots, worst), delta, fresh=fresh, max_distinct=max_distinct)
        summary["most_spent"] = {"epsilon": float(spend.epsilon.max()), "epsilon_prv": total.epsilon_dp_prv,
                                 "epsilon_pld": total.epsilon_dp_pld, "dp": total.dp}
    return summary


def verify_ledger(path: str | Path) -> dict:
    """Check a ledger alone: {"ledger", "ok", "lines", "unchained", "line", "problem"} (never raises on tampering).
    Besides the chain, every source's total and every patient's are recomposed without the accounting cache."""
    report = {"ledger": str(path), "ok": True, "lines": 0, "unchained": 0, "line": None, "problem": None}
    ledger = Ledger(path)
    try:
        state = ledger.state()
    except (LedgerTampered, LedgerUnreadable) as err:
        return report | {"ok": False, "line": err.line, "problem": err.why}
    except InputError as err:
        return report | {"ok": False, "problem": str(err)}
    report |= {"lines": state.lines, "unchained": state.unchained, "head_lag": state.head_lag}
    at = ledger_delta(state.entries, state.budget) or 1e-5
    damaged = ("the accounting cache is damaged; delete it (privehr/io/accounting_cache.py says where)")
    for dataset in sorted({e.dataset for e in state.entries}):  # the totals every view shows, against a recomposition
        mine = [e for e in state.entries if e.dataset == dataset]
        shown, fresh = compose_entries(mine, at), compose_entries(mine, at, fresh=True)
        if not math.isclose(shown.epsilon_dp, fresh.epsilon_dp, rel_tol=1e-9, abs_tol=1e-9):
            return report | {"ok": False, "problem": f"dataset {short_dataset(dataset)}'s cached total "
                                                     f"{shown.epsilon_dp:.6g} differs from its recomposition "
                                                     f"{fresh.epsilon_dp:.6g}: {damaged}"}
    counted = effective_entries(state.entries)
    cited = {e.members for e in counted if e.members}
    if cited:  # every patient's total, from the store's curves and recomputed
        try:
            snapshots = ledger.members(cited)
        except LedgerTampered as err:
            return report | {"ok": False, "line": err.line, "problem": err.why}
        kept = patient_spend(counted, snapshots, at, budget=state.budget)
        again = patient_spend(counted, snapshots, at, fresh=True, budget=state.budget)
        if not np.allclose(kept.epsilon, again.epsilon, rtol=1e-9, atol=1e-9):
            return report | {"ok": False, "problem": f"the per-patient totals differ from their recomposition: {damaged}"}
        report["patients"] = len(kept.hashes)
    return report
