"""The hospital's side files of a privacy ledger, named in one place, and the one way they are written.

Beside ``<ledger>`` (``privacy.ledger_path``) live its secret key, the head of its hash chain, the membership
snapshots its releases cite, the hospital's signing key and the signers ``predict`` trusts. Every one of them is
owner-only and written by :func:`write_private`: a temporary file in the same directory (0600, ``O_EXCL``), flushed
and fsynced, then moved into place atomically (``exclusive``: linked, never over a file another process made first).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LedgerLayout", "write_private"]


@dataclass(frozen=True)
class LedgerLayout:
    """Where a ledger's files are. ``path`` is the ledger itself (JSON lines)."""

    path: Path

    def __init__(self, path: str | os.PathLike):
        object.__setattr__(self, "path", Path(path))

    def _beside(self, suffix: str) -> Path:
        return self.path.with_name(self.path.name + suffix)

    key = property(lambda self: self._beside(".key"),
                   doc="32 random bytes: the chain's MAC key and the keyed hashes of subject ids")
    head = property(lambda self: self._beside(".head"),
                    doc="the number of lines and the last tag, under the key (lines cut from the end are found)")
    members = property(lambda self: self._beside(".members"), doc="the membership snapshots (<id>.u64), a directory")
    signing_key = property(lambda self: self._beside(".signing-key"),
                           doc="the hospital's Ed25519 key that signs every release bundle")
    trusted_signers = property(lambda self: self._beside(".trusted-signers"),
                               doc="the signers' fingerprints predict trusts beyond the hospital's own (JSON)")

    def files(self) -> tuple[Path, ...]:
        """Every owner-only file and directory of the ledger (checked by :meth:`Ledger.check_modes`)."""
        return self.path, self.head, self.key, self.members


def write_private(path: Path, data: bytes, exclusive: bool = False) -> bool:
    """Write ``data`` to ``path`` owner-only and atomically; return whether it was written (``exclusive``: False when
    another process made ``path`` first, which is then kept)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    try:
        if not exclusive:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)  # atomic, and never over a file another process made
        except FileExistsError:
            return False
        return True
    finally:
        tmp.unlink(missing_ok=True)
