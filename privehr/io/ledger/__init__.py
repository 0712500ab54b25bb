"""The privacy ledger: one hash-chained file of every release, its side files, and the budget check.

Split by job: :mod:`~privehr.io.ledger.layout` (where the hospital's side files are, and the one owner-only writer),
:mod:`~privehr.io.ledger.chain` (the hash chain and head, checked), :mod:`~privehr.io.ledger.file` (the file under
its lock, the key), :mod:`~privehr.io.ledger.members` (membership snapshots), :mod:`~privehr.io.ledger.views` (each
source's and patient's totals, verification), :mod:`~privehr.io.ledger.reservations` (reserve, release, void),
:mod:`~privehr.io.ledger.budget` (the project's budget, kept in the ledger) and :mod:`~privehr.io.ledger.migrate`. How to read a ledger: docs/privacy-ledger.md.
"""

import importlib

#: each name of the interface and the module it lives in: imported when first asked for, so that a light command
#: reading one side file (``bundle_signature`` reads the layout) does not load the accountants
_WHERE = {"ChainState": "chain", "LedgerTampered": "chain", "LedgerUnreadable": "chain",
          "Ledger": "file", "read_ledger": "file", "LedgerLayout": "layout", "write_private": "layout",
          "migrate_ledger": "migrate", "BudgetExceeded": "reservations", "record_release": "reservations",
          "release_id": "reservations", "reserve": "reservations", "void_open_reservations": "reservations",
          "void_reservation": "reservations", "held_to": "budget", "ledger_delta": "budget", "set_budget": "budget",
          "VIEW_MAX_DISTINCT": "views", "ledger_patients": "views", "ledger_totals": "views",
          "short_dataset": "views", "source_patients": "views", "verify_ledger": "views"}

__all__ = [*_WHERE, "PatientVerdict"]


def __getattr__(name: str):
    if name == "PatientVerdict":
        from privehr.models.privacy.patient_accounting import PatientVerdict
        return PatientVerdict
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value  # once
    return value
