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

Tamper evidence: every line written carries ``seq`` (its line number) and ``chain``, an HMAC under the ledger's key
of its content and the previous line's tag (``privehr.models.privacy.ledger.chain_tag``); ``<ledger>.head`` holds the
number of lines and the last tag under the same key. Every read checks the chain and the head: an edited, deleted,
reordered, inserted or cut line, or a replaced key, stops the read with the line's number (:class:`LedgerTampered`).
An older ledger's unchained lines are read as they are and the chain starts from their last line (its first tag
covers their bytes). ``privehr privacy ledger --verify`` checks a ledger alone.
"""

from __future__ import annotations

import errno
import fcntl
import hmac
import json
import math
import os
import re
import tempfile

import numpy as np
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from privehr.models.privacy.ledger import (CHAIN_FIELDS, GAUSSIAN_MECHANISMS, BudgetVerdict, LedgerEntry, LedgerTotal,
                                           chain_start, chain_tag, check_budget, compose_entries, effective_entries,
                                           head_tag)
from privehr.models.privacy.patient_accounting import (PatientVerdict, check_patient_budget, entries_of,
                                                       member_hashes, patient_spend, snapshot_bytes,
                                                       snapshot_from_bytes, snapshot_id)
from privehr.core.errors import InputError
from privehr.core.strict_json import strict_dumps
from privehr.io import accounting_cache

accounting_cache.install()  # calibrations and compositions outlive the process (public inputs only)

__all__ = ["Ledger", "read_ledger", "ledger_totals", "dataset_delta", "reserve", "record_release", "release_id",
           "BudgetExceeded", "short_dataset", "LedgerTampered", "LedgerUnreadable", "ChainState", "verify_ledger",
           "migrate_ledger", "source_patients", "PatientVerdict", "VIEW_MAX_DISTINCT", "source_entries",
           "LEGACY_PREFIX", "void_reservation"]


class BudgetExceeded(InputError):
    """A budget check refused the run; ``verdict`` says what it would have cost."""

    def __init__(self, message: str, verdict: BudgetVerdict):
        super().__init__(message)
        self.verdict = verdict


def short_dataset(dataset: str) -> str:
    """A dataset id short enough for a message: "subjects-hmac:" ids keep 12 hex digits, a source's path stays whole.

    >>> short_dataset("subjects-hmac:" + "a" * 64), short_dataset("path:/data/x.h5")
    ('subjects-hmac:aaaaaaaaaaaa', 'path:/data/x.h5')
    """
    kind, _, digest = dataset.partition(":")
    if kind == "path":
        return dataset
    return f"{kind}:{digest[:12]}" if digest else dataset[:40]


def release_id(run_id: str, what: str) -> str:
    """An id never used before and never reused: the run, what it is, and 64 random bits."""
    return f"{run_id}/{what}#{secrets.token_hex(8)}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


_SNAPSHOTS: dict[tuple, np.ndarray] = {}  # verified snapshots by (path, mtime, size): read once per process


class LedgerTampered(InputError):
    """The ledger's chain or head does not verify: ``line`` names the first line found wrong (None: the head or key)."""

    def __init__(self, path: Path, line: int | None, why: str):
        where = f"line {line}" if line is not None else "its head"
        super().__init__(f"the privacy ledger {path} fails its tamper check at {where}: {why}. Nothing is read or "
                         "trained. Restore the ledger, its .head and its .key from a backup, or ask the data steward; "
                         "`privehr privacy ledger --verify` checks it alone.")
        self.line, self.why = line, why


@dataclass
class ChainState:
    """A read ledger: its entries, its number of lines, how many were written before the chain began, the last tag."""

    entries: list[LedgerEntry]
    lines: int
    unchained: int
    last: str | None            # the last line's tag (None: no chained line yet)
    head_lag: int = 0           # chained lines after the head (a crash between a line and its head)


class LedgerUnreadable(InputError):
    """A line that is not an entry (a partial last line after a crash, or a cut file)."""

    def __init__(self, path: Path, line: int, err: Exception):
        super().__init__(f"the privacy ledger {path} has an unreadable line {line} ({type(err).__name__}); a crash "
                         "while writing leaves a partial last line. Nothing is read or trained until it is repaired: "
                         "keep a copy, then remove or complete that line.")
        self.line, self.why = line, f"the line is not a ledger entry ({type(err).__name__})"


_NOT_UTF8 = re.compile("[\udc80-\udcff]")  # bytes that are not UTF-8, as the ledger's files are read


class NotUTF8Text(ValueError):
    """A ledger line holding bytes that are not UTF-8 text."""


def _check_chain(path: Path, lines: list[str], key: bytes | None, head: dict | None) -> ChainState:
    """Parse every line and verify the chain and the head; raise :class:`LedgerTampered` naming the first bad line."""
    entries, unchained, tags, previous = [], [], {}, None
    head_ok = head is None or key is None or hmac.compare_digest(
        str(head.get("mac", "")), head_tag(key, int(head.get("lines", -1)), str(head.get("tag", ""))))
    for number, line in enumerate(lines, 1):
        if _NOT_UTF8.search(line):
            raise LedgerUnreadable(path, number, NotUTF8Text())
        if not line.strip():
            if previous is None:
                unchained.append(line)
                continue
            raise LedgerTampered(path, number, "the line is empty (an entry was blanked)")
        try:
            raw = json.loads(line)
            content = {k: v for k, v in raw.items() if k not in CHAIN_FIELDS}
            entry = LedgerEntry.from_dict(content)
        except (ValueError, TypeError, AttributeError) as err:
            raise LedgerUnreadable(path, number, err) from None
        tag, seq = raw.get("chain"), raw.get("seq")
        if tag is None:
            if previous is not None:
                raise LedgerTampered(path, number, "the line has no chain tag although the lines before it have one "
                                                   "(written by hand, or inserted)")
            unchained.append(line)
        else:
            if key is None:
                raise LedgerTampered(path, number, f"the ledger's key {path.name}.key is missing, so no line can be "
                                                   "checked")
            if previous is None:
                previous = chain_start("\n".join(unchained))
            if not hmac.compare_digest(str(tag), chain_tag(key, previous, number, content)):
                if not head_ok:
                    why = "its tag and the head's do not verify under the ledger's key: the key was replaced"
                elif seq != number:
                    why = (f"it holds the entry written as line {seq}: a line before it was deleted or inserted, or "
                           "lines were reordered")
                else:
                    why = ("its content does not match its tag: the line was edited (or an earlier unchained line, "
                           "or the key, changed)")
                raise LedgerTampered(path, number, why)
            previous = tags[number] = str(tag)
        entries.append(entry)
    total = len(lines)
    if entries and not tags:  # no chained line vouches for these: a pre-chain ledger, or one stripped of its chain
        raise LedgerTampered(path, 1, f"none of its {len(entries)} entries carries a chain tag (a ledger written before "
                                      "privehr chained its ledger, or one whose chain fields were stripped); check them "
                                      "against your records, then chain them once with `privehr privacy ledger "
                                      "--migrate`")
    if head is None:
        if key is not None:
            raise LedgerTampered(path, None, f"{path.name}.head, which records the ledger's length, is missing (deleted, "
                                             "or the ledger was emptied)")
        return ChainState(entries, total, len(unchained), None)
    if key is None:
        raise LedgerTampered(path, None, f"the ledger's key {path.name}.key is missing, so its head cannot be checked")
    if not head_ok:
        raise LedgerTampered(path, None, "the head does not verify under the ledger's key (edited, or the key was "
                                         "replaced)")
    recorded = int(head["lines"])
    if recorded > total:
        raise LedgerTampered(path, total + 1, f"the ledger ends at line {total} but its head records {recorded} "
                                              f"lines: line(s) {total + 1}-{recorded} were cut off")
    if recorded and tags.get(recorded) != head["tag"]:
        raise LedgerTampered(path, recorded, "the line differs from the one the head records (the ledger was "
                                             "replaced or rewritten)")
    return ChainState(entries, total, len(unchained), previous, head_lag=total - recorded)


class _Transaction:
    def __init__(self, fh, ledger: "Ledger"):
        self._fh, self._ledger = fh, ledger
        fh.seek(0)
        self._state = ledger._verified(fh.read().splitlines())
        self.entries = self._state.entries

    def append(self, entries: list[LedgerEntry]) -> None:
        if not entries:
            return
        key, state = self._ledger._key_in_lock(self._fh), self._state
        previous = state.last
        if previous is None:  # the chain starts here, after whatever unchained lines an older ledger holds
            self._fh.seek(0)
            previous = chain_start("\n".join(self._fh.read().splitlines()))
        text = []
        for entry in entries:
            state.lines += 1
            content = entry.as_dict()
            previous = chain_tag(key, previous, state.lines, content)
            text.append(strict_dumps({**content, "seq": state.lines, "chain": previous}) + "\n")
        self._fh.seek(0, os.SEEK_END)
        self._fh.write("".join(text))
        self._fh.flush()
        os.fsync(self._fh.fileno())
        state.last = previous
        self._ledger._write_head(key, state.lines, previous)  # after the lines: a crash between leaves the head behind
        self.entries += entries


class Ledger:
    """One ledger file (``privacy.ledger_path``) and its secret key (``<ledger>.key``, beside it)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.key_path = self.path.with_name(self.path.name + ".key")
        self.head_path = self.path.with_name(self.path.name + ".head")
        self.members_dir = self.path.with_name(self.path.name + ".members")

    def write_members(self, subject_ids: Iterable) -> str:
        """Record a membership snapshot of ``subject_ids`` (keyed hashes, owner-only, beside the ledger); return its id,
        which the run's releases cite. Content-addressed: the same patients give the same snapshot, written once."""
        key = self.key()
        hashes = member_hashes(subject_ids, key)
        sid = snapshot_id(hashes, key)
        target = self.members_dir / f"{sid}.u64"
        if not target.exists():
            self.members_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = target.with_name(f".{secrets.token_hex(4)}.tmp")
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
                out.write(snapshot_bytes(hashes))
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, target)
        return sid

    def members(self, ids: Iterable[str]) -> dict[str, np.ndarray]:
        """The snapshots ``ids``, each checked against its id under the ledger's key: a missing, edited or swapped
        snapshot is tampering (:class:`LedgerTampered`), as a missing line would be."""
        key, found = self._existing_key(), {}
        for sid in ids:
            path = self.members_dir / f"{sid}.u64"
            try:
                stat = path.stat()
                cached = _SNAPSHOTS.get((str(path), stat.st_mtime_ns, stat.st_size))
                if cached is None:
                    if stat.st_mode & 0o077:
                        raise InputError(f"the privacy ledger's {path} has mode {stat.st_mode & 0o777:04o}, not "
                                         f"owner-only; nothing was read or trained. Run `chmod 600 {path}`.")
                    raw = path.read_bytes()
                    if len(raw) % 8:
                        raise LedgerTampered(self.path, None, f"membership snapshot {sid[:12]} is cut (not whole "
                                                              "8-byte hashes)")
                    hashes = snapshot_from_bytes(raw)
                    if key is None or not hmac.compare_digest(snapshot_id(hashes, key), sid):
                        raise LedgerTampered(self.path, None, f"membership snapshot {sid[:12]} does not match its id "
                                                              "(edited or swapped)")
                    cached = _SNAPSHOTS[(str(path), stat.st_mtime_ns, stat.st_size)] = hashes
            except FileNotFoundError:
                raise LedgerTampered(self.path, None, f"membership snapshot {sid[:12]}, cited by its releases, is "
                                                      f"missing from {self.members_dir.name}") from None
            found[sid] = cached
        return found

    def _existing_key(self) -> bytes | None:
        try:
            key = self.key_path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as err:  # a directory, unreadable
            raise InputError(f"the privacy ledger's key {self.key_path} cannot be read ({err.strerror}); nothing was "
                             "read or trained. Restore the 32-byte key file from a backup (the ledger's chain and "
                             "membership snapshots depend on it).") from None
        if len(key) != 32:
            raise InputError(f"the privacy ledger's key {self.key_path} is damaged ({len(key)} bytes, not 32); "
                             "restore it from a backup: the ledger's chain and default dataset ids depend on it")
        return key

    def _head(self) -> dict | None:
        try:
            head = json.loads(self.head_path.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, UnicodeDecodeError, IsADirectoryError):
            raise LedgerTampered(self.path, None, f"{self.head_path.name} is not readable JSON") from None
        if not isinstance(head, dict) or not isinstance(head.get("lines"), int) or not isinstance(head.get("tag"), str):
            raise LedgerTampered(self.path, None, f"{self.head_path.name} lacks its lines and tag")
        return head

    def _write_head(self, key: bytes, lines: int, last: str) -> None:
        tmp = self.head_path.with_name(self.head_path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps({"lines": lines, "tag": last, "mac": head_tag(key, lines, last)}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.head_path)

    def _verified(self, lines: list[str]) -> ChainState:
        self.check_modes()
        return _check_chain(self.path, lines, self._existing_key(), self._head())

    def check_modes(self) -> None:
        """The ledger, its head, its key and its membership snapshots are owner-only: a key others could read lets them
        re-sign an edited ledger, and a ledger or head others could write is theirs to edit. Any other mode is
        refused, naming the file (``chmod 600``, a directory 700; a key that was readable should be treated as
        leaked)."""
        for path in (self.path, self.head_path, self.key_path, self.members_dir):
            try:
                mode = path.stat().st_mode & 0o777
            except FileNotFoundError:
                continue
            if mode & 0o077:
                leaked = (" and, as others could read it, treat the key as leaked: the chain is only as safe as the "
                          "key" if path == self.key_path and mode & 0o044 else "")
                raise InputError(f"the privacy ledger's {path} has mode {mode:04o}, not owner-only; nothing was read "
                                 f"or trained. Run `chmod {700 if path.is_dir() else 600} {path}`{leaked}.")

    def key(self) -> bytes:
        """The ledger's secret (32 random bytes, created on first use, owner-only): it keys the default dataset
        ids, so the ids in a run's artifacts say nothing about who is in a dataset. A new key comes with the head of
        an empty chain, written under the ledger's lock: from then on a missing head is tampering."""
        existing = self._existing_key()
        if existing is not None:
            return existing
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with os.fdopen(os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600), "a+",
                           encoding="utf-8", errors="surrogateescape") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                return self._key_in_lock(fh)
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _key_in_lock(self, fh, fresh: bool = False) -> bytes:
        """The key, created (with the head of an empty chain) by the holder of the ledger's exclusive lock; ``fresh``:
        for a migration, which writes the head of what it chains itself."""
        existing = self._existing_key()
        if existing is not None:
            return existing
        fh.seek(0)
        if not fresh and (fh.read().strip() or self._head() is not None):
            raise LedgerTampered(self.path, None, f"the ledger's key {self.key_path.name} is missing while the ledger "
                                                  "or its head holds lines; restore the key from a backup (a new key "
                                                  "would re-sign whatever the ledger now says)")
        key = secrets.token_bytes(32)
        tmp = self.key_path.with_name(self.key_path.name + f".{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(key)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(tmp, self.key_path)  # atomic, and never over a key another process made
        except FileExistsError:
            return self._existing_key()
        finally:
            tmp.unlink()
        if not fresh:
            self._write_head(key, 0, chain_start(""))
        return key

    def check_writable(self) -> bool:
        """Prove the ledger can be locked and appended to, before any private record is read; return whether this
        created it (a new ledger: every dataset starts from a full budget, which the caller says aloud)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            new = not self.path.exists()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                fcntl.flock(fh, fcntl.LOCK_UN)
            self.key()
        except OSError as err:
            raise self._unwritable(err) from None
        return new

    def probe_writable(self) -> None:
        """:meth:`check_writable`'s proof without creating the ledger (a command's check before Prefect starts):
        the file (if it exists) opens for appending, and its directory, or the nearest one that exists, takes a new
        entry (the head's and key's files are written beside the ledger; made and removed at once)."""
        try:
            if self.path.exists():  # the file appends, and its directory takes the head's and key's files
                os.close(os.open(self.path, os.O_WRONLY | os.O_APPEND))
            parent = self.path.parent
            while not parent.exists() and parent != parent.parent:
                parent = parent.parent
            if parent == self.path.parent:
                fd, probe = tempfile.mkstemp(prefix=".probe-", dir=parent)
                os.close(fd)
                os.unlink(probe)
            else:  # the directories the ledger needs would be made there
                os.rmdir(tempfile.mkdtemp(prefix=".probe-", dir=parent))
        except OSError as err:
            raise self._unwritable(err) from None

    def _unwritable(self, err: OSError) -> InputError:
        reason = {errno.EACCES: "permission denied", errno.EROFS: "read-only file system",
                  errno.ENOSPC: "no space left"}.get(err.errno, err.strerror or type(err).__name__)
        return InputError(f"the privacy ledger {self.path} is not writable ({reason}); nothing was read or "
                          "trained. Make it writable, or point privacy.ledger_path at a writable file.")

    @contextmanager
    def transaction(self) -> Iterator[_Transaction]:
        """Read every entry and append, all under one exclusive lock."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fh = os.fdopen(os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600), "a+",
                           encoding="utf-8", errors="surrogateescape")
        except OSError as err:
            raise InputError(f"the privacy ledger {self.path} cannot be opened for writing ({err.strerror}); "
                             "make it writable or point privacy.ledger_path elsewhere.") from None
        with fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield _Transaction(fh, self)
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    @contextmanager
    def transaction_unverified(self):
        """The ledger's file under its exclusive lock, not read (for :func:`migrate_ledger` alone)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with os.fdopen(os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600), "a+",
                           encoding="utf-8", errors="surrogateescape") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield fh
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def state(self) -> ChainState:
        """Every entry, the chain and the head checked (under a shared lock)."""
        if not self.path.exists():
            head = self._head()
            if head is not None and head["lines"] > 0:
                raise LedgerTampered(self.path, 1, "the ledger file is gone but its head records lines")
            if head is None and self.key_path.exists():
                raise LedgerTampered(self.path, None, "the ledger file and its head are gone but its key remains")
            return ChainState([], 0, 0, None)
        try:
            fh = open(self.path, encoding="utf-8", errors="surrogateescape")
        except OSError as err:
            raise InputError(f"the privacy ledger {self.path} is not writable ({err.strerror}); nothing was read or "
                             "trained. Make it writable, or point privacy.ledger_path at a writable file.") from None
        with fh:
            fcntl.flock(fh, fcntl.LOCK_SH)
            lines = fh.read().splitlines()
            return self._verified(lines)

    def read(self) -> list[LedgerEntry]:
        return self.state().entries


def read_ledger(path: str | Path) -> list[LedgerEntry]:
    return Ledger(path).read()


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


def migrate_ledger(path: str | Path) -> dict:
    """Chain, once and on purpose, a ledger that no chain vouches for: an older privehr's unchained lines, or an empty
    ledger whose key has no head. Every entry line is rewritten with its chain fields (the content unchanged; blank
    lines dropped), atomically, and the head written. Returns what it chained: {"ledger", "chained", "datasets",
    "releases", "first_utc", "last_utc", "already"} ("already": the ledger verified as it was, nothing written).

    The lines are trusted as they stand: whoever runs this vouches for them, so check them first. A ledger with any
    chained line is never migrated (its chain already covers the lines before it)."""
    ledger = Ledger(path)
    ledger.check_modes()
    report = {"ledger": str(path), "chained": 0, "datasets": 0, "releases": 0, "first_utc": None, "last_utc": None,
              "already": False}
    with ledger.transaction_unverified() as fh:
        fh.seek(0)
        lines = fh.read().splitlines()
        key, head = ledger._existing_key(), ledger._head()
        try:
            _check_chain(ledger.path, lines, key, head)
            return report | {"already": True}
        except LedgerUnreadable:
            raise
        except LedgerTampered:
            pass
        if any('"chain"' in line and '"seq"' in line for line in lines):
            raise LedgerTampered(ledger.path, None, "it holds chained lines, which a migration never rewrites; "
                                                    "`privehr privacy ledger --verify` names the line at fault")
        if head is not None and head.get("lines", 0) > 0:
            raise LedgerTampered(ledger.path, None, "its head records chained lines that are gone; restore the ledger "
                                                    "from a backup")
        entries = []
        for number, line in enumerate(lines, 1):
            if _NOT_UTF8.search(line):
                raise LedgerUnreadable(ledger.path, number, NotUTF8Text())
            if line.strip():
                try:
                    entries.append(LedgerEntry.from_dict(json.loads(line)))
                except (ValueError, TypeError, AttributeError) as err:
                    raise LedgerUnreadable(ledger.path, number, err) from None
        key = key if key is not None else ledger._key_in_lock(fh, fresh=True)
        previous, text = chain_start(""), []
        for seq, entry in enumerate(entries, 1):
            content = entry.as_dict()
            previous = chain_tag(key, previous, seq, content)
            text.append(strict_dumps({**content, "seq": seq, "chain": previous}) + "\n")
        tmp = ledger.path.with_name(ledger.path.name + f".{secrets.token_hex(4)}.tmp")
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
            out.write("".join(text))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, ledger.path)  # the lock was on the old file: this command is the steward's, run alone
        ledger._write_head(key, len(entries), previous)
    stamps = sorted(e.created_utc for e in entries if e.created_utc)
    return report | {"chained": len(entries), "datasets": len({e.dataset for e in entries}),
                     "releases": sum(e.status == "released" for e in entries),
                     "first_utc": stamps[0] if stamps else None, "last_utc": stamps[-1] if stamps else None}


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


def reserve(ledger: Ledger, dataset: str, run_id: str, planned: dict[str, LedgerEntry],
            budget_epsilon: float | None, delta: float, resume: bool, what: str,
            members: str | None = None) -> tuple[dict[str, str], BudgetVerdict, int]:
    """Reserve ``planned`` (key -> entry template) under the lock; return (key -> reservation id, verdict, voided).

    ``members``: the run's membership snapshot (:meth:`Ledger.write_members`), which every reservation cites; the
    budget is then checked per patient of the snapshot (``models/privacy/patient_accounting.py``). Without it every
    planned release is charged to every patient of the source. Raises :class:`BudgetExceeded` (and writes nothing)
    when the budget would be exceeded.
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
                                 run_id=run_id, guarantee=e.guarantee, what=f"void: {e.what}", created_utc=_now(),
                                 # a gaussian entry is one full-batch step, its void included
                                 **({"sample_rate": 1.0, "steps": 1} if e.mechanism == "gaussian" else {}))
                     for e in mine if e.release in pending]
        reservations = {key: LedgerEntry(**{**e.as_dict(), "dataset": dataset, "release": release_id(run_id, key),
                                            "status": "reserved", "run_id": run_id, "created_utc": _now(),
                                            "members": members})
                        for key, e in planned.items()}
        counted = source_entries(tx.entries, dataset) + voids  # older default ids charged too (source_entries)
        if members is None:
            verdict = check_budget(counted, list(reservations.values()), budget_epsilon, delta)
        else:
            snapshots = ledger.members({e.members for e in effective_entries(counted) if e.members} | {members})
            verdict = check_patient_budget(effective_entries(counted), list(reservations.values()), snapshots,
                                           snapshots[members], budget_epsilon, delta)
        if verdict.refused:
            raise BudgetExceeded(
                f"privacy budget exceeded for dataset {short_dataset(dataset)}: {verdict.reason}. This run planned "
                f"{len(planned)} {what}; none was trained and nothing was reserved. Fewer budgets, seeds or grid "
                "cells, no release without a DP guarantee, or a budget decision by the data custodian are the ways "
                "on.", verdict)
        tx.append(voids + list(reservations.values()))
    return {key: e.release for key, e in reservations.items()}, verdict, len(voids)


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
        void = LedgerEntry(reserved.dataset, release_id(reserved.run_id, "void"), reserved.mechanism, status="void",
                           reservation=reservation, run_id=reserved.run_id, guarantee=reserved.guarantee,
                           what=f"void: {reserved.what} ({why})", created_utc=_now(),
                           **({"sample_rate": 1.0, "steps": 1} if reserved.mechanism == "gaussian" else {}))
        tx.append([void])
    return void


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
