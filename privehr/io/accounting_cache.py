"""Calibrations and compositions kept across processes: one SQLite file, owner-only.

A noise calibration (sigma from epsilon, delta, q and T) costs seconds at q = 0.5, and every process that plans a
release (each run, each subflow, each CLI call, each test worker) used to make it again; so did each composition of
a ledger's history for the budget check, the ledger view and the release card. Both are functions of (epsilon,
delta, q, T) or of (sigma, q, T) histories, kept here keyed by those and
:func:`privehr.models.privacy.accounting.accounting_version`. The keys hold no patient-level value and no dataset id,
but a q can be b / n for an exact training count (the pipeline's budget pre-check plans on the exact counts), so the
store is owner-only and stays inside the hospital, like a run's ``intermediate/``; nothing in it enters a bundle.

* a stored calibration is used only after RDP's epsilon at its sigma is computed again, without the store, and found
  equal and within the target (``models/privacy/accounting.py``), so an edited store cannot weaken a release;
* stored compositions and per-step RDP curves are trusted like the ledger's own files: the store is owner-only (a
  store others may write is not used, and said so once), and ``privehr privacy ledger --verify`` recomposes every
  dataset without it.

Where: ``$PRIVEHR_CACHE_DIR``, else ``$XDG_CACHE_HOME/privehr``, else ``~/.cache/privehr``. A directory that cannot
be made or written leaves this process with its in-memory caches, as before.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from pathlib import Path

from privehr.models.privacy.accounting import use_store_factory

__all__ = ["AccountingCache", "install", "cache_dir", "CACHE_ENV"]

CACHE_ENV = "PRIVEHR_CACHE_DIR"
_log = logging.getLogger("privehr.accounting_cache")


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "privehr"


class AccountingCache:
    """A key-value table per kind ("calibration", "composition") in ``<dir>/accounting.sqlite``."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._local = threading.local()  # one connection per thread and process: a view reads hundreds of curves

    @classmethod
    def open(cls, folder: Path) -> "AccountingCache | None":
        """The cache in ``folder`` (made owner-only), or None where it cannot be used."""
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = folder / "accounting.sqlite"
            if not path.exists():
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
            if (path.stat().st_mode | folder.stat().st_mode) & 0o022 or path.stat().st_uid != os.getuid():
                _log.warning("the accounting cache %s may be written by others; it is not used (chmod 600 it, and 700 "
                             "its folder)", path)
                return None
            cache = cls(path)
            cache._connect().execute("CREATE TABLE IF NOT EXISTS kept (kind TEXT, key TEXT, value TEXT, "
                                     "PRIMARY KEY (kind, key))")
            return cache
        except (OSError, sqlite3.Error):
            return None

    def _connect(self) -> sqlite3.Connection:
        """This thread's connection (autocommit), opened anew in a forked process."""
        local = self._local
        if getattr(local, "pid", None) != os.getpid():
            local.db, local.pid = sqlite3.connect(self.path, timeout=60, isolation_level=None), os.getpid()
        return local.db

    def get(self, kind: str, key: str) -> dict | None:
        try:
            row = self._connect().execute("SELECT value FROM kept WHERE kind = ? AND key = ?", (kind, key)).fetchone()
        except sqlite3.Error:
            return None
        try:
            return json.loads(row[0]) if row else None
        except ValueError:
            return None

    def put(self, kind: str, key: str, value: dict) -> None:
        try:
            self._connect().execute("INSERT OR REPLACE INTO kept VALUES (?, ?, ?)", (kind, key, json.dumps(value)))
        except sqlite3.Error:  # a full disk or a locked file costs the next process a calibration, nothing else
            pass


def install() -> None:
    """Use the cache of :func:`cache_dir` in this process, opened at its first calibration or composition (importing
    :mod:`privehr.io.ledger`, as every task and ledger command does, calls this)."""
    use_store_factory(lambda: AccountingCache.open(cache_dir()))
