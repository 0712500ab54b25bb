"""The ledger's hash chain, checked: every line parsed, its tag and the head verified under the ledger's key.

Every line written carries ``seq`` (its line number) and ``chain``, an HMAC under the ledger's key of its content and
the previous line's tag (``privehr.models.privacy.ledger.chain_tag``); ``<ledger>.head`` holds the number of lines and
the last tag under the same key. :func:`check_chain` raises :class:`LedgerTampered` naming the first line found wrong:
an edited, deleted, reordered, inserted or cut line, or a replaced key. An older ledger's unchained lines are read as
they are and the chain starts from their last line (its first tag covers their bytes).
"""

from __future__ import annotations

import hmac
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from privehr.core.errors import InputError
from privehr.models.privacy.ledger import CHAIN_FIELDS, LedgerEntry, chain_start, chain_tag, head_tag
from privehr.models.privacy.rdp_filter import BUDGET_KIND, BudgetSetting

__all__ = ["ChainState", "LedgerTampered", "LedgerUnreadable", "NotUTF8Text", "check_chain", "NOT_UTF8"]


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
    budgets: list[BudgetSetting] = field(default_factory=list)  # the budget lines, in order (the last one holds)

    @property
    def budget(self) -> BudgetSetting | None:
        """The project's per-patient budget: the last budget line (None: no budget set)."""
        return self.budgets[-1] if self.budgets else None


class LedgerUnreadable(InputError):
    """A line that is not an entry (a partial last line after a crash, or a cut file)."""

    def __init__(self, path: Path, line: int, err: Exception):
        super().__init__(f"the privacy ledger {path} has an unreadable line {line} ({type(err).__name__}); a crash "
                         "while writing leaves a partial last line. Nothing is read or trained until it is repaired: "
                         "keep a copy, then remove or complete that line.")
        self.line, self.why = line, f"the line is not a ledger entry ({type(err).__name__})"


NOT_UTF8 = re.compile("[\udc80-\udcff]")  # bytes that are not UTF-8, as the ledger's files are read


class NotUTF8Text(ValueError):
    """A ledger line holding bytes that are not UTF-8 text."""


def check_chain(path: Path, lines: list[str], key: bytes | None, head: dict | None) -> ChainState:
    """Parse every line and verify the chain and the head; raise :class:`LedgerTampered` naming the first bad line."""
    entries, budgets, unchained, tags, previous = [], [], [], {}, None
    head_ok = head is None or key is None or hmac.compare_digest(
        str(head.get("mac", "")), head_tag(key, int(head.get("lines", -1)), str(head.get("tag", ""))))
    for number, line in enumerate(lines, 1):
        if NOT_UTF8.search(line):
            raise LedgerUnreadable(path, number, NotUTF8Text())
        if not line.strip():
            if previous is None:
                unchained.append(line)
                continue
            raise LedgerTampered(path, number, "the line is empty (an entry was blanked)")
        try:
            raw = json.loads(line)
            content = {k: v for k, v in raw.items() if k not in CHAIN_FIELDS}
            entry = (BudgetSetting if content.get("kind") == BUDGET_KIND else LedgerEntry).from_dict(content)
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
        (budgets if isinstance(entry, BudgetSetting) else entries).append(entry)
    total = len(lines)
    if (entries or budgets) and not tags:  # no chained line vouches for these: a pre-chain ledger, or one stripped of its chain
        raise LedgerTampered(path, 1, f"none of its {len(entries)} entries carries a chain tag (a ledger written before "
                                      "privehr chained its ledger, or one whose chain fields were stripped); check them "
                                      "against your records, then chain them once with `privehr privacy ledger "
                                      "--migrate`")
    if head is None:
        if key is not None:
            raise LedgerTampered(path, None, f"{path.name}.head, which records the ledger's length, is missing (deleted, "
                                             "or the ledger was emptied)")
        return ChainState(entries, total, len(unchained), None, budgets=budgets)
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
    return ChainState(entries, total, len(unchained), previous, head_lag=total - recorded, budgets=budgets)


