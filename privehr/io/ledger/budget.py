"""The project's per-patient budget, kept in the ledger: set by the steward, read by every release's check.

The budget is a chained line of the ledger (``models/privacy/rdp_filter.py``: epsilon, delta and the Renyi filter's
order, fixed together). Every entry point that releases (a pipeline run, synthesis, an audit, private inference, the
deployments) reserves through :func:`privehr.io.ledger.reserve`, which checks against it whatever the run's
configuration says: a run that asks for another budget is refused, and a run that asks for none is held to it.

* ``privehr privacy budget --set EPS`` (:func:`set_budget`) records it; lowering it is always allowed, raising it only
  with ``--raise --reason`` (recorded: the docs say what guarantee then holds);
* where the ledger has none, the first run that asks for a budget (``privacy.budget_epsilon``) records it, as a
  steward's first setting would (a budget where there was none is never a raise);
* its delta is the ledger's: one delta per ledger, fixed by its first release or its budget, whichever came first.
"""

from __future__ import annotations

import getpass
from datetime import datetime, timezone
from pathlib import Path

from privehr.core.errors import InputError
from privehr.io.ledger.file import Ledger
from privehr.models.privacy.ledger import GAUSSIAN_MECHANISMS, LedgerEntry
from privehr.models.privacy.rdp_filter import BudgetSetting, filter_order

__all__ = ["ledger_delta", "budget_for", "set_budget", "delta_mismatch", "held_to"]


def ledger_delta(entries: list[LedgerEntry], budget: BudgetSetting | None) -> float | None:
    """The delta every release of the ledger is composed at: its budget's, else that of its Gaussian releases (None: no
    release yet)."""
    if budget is not None:
        return budget.delta
    deltas = {e.delta for e in entries if e.mechanism in GAUSSIAN_MECHANISMS and e.status != "void"}
    return min(deltas) if deltas else None


def delta_mismatch(path: Path, made_at: float, asked: float) -> InputError:
    return InputError(f"the privacy ledger {path}'s releases are composed at delta {made_at:g}; this run asks for delta "
                      f"{asked:g}. One ledger has one delta (a larger one would make the same spend look smaller): set "
                      f"privacy.delta to {made_at:g}.")


def _setting(epsilon: float, delta: float, order: float, **about) -> BudgetSetting:
    try:
        return BudgetSetting(epsilon, delta, order, **about)
    except ValueError as err:  # a budget no filter can hold: one line, nothing written
        raise InputError(f"no per-patient budget was set: {err}") from None


def _user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown user"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def budget_for(ledger: Ledger, current: BudgetSetting | None, asked: float | None, delta: float,
               who: str) -> tuple[BudgetSetting | None, bool]:
    """The budget a run is held to, and whether it is a first budget to record now: the ledger's; where it has none,
    the one the run asks for. A run that asks for another than the ledger's is refused in one line."""
    if current is None:
        if asked is None:
            return None, False
        return _setting(asked, delta, filter_order(asked, delta), set_by=who, created_utc=_now(),
                        reason="the ledger's first budget, from privacy.budget_epsilon"), True
    if delta != current.delta:
        raise delta_mismatch(ledger.path, current.delta, delta)
    if asked is not None and asked != current.epsilon:
        raise InputError(f"this run asks for a per-patient budget of epsilon {asked:g}, but the privacy ledger "
                         f"{ledger.path} holds the project's budget, epsilon {current.epsilon:g} (set "
                         f"{current.created_utc or 'earlier'} by {current.set_by or 'the steward'}); nothing was "
                         f"reserved or trained. Remove privacy.budget_epsilon (the ledger's applies), or have the data "
                         "steward change it with `privehr privacy budget --set EPS` (a raise needs --raise --reason).")
    return current, False


def held_to(ledger: Ledger, asked: float | None, delta: float) -> BudgetSetting | None:
    """The budget a run that asks for ``asked`` would be held to, as the ledger stands (nothing written; a run asking
    for another than the ledger's is refused in one line)."""
    return budget_for(ledger, ledger.state().budget, asked, delta, "this run")[0]


def set_budget(path: str | Path, epsilon: float, delta: float | None = None, order: float | None = None,
               raise_: bool = False, reason: str = "") -> tuple[BudgetSetting, bool]:
    """Record the project's budget (the steward's command); return (the budget now, whether a line was written).

    Lowering it, or setting a first one, is always allowed; raising it needs ``raise_`` and a ``reason``. Its delta
    and order are fixed with the first budget (the filter's theorem needs its order fixed in advance)."""
    ledger = Ledger(path)
    with ledger.transaction() as tx:
        current = tx.budget
        made_at = ledger_delta(tx.entries, current)
        if delta is not None and made_at is not None and delta != made_at:
            raise delta_mismatch(ledger.path, made_at, delta)
        delta = delta if delta is not None else (made_at if made_at is not None else 1e-5)
        if current is not None and order is not None and order != current.order:
            raise InputError(f"the Renyi filter's order of the privacy ledger {ledger.path} is {current.order:g}, "
                             "fixed with its first budget: the filter's guarantee needs one order fixed in advance. "
                             "Leave out --order.")
        if current is not None and epsilon == current.epsilon:
            return current, False
        raised = current is not None and epsilon > current.epsilon
        if raised and not (raise_ and reason.strip()):
            raise InputError(f"epsilon {epsilon:g} would raise the project's per-patient budget from "
                             f"{current.epsilon:g}: every patient left out would be let back in, and the filter's "
                             "guarantee assumes the budget fixed in advance. If that is the custodian's decision, "
                             "repeat with --raise --reason TEXT (recorded in the ledger); docs/privacy-ledger.md says "
                             "what guarantee then holds.")
        setting = _setting(epsilon, delta, current.order if current else (order or filter_order(epsilon, delta)),
                           previous=None if current is None else current.epsilon, raised=raised,
                           reason=reason.strip(), set_by=f"steward ({_user()})", created_utc=_now())
        tx.append([setting])
    return setting, True
