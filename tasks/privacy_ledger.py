"""The privacy ledger file: JSON lines, read and appended under one exclusive lock.

Every change goes through :meth:`Ledger.transaction`, which holds ``flock(LOCK_EX)`` on the ledger
file itself while it reads, decides and appends, so two runs on one dataset can never both see the
budget before either has reserved its spend. Appends are flushed and fsynced before the lock is
released. The file is strict JSON (no ``Infinity``): a non-private release has ``epsilon: null``.

Protocol (``models.privacy_ledger`` composes it):

1. :func:`reserve` before any release is trained: compose the dataset's counted entries with the
   run's planned ones, refuse if a budget would be exceeded, else append one reservation per
   planned release (ids unique forever). A resumed run first voids its own reservations that no
   release settled (its crashed attempt never trained them; the run lock guarantees that attempt is
   gone).
2. :func:`record_release` as soon as a release exists, before its model is saved: a crash after it
   leaves the release counted; a crash before it leaves no model anywhere and the reservation counted.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from models.privacy_ledger import (BudgetVerdict, LedgerEntry, LedgerTotal, check_budget, compose_entries,
                                   effective_entries)
from privehr.errors import InputError

__all__ = ["Ledger", "read_ledger", "ledger_totals", "reserve", "record_release", "release_id", "strict_json",
           "BudgetExceeded", "short_dataset"]


class BudgetExceeded(InputError):
    """A budget check refused the run; ``verdict`` says what it would have cost."""

    def __init__(self, message: str, verdict: BudgetVerdict):
        super().__init__(message)
        self.verdict = verdict


def short_dataset(dataset: str) -> str:
    """A dataset id short enough for a message: "subjects-sha256:" ids keep 12 hex digits."""
    kind, _, digest = dataset.partition(":")
    return f"{kind}:{digest[:12]}" if digest else dataset[:40]


def strict_json(value):
    """``value`` with every non-finite float replaced by None (json.dumps(allow_nan=False) then accepts it)."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def release_id(run_id: str, what: str) -> str:
    """An id never used before and never reused: the run, what it is, and 64 random bits."""
    return f"{run_id}/{what}#{secrets.token_hex(8)}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class _Transaction:
    def __init__(self, fh):
        self._fh = fh
        fh.seek(0)
        self.entries = [LedgerEntry.from_dict(json.loads(line)) for line in fh.read().splitlines() if line.strip()]

    def append(self, entries: list[LedgerEntry]) -> None:
        if not entries:
            return
        self._fh.seek(0, os.SEEK_END)
        self._fh.write("".join(json.dumps(strict_json(e.as_dict()), allow_nan=False) + "\n" for e in entries))
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.entries += entries


class Ledger:
    """One ledger file (``privacy.ledger_path``)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def check_writable(self) -> None:
        """Prove the ledger can be locked and appended to, before any private record is read."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                fcntl.flock(fh, fcntl.LOCK_UN)
        except OSError as err:
            reason = {errno.EACCES: "permission denied", errno.EROFS: "read-only file system",
                      errno.ENOSPC: "no space left"}.get(err.errno, err.strerror or type(err).__name__)
            raise InputError(f"the privacy ledger {self.path} is not writable ({reason}); nothing was read or "
                             "trained. Make it writable, or point privacy.ledger_path at a writable file.") from None

    @contextmanager
    def transaction(self) -> Iterator[_Transaction]:
        """Read every entry and append, all under one exclusive lock."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fh = open(self.path, "a+")
        except OSError as err:
            raise InputError(f"the privacy ledger {self.path} cannot be opened for writing ({err.strerror}); "
                             "make it writable or point privacy.ledger_path elsewhere.") from None
        with fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield _Transaction(fh)
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def read(self) -> list[LedgerEntry]:
        if not self.path.exists():
            return []
        with open(self.path) as fh:
            fcntl.flock(fh, fcntl.LOCK_SH)
            lines = fh.read().splitlines()
        return [LedgerEntry.from_dict(json.loads(line)) for line in lines if line.strip()]


def read_ledger(path: str | Path) -> list[LedgerEntry]:
    return Ledger(path).read()


def ledger_totals(path: str | Path, delta: float = 1e-5) -> list[LedgerTotal]:
    entries = read_ledger(path)
    return [compose_entries([e for e in entries if e.dataset == d], delta)
            for d in sorted({e.dataset for e in entries})]


def reserve(ledger: Ledger, dataset: str, run_id: str, planned: dict[str, LedgerEntry],
            budget_epsilon: float | None, delta: float, resume: bool, what: str) -> tuple[dict[str, str], BudgetVerdict, int]:
    """Reserve ``planned`` (key -> entry template) under the lock; return (key -> reservation id, verdict, voided).

    Raises :class:`BudgetExceeded` (and writes nothing) when the budget would be exceeded.
    """
    with ledger.transaction() as tx:
        mine = [e for e in tx.entries if e.dataset == dataset]
        voids = []
        if resume:  # this run's reservations that no release settled: its crashed attempt never trained them
            pending = {e.release for e in effective_entries(mine) if e.status == "reserved" and e.run_id == run_id}
            voids = [LedgerEntry(dataset, release_id(run_id, "void"), e.mechanism, status="void", reservation=e.release,
                                 run_id=run_id, guarantee=e.guarantee, what=f"void: {e.what}", created_utc=_now())
                     for e in mine if e.release in pending]
        reservations = {key: LedgerEntry(**{**e.as_dict(), "dataset": dataset, "release": release_id(run_id, key),
                                            "status": "reserved", "run_id": run_id, "created_utc": _now()})
                        for key, e in planned.items()}
        verdict = check_budget(mine + voids, list(reservations.values()), budget_epsilon, delta)
        if verdict.refused:
            raise BudgetExceeded(
                f"privacy budget exceeded for dataset {short_dataset(dataset)}: {verdict.reason}. This run planned "
                f"{len(planned)} {what}; none was trained and nothing was reserved. Fewer budgets, seeds or grid "
                "cells, no release without a DP guarantee, or a budget decision by the data custodian are the ways "
                "on.", verdict)
        tx.append(voids + list(reservations.values()))
    return {key: e.release for key, e in reservations.items()}, verdict, len(voids)


def record_release(ledger_path: str | Path, reservation: str, entry: LedgerEntry) -> LedgerEntry:
    """Append the release that settles ``reservation`` (call it before the release is saved anywhere).

    The release is counted whatever became of the reservation: a voided or already settled
    reservation does not make a trained model free.
    """
    with Ledger(ledger_path).transaction() as tx:
        reserved = next((e for e in tx.entries if e.release == reservation), None)
        run_id = reserved.run_id if reserved is not None else entry.run_id
        released = LedgerEntry(**{**entry.as_dict(), "release": release_id(run_id, entry.what.replace(" ", "-")),
                                  "status": "released", "reservation": reservation, "run_id": run_id,
                                  "dataset": reserved.dataset if reserved is not None else entry.dataset,
                                  "created_utc": _now()})
        tx.append([released])
    return released
