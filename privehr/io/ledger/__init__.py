"""The privacy ledger: one hash-chained file of every release, its side files, and the budget check.

Split by job: :mod:`~privehr.io.ledger.layout` (where the hospital's side files are, and the one owner-only writer),
:mod:`~privehr.io.ledger.chain` (the hash chain and head, checked), :mod:`~privehr.io.ledger.file` (the file under
its lock, the key), :mod:`~privehr.io.ledger.members` (membership snapshots), :mod:`~privehr.io.ledger.views` (each
source's and patient's totals, verification), :mod:`~privehr.io.ledger.reservations` (reserve, release, void),
:mod:`~privehr.io.ledger.budget` (the project's budget, kept in the ledger) and :mod:`~privehr.io.ledger.migrate`. How to read a ledger: docs/privacy-ledger.md.
"""

from privehr.io import accounting_cache
from privehr.io.ledger.chain import ChainState, LedgerTampered, LedgerUnreadable
from privehr.io.ledger.file import Ledger, read_ledger
from privehr.io.ledger.layout import LedgerLayout, write_private
from privehr.io.ledger.migrate import migrate_ledger
from privehr.io.ledger.reservations import (BudgetExceeded, record_release, release_id, reserve, void_open_reservations,
                                            void_reservation)
from privehr.io.ledger.budget import held_to, ledger_delta, set_budget
from privehr.io.ledger.views import (VIEW_MAX_DISTINCT, ledger_patients, ledger_totals, short_dataset, source_patients,
                                     verify_ledger)
from privehr.models.privacy.patient_accounting import PatientVerdict

accounting_cache.install()  # calibrations and compositions outlive the process (public inputs only)

__all__ = ["Ledger", "read_ledger", "ledger_totals", "ledger_patients", "ledger_delta", "reserve", "record_release",
           "release_id", "BudgetExceeded", "short_dataset", "LedgerTampered", "LedgerUnreadable", "ChainState",
           "verify_ledger", "migrate_ledger", "source_patients", "PatientVerdict", "VIEW_MAX_DISTINCT",
           "void_reservation", "void_open_reservations", "LedgerLayout", "write_private", "set_budget",
           "held_to"]
