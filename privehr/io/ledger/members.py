"""Membership snapshots: which patients a run's releases could touch, as keyed hashes beside the ledger.

A snapshot is the sorted keyed hashes of a run's subjects (``models/privacy/patient_accounting.py``), stored as
``<ledger>.members/<id>.u64`` (owner-only), where its id is the HMAC of its bytes under the ledger's key: two runs on
the same patients share one snapshot, and a snapshot edited, swapped or deleted no longer matches the id its releases
cite (chained in the ledger), which is tampering, as a missing line would be.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

import numpy as np

from privehr.core.errors import InputError
from privehr.io.ledger.chain import LedgerTampered
from privehr.io.ledger.layout import LedgerLayout, write_private
from privehr.models.privacy.patient_accounting import member_hashes, snapshot_bytes, snapshot_from_bytes, snapshot_id

__all__ = ["write_snapshot", "read_snapshots"]

_VERIFIED: dict[tuple, np.ndarray] = {}  # verified snapshots by (path, mtime, size): read once per process


def write_snapshot(layout: LedgerLayout, key: bytes, subject_ids: Iterable) -> str:
    """Record a snapshot of ``subject_ids``; return its id (content-addressed: the same patients, written once)."""
    hashes = member_hashes(subject_ids, key)
    sid = snapshot_id(hashes, key)
    target = layout.members / f"{sid}.u64"
    if not target.exists():
        layout.members.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(target, snapshot_bytes(hashes))
    return sid


def read_snapshots(layout: LedgerLayout, key: bytes | None, ids: Iterable[str]) -> dict[str, np.ndarray]:
    """The snapshots ``ids``, each checked against its id under ``key``: a missing, edited or swapped one raises
    :class:`LedgerTampered`, one others may read or write :class:`InputError`."""
    found = {}
    for sid in ids:
        path = layout.members / f"{sid}.u64"
        try:
            stat = path.stat()
            cached = _VERIFIED.get((str(path), stat.st_mtime_ns, stat.st_size))
            if cached is None:
                if stat.st_mode & 0o077:
                    raise InputError(f"the privacy ledger's {path} has mode {stat.st_mode & 0o777:04o}, not "
                                     f"owner-only; nothing was read or trained. Run `chmod 600 {path}`.")
                raw = path.read_bytes()
                if len(raw) % 8:
                    raise LedgerTampered(layout.path, None, f"membership snapshot {sid[:12]} is cut (not whole "
                                                            "8-byte hashes)")
                hashes = snapshot_from_bytes(raw)
                if key is None or not hmac.compare_digest(snapshot_id(hashes, key), sid):
                    raise LedgerTampered(layout.path, None, f"membership snapshot {sid[:12]} does not match its id "
                                                            "(edited or swapped)")
                cached = _VERIFIED[(str(path), stat.st_mtime_ns, stat.st_size)] = hashes
        except FileNotFoundError:
            raise LedgerTampered(layout.path, None, f"membership snapshot {sid[:12]}, cited by its releases, is "
                                                    f"missing from {layout.members.name}") from None
        found[sid] = cached
    return found
