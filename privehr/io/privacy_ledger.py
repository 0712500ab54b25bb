"""The privacy ledger file: JSON lines, read and appended under one exclusive lock.

Every change goes through :meth:`Ledger.transaction`, which holds ``flock(LOCK_EX)`` on the ledger
file itself while it reads, decides and appends, so two runs on one dataset can never both see the
budget before either has reserved its spend. Appends are flushed and fsynced before the lock is
released. The file is strict JSON (no ``Infinity``): a non-private release has ``epsilon: null``.

Protocol (``privehr.models.privacy.ledger`` composes it):

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

from privehr.models.privacy.ledger import (BudgetVerdict, LedgerEntry, LedgerTotal, check_budget, compose_entries,
                                   effective_entries)
from privehr.core.errors import InputError
from privehr.core.strict_json import strict_dumps

__all__ = ["Ledger", "read_ledger", "ledger_totals", "dataset_delta", "reserve", "record_release", "release_id",
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


def release_id(run_id: str, what: str) -> str:
    """An id never used before and never reused: the run, what it is, and 64 random bits."""
    return f"{run_id}/{what}#{secrets.token_hex(8)}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _parse(path: Path, lines: list[str]) -> list[LedgerEntry]:
    entries = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entries.append(LedgerEntry.from_dict(json.loads(line)))
        except (ValueError, TypeError) as err:
            raise InputError(f"the privacy ledger {path} has an unreadable line {number} ({type(err).__name__}); a "
                             "crash while writing leaves a partial last line. Nothing is read or trained until it is "
                             "repaired: keep a copy, then remove or complete that line.") from None
    return entries


class _Transaction:
    def __init__(self, fh, path: Path):
        self._fh = fh
        fh.seek(0)
        self.entries = _parse(path, fh.read().splitlines())

    def append(self, entries: list[LedgerEntry]) -> None:
        if not entries:
            return
        self._fh.seek(0, os.SEEK_END)
        self._fh.write("".join(strict_dumps(e.as_dict()) + "\n" for e in entries))
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.entries += entries


class Ledger:
    """One ledger file (``privacy.ledger_path``) and its secret key (``<ledger>.key``, beside it)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.key_path = self.path.with_name(self.path.name + ".key")

    def key(self) -> bytes:
        """The ledger's secret (32 random bytes, created on first use, owner-only): it keys the default dataset
        ids, so the ids in a run's artifacts say nothing about who is in a dataset."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            key = self.key_path.read_bytes()
            if len(key) != 32:
                raise InputError(f"the privacy ledger's key {self.key_path} is damaged ({len(key)} bytes, not 32); "
                                 "restore it from a backup: the ledger's default dataset ids depend on it") from None
            return key
        key = secrets.token_bytes(32)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key)
            fh.flush()
            os.fsync(fh.fileno())
        return key

    def check_writable(self) -> None:
        """Prove the ledger can be locked and appended to, before any private record is read."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                fcntl.flock(fh, fcntl.LOCK_UN)
            self.key()
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
                yield _Transaction(fh, self.path)
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def read(self) -> list[LedgerEntry]:
        if not self.path.exists():
            return []
        with open(self.path) as fh:
            fcntl.flock(fh, fcntl.LOCK_SH)
            lines = fh.read().splitlines()
        return _parse(self.path, lines)


def read_ledger(path: str | Path) -> list[LedgerEntry]:
    return Ledger(path).read()


def dataset_delta(entries: list[LedgerEntry]) -> float | None:
    """The delta a dataset's DP-SGD releases are composed at: the delta they were all made at (None if none)."""
    deltas = {e.delta for e in entries if e.mechanism == "dp_sgd" and e.status != "void"}
    return min(deltas) if deltas else None


def ledger_totals(path: str | Path, delta: float | None = None) -> list[LedgerTotal]:
    """Every dataset's total, composed at ``delta`` or, by default, at the delta of its own releases."""
    entries = read_ledger(path)
    totals = []
    for d in sorted({e.dataset for e in entries}):
        mine = [e for e in entries if e.dataset == d]
        totals.append(compose_entries(mine, delta if delta is not None else dataset_delta(mine) or 1e-5))
    return totals


def reserve(ledger: Ledger, dataset: str, run_id: str, planned: dict[str, LedgerEntry],
            budget_epsilon: float | None, delta: float, resume: bool, what: str) -> tuple[dict[str, str], BudgetVerdict, int]:
    """Reserve ``planned`` (key -> entry template) under the lock; return (key -> reservation id, verdict, voided).

    Raises :class:`BudgetExceeded` (and writes nothing) when the budget would be exceeded.
    """
    with ledger.transaction() as tx:
        mine = [e for e in tx.entries if e.dataset == dataset]
        made_at = dataset_delta(mine)
        if made_at is not None and made_at != delta:
            raise InputError(f"dataset {short_dataset(dataset)}'s releases were made and are composed at delta "
                             f"{made_at:g}; this run asks for delta {delta:g}. One dataset has one delta (a larger "
                             f"one would make the same spend look smaller): set privacy.delta to {made_at:g}.")
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
        reserved = next((e for e in tx.entries if e.release == reservation and e.status == "reserved"), None)
        if reserved is None:  # fail closed: the release is discarded, never saved
            raise RuntimeError(f"reservation {reservation} is not in the privacy ledger {ledger_path}; the trained "
                               "release is discarded. Was the ledger replaced during the run?")
        released = LedgerEntry(**{**entry.as_dict(), "release": release_id(reserved.run_id,
                                                                          entry.what.replace(" ", "-")),
                                  "status": "released", "reservation": reservation, "run_id": reserved.run_id,
                                  "dataset": reserved.dataset, "created_utc": _now()})
        tx.append([released])
    return released
