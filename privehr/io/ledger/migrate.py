"""Chaining, once and on purpose, a ledger no chain vouches for (``privehr privacy ledger --migrate``)."""

from __future__ import annotations

import json
from pathlib import Path

from privehr.core.strict_json import strict_dumps
from privehr.io.ledger.chain import NOT_UTF8, LedgerTampered, LedgerUnreadable, NotUTF8Text, check_chain
from privehr.io.ledger.file import Ledger
from privehr.io.ledger.layout import write_private
from privehr.models.privacy.ledger import LedgerEntry, chain_start, chain_tag

__all__ = ["migrate_ledger"]


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
            check_chain(ledger.path, lines, key, head)
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
            if NOT_UTF8.search(line):
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
        # the lock was on the old file: this command is the steward's, run alone
        write_private(ledger.path, "".join(text).encode())
        ledger._write_head(key, len(entries), previous)
    stamps = sorted(e.created_utc for e in entries if e.created_utc)
    return report | {"chained": len(entries), "datasets": len({e.dataset for e in entries}),
                     "releases": sum(e.status == "released" for e in entries),
                     "first_utc": stamps[0] if stamps else None, "last_utc": stamps[-1] if stamps else None}


