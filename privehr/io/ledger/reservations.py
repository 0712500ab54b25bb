"""Reservations and releases: the protocol by which a run spends, under the ledger's lock.

1. :func:`reserve` before any release is trained: compose what counts with the run's planned releases, refuse if a
   budget would be exceeded, else append one reservation per planned release (ids unique forever). A resumed run first
   voids its own reservations that no release settled (its crashed attempt never trained them; the run lock
   guarantees that attempt is gone).
2. :func:`record_release` as soon as a release exists, before it is saved anywhere: a crash after it leaves the
   release counted; a crash before it leaves no model anywhere and the reservation counted.
3. :func:`void_reservation` where a run decided, from public or released values only, not to make a release.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from privehr.core.errors import InputError
from privehr.io.ledger.budget import budget_for, delta_mismatch, ledger_delta
from privehr.io.ledger.file import Ledger
from privehr.io.ledger.views import short_dataset
from privehr.models.privacy.ledger import LedgerEntry, effective_entries
from privehr.models.privacy.patient_accounting import PatientVerdict, check_patient_budget

__all__ = ["BudgetExceeded", "reserve", "record_release", "void_reservation", "void_open_reservations",
           "release_id"]


class BudgetExceeded(InputError):
    """A budget check refused the run; ``verdict`` says what it would have cost."""

    def __init__(self, message: str, verdict: PatientVerdict | None):
        super().__init__(message)
        self.verdict = verdict


def release_id(run_id: str, what: str) -> str:
    """An id never used before and never reused: the run, what it is, and 64 random bits."""
    return f"{run_id}/{what}#{secrets.token_hex(8)}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def reserve(ledger: Ledger, dataset: str, run_id: str, planned: dict[str, LedgerEntry],
            budget_epsilon: float | None, delta: float, resume: bool, what: str,
            members: str | None = None) -> tuple[dict[str, str], PatientVerdict, int]:
    """Reserve ``planned`` (key -> entry template) under the lock; return (key -> reservation id, verdict, voided).

    The budget is the ledger's (:mod:`privehr.io.ledger.budget`): ``budget_epsilon``, the run's
    ``privacy.budget_epsilon``, must be None or equal to it (a ledger without one records it as its first). Each
    patient's spend composes every release of the ledger that used them, whatever source it names (``dataset`` is a
    label). ``members``: the run's membership snapshot (:meth:`Ledger.write_members`), which every reservation cites;
    the budget is then checked for each of its patients. Without it every planned release is charged to every patient
    of the ledger and to anyone in none of its snapshots. Raises :class:`BudgetExceeded` (and writes nothing) when
    the budget would be exceeded.
    """
    with ledger.transaction() as tx:
        budget, first = budget_for(ledger, tx.budget, budget_epsilon, delta, f"run {run_id}")
        made_at = ledger_delta(tx.entries, tx.budget)
        if made_at is not None and made_at != delta:
            raise delta_mismatch(ledger.path, made_at, delta)
        mine = [e for e in tx.entries if e.dataset == dataset]
        voids = []
        if resume:  # this run's reservations that no release settled: its crashed attempt never trained them
            pending = {e.release for e in effective_entries(mine) if e.status == "reserved" and e.run_id == run_id}
            voids = [_void(e, "its run resumed") for e in mine if e.release in pending]
        reservations = {key: LedgerEntry(**{**e.as_dict(), "dataset": dataset, "release": release_id(run_id, key),
                                            "status": "reserved", "run_id": run_id, "created_utc": _now(),
                                            "members": members})
                        for key, e in planned.items()}
        counted = effective_entries(tx.entries + voids)  # every source's: a source is a label, a patient a patient
        snapshots = ledger.members({e.members for e in counted if e.members} | ({members} if members else set()))
        patients = snapshots[members] if members else _everyone(snapshots)
        verdict = check_patient_budget(counted, list(reservations.values()), snapshots, patients, budget, delta,
                                       outsider=members is None)
        if verdict.refused:
            raise BudgetExceeded(
                f"privacy budget exceeded for dataset {short_dataset(dataset)}: {verdict.reason}. This run planned "
                f"{len(planned)} {what}; none was trained and nothing was reserved. Fewer budgets, seeds or grid "
                "cells, no release without a DP guarantee, or a budget decision by the data custodian are the ways "
                "on.", verdict)
        tx.append(([budget] if first else []) + voids + list(reservations.values()))
    return {key: e.release for key, e in reservations.items()}, verdict, len(voids)


def _everyone(snapshots: dict[str, np.ndarray]) -> np.ndarray:
    return np.unique(np.concatenate(list(snapshots.values()))) if snapshots else np.zeros(0, dtype=np.uint64)


def void_reservation(ledger_path: str | Path, reservation: str, why: str) -> LedgerEntry:
    """Give up ``reservation``, which no release has settled: the run decided, from public or already released
    values only, not to make it (e.g. a DP featurizer whose every variable would fall back to public values). Fails
    closed: a reservation already released, voided or absent raises, and nothing is written."""
    with Ledger(ledger_path).transaction() as tx:
        reserved = next((e for e in tx.entries if e.release == reservation and e.status == "reserved"), None)
        settled = any(e.reservation == reservation for e in tx.entries if e.status in ("released", "void"))
        if reserved is None or settled:
            raise RuntimeError(f"reservation {reservation} is not an open reservation of the privacy ledger "
                               f"{ledger_path}; nothing was voided")
        void = _void(reserved, why)
        tx.append([void])
    return void


def void_open_reservations(ledger_path: str | Path, run_id: str, why: str) -> list[LedgerEntry]:
    """Give up every reservation of ``run_id`` that no release or void has settled (the run decided, from public or
    released values only, to make none of them); return the voids written."""
    with Ledger(ledger_path).transaction() as tx:
        open_ = [e for e in effective_entries(tx.entries) if e.status == "reserved" and e.run_id == run_id]
        voids = [_void(e, why) for e in open_]
        tx.append(voids)
    return voids


def _void(reserved: LedgerEntry, why: str) -> LedgerEntry:
    return LedgerEntry(reserved.dataset, release_id(reserved.run_id, "void"), reserved.mechanism, status="void",
                       reservation=reserved.release, run_id=reserved.run_id, guarantee=reserved.guarantee,
                       what=f"void: {reserved.what} ({why})", created_utc=_now(),
                       # a gaussian entry is one full-batch step, its void included
                       **({"sample_rate": 1.0, "steps": 1} if reserved.mechanism == "gaussian" else {}))


def record_release(ledger_path: str | Path, reservation: str, entry: LedgerEntry) -> LedgerEntry:
    """Append the release that settles ``reservation`` (call it before the release is saved anywhere).

    The release is counted whatever became of the reservation: a voided or already settled
    reservation does not make a trained model free.
    """
    with Ledger(ledger_path).transaction() as tx:
        reserved = next((e for e in tx.entries if e.release == reservation and e.status == "reserved"), None)
        if reserved is None:  # fail closed: the release is discarded, never saved
            raise RuntimeError(f"reservation {reservation} is not in the privacy ledger {ledger_path}; the trained "
                               "release is discarded. Was the ledger replaced during the run?")
        released = LedgerEntry(**{**entry.as_dict(), "release": release_id(reserved.run_id,
                                                                          entry.what.replace(" ", "-")),
                                  "status": "released", "reservation": reservation, "run_id": reserved.run_id,
                                  "dataset": reserved.dataset, "created_utc": _now(),
                                  "members": reserved.members})  # the patients its reservation was checked for
        tx.append([released])
    return released
