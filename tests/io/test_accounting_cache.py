"""The accounting cache: a calibration or a composition made in one process is used by the next, equal to what it
would compute; an edited store cannot weaken a release; a store others may write is not used."""

import json
import sqlite3
from dataclasses import asdict

import pytest

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
    calibrate_noise_multiplier.cache_clear()
    accounting._compose.cache_clear()


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
