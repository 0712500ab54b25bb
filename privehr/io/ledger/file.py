"""The privacy ledger file: JSON lines, read and appended under one exclusive lock.

Every change goes through :meth:`Ledger.transaction`, which holds ``flock(LOCK_EX)`` on the ledger file itself while
it reads, decides and appends, so two runs can never both see the budget before either has reserved its spend.
Appends are flushed and fsynced before the lock is released, then the head is rewritten. The file is strict JSON (no
``Infinity``): a non-private release has ``epsilon: null``. Every read verifies the chain and the head
(:mod:`privehr.io.ledger.chain`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from privehr.core.errors import InputError
from privehr.core.strict_json import strict_dumps
from privehr.io import accounting_cache
from privehr.io.ledger.chain import ChainState, LedgerTampered, check_chain
from privehr.io.ledger.layout import LedgerLayout, write_private
from privehr.io.ledger.members import read_snapshots, write_snapshot
from privehr.models.privacy.ledger import LedgerEntry, chain_start, chain_tag, head_tag
from privehr.models.privacy.rdp_filter import BudgetSetting

__all__ = ["Ledger", "read_ledger"]

accounting_cache.install()  # calibrations and compositions outlive the process (public inputs only)


class _Transaction:
    def __init__(self, fh, ledger: "Ledger"):
        self._fh, self._ledger = fh, ledger
        fh.seek(0)
        self._state = ledger._verified(fh.read().splitlines())
        self.entries = self._state.entries

    @property
    def budget(self) -> BudgetSetting | None:
        """The project's per-patient budget as the ledger holds it now (None: no budget set)."""
        return self._state.budget

    def append(self, entries: list[LedgerEntry | BudgetSetting]) -> None:
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
        self.entries += [e for e in entries if isinstance(e, LedgerEntry)]
        state.budgets += [e for e in entries if isinstance(e, BudgetSetting)]


class Ledger:
    """One ledger file (``privacy.ledger_path``) and its secret key (``<ledger>.key``, beside it)."""

    def __init__(self, path: str | Path):
        self.layout = LedgerLayout(path)
        self.path, self.key_path, self.head_path = self.layout.path, self.layout.key, self.layout.head
        self.members_dir = self.layout.members

    def write_members(self, subject_ids: Iterable) -> str:
        """Record a membership snapshot of ``subject_ids`` (:mod:`privehr.io.ledger.members`); return its id, which
        the run's releases cite."""
        return write_snapshot(self.layout, self.key(), subject_ids)

    def members(self, ids: Iterable[str]) -> dict[str, np.ndarray]:
        """The snapshots ``ids``, each checked against its id under the ledger's key."""
        return read_snapshots(self.layout, self._existing_key(), ids)

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
        record = json.dumps({"lines": lines, "tag": last, "mac": head_tag(key, lines, last)}) + "\n"
        write_private(self.head_path, record.encode())

    def _verified(self, lines: list[str]) -> ChainState:
        self.check_modes()
        return check_chain(self.path, lines, self._existing_key(), self._head())

    def check_modes(self) -> None:
        """The ledger, its head, its key and its membership snapshots are owner-only: a key others could read lets them
        re-sign an edited ledger, and a ledger or head others could write is theirs to edit. Any other mode is
        refused, naming the file (``chmod 600``, a directory 700; a key that was readable should be treated as
        leaked)."""
        for path in self.layout.files():
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
        if not write_private(self.key_path, key, exclusive=True):
            return self._existing_key()
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

    def budget(self) -> BudgetSetting | None:
        """The project's per-patient budget (the last budget line; None: none set)."""
        return self.state().budget


def read_ledger(path: str | Path) -> list[LedgerEntry]:
    return Ledger(path).read()
