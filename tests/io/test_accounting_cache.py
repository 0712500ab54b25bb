"""The accounting cache: a calibration or a composition made in one process is used by the next, equal to what it
would compute; an edited store cannot weaken a release; a store others may write is not used."""

import json
import sqlite3
from dataclasses import asdict

import pytest

from privehr.core.errors import InputError
from privehr.io.accounting_cache import AccountingCache
from privehr.models.privacy import accounting
from privehr.models.privacy.accounting import (calibrate_noise_multiplier, compose_history, recompose_history,
                                               use_store)

CASE = (1.0, 1e-5, 1 / 16, 80)  # a small-q DP-SGD plan: calibrated in under a second
HISTORY = [(2.5, 1 / 16, 80), (1.3, 0.05, 200), (6.7, 0.5, 10)]


@pytest.fixture()
def store(tmp_path):
    """A fresh store, and no in-process memo between the 'processes' of a test."""
    cache = AccountingCache.open(tmp_path / "cache")
    previous = use_store(cache)
    for cached in (calibrate_noise_multiplier, accounting._compose, accounting._rdp_step_stored,
                   accounting._rdp_step_computed):
        cached.cache_clear()
    yield cache
    use_store(previous)
    for cached in (calibrate_noise_multiplier, accounting._compose, accounting._rdp_step_stored):
        cached.cache_clear()  # what this store held (an edited one, in some tests) is not the next test's


def _rows(cache: AccountingCache, kind: str) -> list[tuple[str, dict]]:
    with sqlite3.connect(cache.path) as db:
        return [(k, json.loads(v)) for k, v in db.execute("SELECT key, value FROM kept WHERE kind = ?", (kind,))]


def test_a_calibration_is_made_once_for_every_process_and_is_the_same(store, monkeypatch):
    first = calibrate_noise_multiplier(*CASE)
    (key, kept), = _rows(store, "calibration")
    assert kept == asdict(first) and "1e-05" in key  # public inputs only
    calibrate_noise_multiplier.cache_clear()  # the next process
    monkeypatch.setattr(accounting, "_calibrate", lambda *a: pytest.fail("calibrated again"))
    assert calibrate_noise_multiplier(*CASE) == first


def test_an_edited_calibration_is_not_used(store):
    honest = calibrate_noise_multiplier(*CASE)
    (key, kept), = _rows(store, "calibration")
    forged = kept | {"noise_multiplier": kept["noise_multiplier"] / 2}  # half the noise, the same claims
    store.put("calibration", key, forged)
    for orders in (tuple(accounting.DEFAULT_ALPHAS), tuple(accounting.RDP_ORDERS)):  # and its RDP curve
        store.put("rdp_step", accounting._stored_key(forged["noise_multiplier"], CASE[2], list(orders)),
                  {"rdp": [1e-9] * len(orders)})  # forged too: the check computes RDP itself
    calibrate_noise_multiplier.cache_clear()
    again = calibrate_noise_multiplier(*CASE)
    assert again.noise_multiplier == honest.noise_multiplier and again.epsilon_rdp <= CASE[0]
    store.put("calibration", key, kept | {"epsilon_rdp": kept["epsilon_rdp"] / 2})  # a claim edited, sigma kept
    calibrate_noise_multiplier.cache_clear()
    assert calibrate_noise_multiplier(*CASE).epsilon_rdp == honest.epsilon_rdp


def test_a_stored_composition_equals_the_full_recomposition(store):
    composed = compose_history(HISTORY, 1e-5, eps_error=0.01)
    accounting._compose.cache_clear()
    assert compose_history(list(reversed(HISTORY)), 1e-5, eps_error=0.01) == composed  # one key for every order
    assert len(_rows(store, "composition")) == 1
    again = recompose_history(HISTORY, 1e-5, eps_error=0.01)
    for field in ("prv", "rdp", "pld"):
        assert getattr(composed, field) == pytest.approx(getattr(again, field), rel=1e-9, abs=1e-9)


def test_a_store_others_may_write_is_not_used(tmp_path):
    folder = tmp_path / "cache"
    assert AccountingCache.open(folder) is not None
    (folder / "accounting.sqlite").chmod(0o666)
    assert AccountingCache.open(folder) is None
    (folder / "accounting.sqlite").chmod(0o600)
    folder.chmod(0o777)
    assert AccountingCache.open(folder) is None


def test_rdp_curves_scaled_in_the_store_change_no_admission(store, tmp_path):
    """Issue 54.3: the store is unkeyed and shared by every project of the user; curves scaled by 1e-3 in it let a run
    train exhausted patients. Admission now computes every curve itself: the scaled store changes what a view shows
    (and `--verify` says so), never who is admitted."""
    from privehr.io.ledger import Ledger, ledger_patients, reserve, set_budget, verify_ledger
    from privehr.models.privacy.patient_accounting import patient_curves, patient_spend
    from privehr.models.privacy.rdp_filter import BudgetSetting
    from privehr.models.privacy.release_plan import ReleasePlan

    ledger = Ledger(tmp_path / "ledger.jsonl")
    sid = ledger.write_members(range(50))
    plan = ReleasePlan.for_epochs(1000, batch_size=100, epochs=1, target_epsilon=1.0, delta=1e-5).ledger_entry(
        "dp", "final fit")
    reserve(ledger, "src", "night-1", {"fit": plan}, None, 1e-5, False, "grid release(s)", members=sid)
    at = BudgetSetting(3.0, 1e-5, 8.0)
    entries, snapshots = ledger.read(), ledger.members({sid})
    one = patient_spend(entries, snapshots, 1e-5, fresh=True, budget=at).epsilon.max()
    two = patient_curves(entries, snapshots, 1e-5, fresh=True, budget=at).plus([plan]).epsilon.max()
    set_budget(ledger.path, (one + two) / 2, order=8.0)  # room for one run, not two
    honest = ledger_patients(ledger.path)["max"]  # a view: the store now holds the ledger's per-step curves
    rows = _rows(store, "rdp_step")
    assert rows and honest == pytest.approx(one)
    for key, kept in rows:
        store.put("rdp_step", key, {"rdp": [v * 1e-3 for v in kept["rdp"]]})
    accounting._rdp_step_stored.cache_clear()
    assert ledger_patients(ledger.path)["max"] < honest  # the view reads the store: it shows less ...
    assert not verify_ledger(ledger.path)["ok"]  # ... and --verify, which recomputes, says the cache is damaged
    before = ledger.read()
    with pytest.raises(InputError, match="would pass it") as refused:  # admission: as if the store were honest
        reserve(ledger, "src", "night-2", {"fit": plan}, None, 1e-5, False, "grid release(s)", members=sid)
    assert refused.value.verdict.over == 50
    assert ledger.read() == before
