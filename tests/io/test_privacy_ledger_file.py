"""The ledger file under attack and accident: one delta per dataset, no release without its reservation,
a damaged line fails closed, a resume voids only its own reservations, and the key stays private."""

import stat

import pytest

from privehr.models.privacy.release_plan import ReleasePlan
from privehr.core.errors import InputError
from privehr.io.ledger import Ledger, ledger_totals, read_ledger, record_release, reserve

PLAN = ReleasePlan.for_epochs(1000, batch_size=100, epochs=2, target_epsilon=1.0, delta=1e-5)


def _reserve(ledger, run, delta=1e-5, resume=False, budget=None):
    plan = PLAN if delta == 1e-5 else ReleasePlan.for_epochs(1000, 100, 2, target_epsilon=1.0, delta=delta)
    return reserve(Ledger(ledger), "d1", run, {"fit": plan.ledger_entry("dp", "final fit")}, budget, delta, resume,
                   "release(s)")[0]["fit"]


def test_one_dataset_has_one_delta(tmp_path):
    """Composed at a larger delta, the same spend looks smaller: a run may not pick its own."""
    ledger = tmp_path / "ledger.jsonl"
    _reserve(ledger, "run-a")
    with pytest.raises(InputError, match="composed at delta 1e-05; this run asks for delta 0.01"):
        _reserve(ledger, "run-b", delta=1e-2)
    assert len(read_ledger(ledger)) == 1


def test_a_release_without_its_reservation_is_refused(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    _reserve(ledger, "run-a")
    with pytest.raises(RuntimeError, match="not in the privacy ledger.*discarded"):
        record_release(ledger, "run-a/fit#0000000000000000", PLAN.ledger_entry("dp", "final fit"))
    assert [e.status for e in read_ledger(ledger)] == ["reserved"]


def test_a_damaged_ledger_fails_closed_and_says_which_line(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    _reserve(ledger, "run-a")
    with open(ledger, "a") as fh:
        fh.write('{"dataset": "d1", "release": "half-wri')  # a crash in the middle of an append
    with pytest.raises(InputError, match="unreadable line 2.*Nothing is read or trained until it is repaired"):
        _reserve(ledger, "run-b")
    with pytest.raises(InputError, match="unreadable line 2"):
        ledger_totals(ledger)


def test_a_resume_voids_only_its_own_unsettled_reservations(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    crashed = _reserve(ledger, "artifacts/nightly#aaaa")  # the crashed attempt of this run
    _reserve(ledger, "artifacts/nightly#bbbb")  # same path, another checkout: another run, still training
    done = _reserve(ledger, "artifacts/nightly#aaaa")
    record_release(ledger, done, PLAN.ledger_entry("dp", "final fit"))  # a release: never voided
    _reserve(ledger, "artifacts/nightly#aaaa", resume=True)
    voided = [e.reservation for e in read_ledger(ledger) if e.status == "void"]
    assert voided == [crashed]
    (total,) = ledger_totals(ledger)
    assert total.releases == 1 and total.pending == 2  # the other run's and the resumed run's new reservation


def test_the_key_is_created_once_owner_only(tmp_path):
    ledger = Ledger(tmp_path / "ledger.jsonl")
    ledger.check_writable()
    key = ledger.key()
    assert len(key) == 32 and ledger.key() == key
    assert stat.S_IMODE(ledger.key_path.stat().st_mode) == 0o600
    ledger.key_path.write_bytes(b"short")
    with pytest.raises(InputError, match="damaged"):
        ledger.key()
