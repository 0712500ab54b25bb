"""Accounting per patient: each patient's filter total is the composition of exactly the releases that used them (to
1e-9 against Opacus's RDP composed by hand), a delivery with new patients composes for the others and starts the new
ones from zero, and the membership snapshots are as tamper-evident as the ledger's lines."""

import os

import numpy as np
import pytest

import math

from opacus.accountants.analysis import rdp as opacus_rdp

from privehr.core.errors import InputError
from privehr.io.ledger import (Ledger, LedgerTampered, ledger_patients, ledger_totals, reserve, set_budget,
                               verify_ledger)
from privehr.io.release_bundle import public_entry
from privehr.models.privacy.accounting import DEFAULT_ALPHAS
from privehr.models.privacy.ledger import LedgerEntry, compose_entries, effective_entries
from privehr.models.privacy.patient_accounting import (OUTSIDER, check_patient_budget, entries_of, member_hashes,
                                                       patient_curves, patient_spend, snapshot_id)
from privehr.models.privacy.rdp_filter import BudgetSetting, filter_order
from privehr.models.privacy.release_plan import ReleasePlan

KEY = bytes(range(32))


def _entries(rng) -> tuple[list[LedgerEntry], dict]:
    """Five nights of a growing source (patients admitted and withdrawn), heterogeneous releases, one release citing
    no snapshot, one reservation settled by a release, one non-private release on three patients."""
    snapshots, entries = {}, []
    for night in range(5):
        hashes = member_hashes(range(night * 7, 40 + night * 9), KEY)
        sid = snapshot_id(hashes, KEY)
        snapshots[sid] = hashes
        for k in range(2):
            entries.append(LedgerEntry("s", f"n{night}-{k}", "dp_sgd", noise_multiplier=0.8 + 0.3 * k + 0.05 * night,
                                       sample_rate=float(rng.choice([0.02, 0.1])), steps=int(rng.integers(50, 400)),
                                       delta=1e-5, members=sid))
        entries.append(LedgerEntry("s", f"n{night}-c", "dp", 0.1, members=sid))
        if night == 3:  # a non-private release on three of its patients
            few = member_hashes(range(21, 24), KEY)
            snapshots[snapshot_id(few, KEY)] = few
            entries.append(LedgerEntry("s", "n3-np", "non_private", members=snapshot_id(few, KEY)))
    entries.append(LedgerEntry("s", "all", "gaussian", noise_multiplier=4.0, sample_rate=1.0, steps=1))
    entries.append(LedgerEntry("s", "res", "dp_sgd", noise_multiplier=1.0, sample_rate=0.05, steps=100,
                               status="reserved", members=next(iter(snapshots))))
    entries.append(LedgerEntry("s", "rel", "dp_sgd", noise_multiplier=1.0, sample_rate=0.05, steps=100,
                               reservation="res", members=next(iter(snapshots))))
    return entries, snapshots


def _oracle(entries: list[LedgerEntry], orders: list[float], delta: float) -> float:
    """A patient's epsilon composed by hand: Opacus's RDP of each Gaussian release, min(eps, alpha eps^2 / 2) for a
    pure-DP one, summed per order, then Opacus's conversion (the minimum over ``orders``: one order for a filter)."""
    counted = effective_entries(entries)
    if any(e.guarantee != "dp" for e in counted):
        return math.inf
    if not counted:
        return 0.0
    rdp = np.zeros(len(orders))
    for e in counted:
        if e.mechanism in ("dp_sgd", "gaussian"):
            rdp += opacus_rdp.compute_rdp(q=e.sample_rate, noise_multiplier=e.noise_multiplier, steps=e.steps,
                                          orders=orders)
        else:
            rdp += np.minimum(e.epsilon, np.asarray(orders) * e.epsilon ** 2 / 2)
    return opacus_rdp.get_privacy_spent(orders=orders, rdp=rdp, delta=delta)[0]


def test_each_patients_total_is_the_composition_of_the_releases_that_used_them_by_hand():
    entries, snapshots = _entries(np.random.default_rng(0))
    budget = BudgetSetting(3.0, 1e-5, filter_order(3.0, 1e-5))
    spend = patient_spend(entries, snapshots, 1e-5, budget=budget)
    fresh = patient_spend(entries, snapshots, 1e-5, fresh=True, budget=budget)
    view = patient_spend(entries, snapshots, 1e-5)  # no budget: RDP at the best of every order
    assert len(spend.hashes) == len(np.unique(np.concatenate(list(snapshots.values()))))
    assert np.allclose(spend.epsilon, fresh.epsilon, rtol=1e-12, atol=0)
    for i, h in enumerate(spend.hashes.tolist()):
        mine = entries_of(entries, snapshots, h)
        assert spend.epsilon[i] == pytest.approx(_oracle(mine, [budget.order], 1e-5), rel=1e-9)
        assert view.epsilon[i] == pytest.approx(_oracle(mine, list(DEFAULT_ALPHAS), 1e-5), rel=1e-9) or \
            view.epsilon[i] < _oracle(mine, list(DEFAULT_ALPHAS), 1e-5)  # the large orders beyond Opacus's
        assert view.epsilon[i] <= spend.epsilon[i]  # one fixed order is never below the best one
    assert 0 < np.isinf(spend.epsilon).sum() < len(spend.hashes)  # night 3's non-private release: its patients
    summary = spend.summary(budget_epsilon=float(np.median(spend.epsilon[np.isfinite(spend.epsilon)])))
    assert summary["patients"] == len(spend.hashes) and summary["not_dp"] == np.isinf(spend.epsilon).sum()
    assert summary["median"] > 0 and summary["max"] is None and summary["reached_budget"] > 0  # None: not DP
    # the share of the budget's RDP used passes 1 exactly where the epsilon passes the budget
    assert summary["max_budget_used"] is None and np.array_equal(spend.used <= 1, spend.epsilon <= budget.epsilon)


def test_a_patient_in_every_release_has_the_sources_total_and_one_in_none_the_unsnapshotted_releases():
    entries, snapshots = _entries(np.random.default_rng(1))
    entries = [e for e in entries if e.mechanism != "non_private"]
    everyone = next(iter(snapshots.values()))
    budget = BudgetSetting(3.0, 1e-5, filter_order(3.0, 1e-5))
    curves = patient_curves(entries, snapshots, 1e-5, patients=everyone[:1], budget=budget, outsider=True)
    spend = curves.spend()
    assert spend.hashes[-1] == OUTSIDER  # a patient in no snapshot: only the releases citing none used them
    assert spend.epsilon[-1] == pytest.approx(_oracle([e for e in entries if not e.members], [budget.order], 1e-5))
    assert spend.epsilon[0] <= _oracle(entries, [budget.order], 1e-5) + 1e-9  # in every release: the source's


def _plan():
    return ReleasePlan.for_epochs(1000, batch_size=100, epochs=1, target_epsilon=1.0, delta=1e-5).ledger_entry(
        "dp", "final fit")


def test_deliveries_compose_for_the_patients_in_both_whatever_source_they_name_and_new_ones_start_from_zero(tmp_path):
    ledger = Ledger(tmp_path / "ledger.jsonl")
    night1, night2 = ledger.write_members(range(100)), ledger.write_members(range(50, 200))
    reserve(ledger, "src", "night-1", {"fit": _plan()}, None, 1e-5, False, "grid release(s)", members=night1)
    one = ledger_patients(ledger.path)["max"]
    # night 2 names another source (a new dataset_id, a copy, another path): a label, the same patients
    reserve(ledger, "src-v2", "night-2", {"fit": _plan()}, None, 1e-5, False, "grid release(s)", members=night2)
    entries = ledger.read()
    snapshots = ledger.members({night1, night2})
    spend = patient_spend(entries, snapshots, 1e-5)
    by = dict(zip(spend.hashes.tolist(), spend.epsilon))
    key = ledger.key()
    only1, both, only2 = (by[int(member_hashes([s], key)[0])] for s in (0, 70, 150))
    assert only1 == pytest.approx(one, rel=1e-9) and only2 == pytest.approx(only1, rel=1e-9)
    assert both > 1.2 * only1  # composed across the two sources, not reset by the new name
    everyone = ledger_patients(ledger.path, budget_epsilon=1.2 * one)
    assert everyone == everyone | {"patients": 200, "reached_budget": 50, "snapshots": 2, "max": both}
    assert everyone["most_spent"]["epsilon_prv"] <= everyone["most_spent"]["epsilon"]
    src, v2 = ledger_totals(ledger.path)
    assert (src.patients["patients"], v2.patients["patients"]) == (100, 150)
    assert src.patients["max"] == v2.patients["max"] == pytest.approx(both)  # one total per patient in every view
    # the steward's budget binds per patient, at its one order: above two nights' spend at that order, below three
    at = BudgetSetting(3.0, 1e-5, 8.0)
    two = patient_spend(entries, snapshots, 1e-5, budget=at).epsilon.max()
    three = patient_curves(entries, snapshots, 1e-5, budget=at).plus([_plan()]).epsilon.max()
    set_budget(ledger.path, (two + three) / 2, order=8.0)
    before = ledger.read()
    with pytest.raises(InputError, match="patients of this run would pass it") as refused:
        reserve(ledger, "src-v3", "night-3", {"fit": _plan()}, None, 1e-5, False, "grid release(s)", members=night2)
    assert "nothing was reserved" in str(refused.value) and "Renyi filter at order 8" in str(refused.value)
    assert refused.value.verdict.over == 50 and refused.value.verdict.patients == 150  # the 50 in both nights
    assert "50" not in str(refused.value) and "150" not in str(refused.value)  # no count in the message
    with pytest.raises(InputError, match="asks for a per-patient budget of epsilon 9"):  # another budget: refused
        reserve(ledger, "src", "night-3", {"fit": _plan()}, 9.0, 1e-5, False, "grid release(s)", members=night2)
    assert ledger.read() == before
    # the releases cite the snapshot of the patients they used; a bundle never carries it
    assert {e.members for e in entries} == {night1, night2} and "members" not in public_entry(entries[0])
    assert verify_ledger(ledger.path) | {"ok": True, "patients": 200} == verify_ledger(ledger.path)


def test_check_patient_budget_names_the_most_spent_patient():
    hashes = member_hashes(range(10), KEY)
    sid = snapshot_id(hashes, KEY)
    planned = [LedgerEntry(**{**_plan().as_dict(), "dataset": "s", "release": "p", "status": "reserved",
                              "members": sid})]
    budget = BudgetSetting(0.5, 1e-5, filter_order(0.5, 1e-5))
    verdict = check_patient_budget([], planned, {sid: hashes}, hashes, budget, 1e-5)
    assert verdict.refused and verdict.over == 10 and verdict.patients == 10
    assert verdict.after == pytest.approx(patient_spend(planned, {sid: hashes}, 1e-5, budget=budget).epsilon.max())


def test_a_snapshot_edited_deleted_or_left_readable_is_refused(tmp_path):
    ledger = Ledger(tmp_path / "ledger.jsonl")
    sid = ledger.write_members(range(30))
    reserve(ledger, "src", "run", {"fit": _plan()}, None, 1e-5, False, "grid release(s)", members=sid)
    path = ledger.members_dir / f"{sid}.u64"
    assert (path.stat().st_mode & 0o777, ledger.members_dir.stat().st_mode & 0o777) == (0o600, 0o700)
    original = path.read_bytes()
    shrunk = original[8:]  # one patient removed from the snapshot: their spend would vanish
    path.write_bytes(shrunk)
    with pytest.raises(LedgerTampered, match="does not match its id"):
        ledger_totals(ledger.path)
    assert not verify_ledger(ledger.path)["ok"]
    path.unlink()
    with pytest.raises(LedgerTampered, match="is missing"):
        ledger_totals(ledger.path)
    path.write_bytes(original)
    os.chmod(path, 0o644)
    with pytest.raises(InputError, match="not owner-only"):
        ledger_totals(ledger.path)
    os.chmod(path, 0o600)
    os.chmod(ledger.members_dir, 0o755)
    with pytest.raises(InputError, match="chmod 700"):
        ledger_totals(ledger.path)
    os.chmod(ledger.members_dir, 0o700)
    assert ledger_totals(ledger.path)[0].patients["patients"] == 30


def test_the_view_skips_prv_and_pld_beyond_its_limit_of_distinct_mechanisms_and_says_so(tmp_path, monkeypatch, capsys):
    import privehr.io.ledger as io_ledger
    from privehr.cli import main

    ledger = Ledger(tmp_path / "ledger.jsonl")
    sid = ledger.write_members(range(20))
    for n in (1000, 1100, 1200):  # a growing database: a new q, a new mechanism, each night
        plan = ReleasePlan.for_epochs(n, batch_size=100, epochs=1, target_epsilon=1.0, delta=1e-5)
        reserve(ledger, "src", f"night-{n}", {"fit": plan.ledger_entry("dp", "final fit")}, None, 1e-5, False,
                "grid release(s)", members=sid)
    entries = ledger.read()
    capped, full = compose_entries(entries, 1e-5, max_distinct=2), compose_entries(entries, 1e-5)
    assert capped.epsilon_dp_prv is None and capped.epsilon_dp_pld is None and capped.distinct_mechanisms == 3
    assert capped.epsilon_dp_rdp == pytest.approx(full.epsilon_dp_rdp, rel=1e-12) and full.epsilon_dp_pld is not None
    assert compose_entries(entries, 1e-5, max_distinct=2).epsilon_dp_pld is not None  # stored now: shown
    monkeypatch.setattr(io_ledger, "VIEW_MAX_DISTINCT", 2)
    view = ["privacy", "ledger", "--ledger", str(ledger.path), "--delta", "1e-6"]  # a delta not composed yet
    assert main(view) == 0
    assert "PRV and PLD not composed: 3 distinct mechanisms, more than 2 (--all-accountants" in capsys.readouterr().out
    assert main(view + ["--all-accountants"]) == 0
    assert "not composed" not in capsys.readouterr().out


def test_a_runs_plan_added_to_the_composed_past_equals_composing_everything_again():
    entries, snapshots = _entries(np.random.default_rng(2))
    entries = [e for e in entries if e.mechanism != "non_private"]
    patients = np.unique(np.concatenate(list(snapshots.values())))[::2]
    run = snapshot_id(patients, KEY)
    planned = [LedgerEntry(**{**_plan().as_dict(), "dataset": "s", "release": f"p{i}", "status": "reserved",
                              "members": run}) for i in range(3)]
    whole = patient_spend(entries + planned, {**snapshots, run: patients}, 1e-5, patients=patients)
    added = patient_curves(entries, snapshots, 1e-5, patients=patients).plus(planned)
    assert np.allclose(added.epsilon, whole.epsilon, rtol=1e-12, atol=0)
    half = patient_curves(entries, snapshots, 1e-5, patients=patients).select(np.arange(len(patients)) % 2 == 0)
    assert np.array_equal(half.spend().epsilon, patient_spend(entries, snapshots, 1e-5, patients=patients[::2]).epsilon)


def test_releases_citing_no_snapshot_count_for_every_patient_and_a_cut_or_voided_snapshot_is_handled(tmp_path):
    ledger = Ledger(tmp_path / "ledger.jsonl")
    old = "subjects-hmac:" + "ab" * 32  # a delivery's id before sources existed: its releases cite no snapshot
    reserve(ledger, old, "old-run", {"fit": _plan()}, None, 1e-5, False, "grid release(s)")
    sid = ledger.write_members(range(10))
    # a reservation whose snapshot is gone, settled by a void (a resumed run): the view does not need it
    gone = ledger.write_members(range(5, 8))
    reserve(ledger, "path:/data/x.h5", "r", {"fit": _plan()}, None, 1e-5, False, "x", members=gone)
    reserve(ledger, "path:/data/x.h5", "r", {"fit": _plan()}, None, 1e-5, True, "x", members=sid)  # voids it
    (ledger.members_dir / f"{gone}.u64").unlink()
    (source,) = [t for t in ledger_totals(ledger.path) if t.dataset == "path:/data/x.h5"]
    assert source.patients["patients"] == 10
    # the old release is charged to everyone: with it, two plans are each patient's spend, and a budget below three
    # refuses a third for the snapshot's patients, and for a release citing none (an id-less table: anyone)
    at = BudgetSetting(3.0, 1e-5, 8.0)
    entries, snapshots = ledger.read(), ledger.members({sid})
    two = patient_spend(entries, snapshots, 1e-5, budget=at)
    assert np.allclose(two.epsilon, two.epsilon[0])  # every patient: the old release and their own
    three = patient_curves(entries, snapshots, 1e-5, budget=at).plus([_plan()]).epsilon.max()
    set_budget(ledger.path, (two.epsilon[0] + three) / 2, order=8.0)
    for members in (sid, None):
        with pytest.raises(InputError, match="would pass it"):  # the upgrade resets no budget
            reserve(ledger, "path:/data/x.h5", "new-run", {"fit": _plan()}, None, 1e-5, False, "grid release(s)",
                    members=members)
    path = ledger.members_dir / f"{sid}.u64"
    path.write_bytes(path.read_bytes()[:-3])  # cut mid-hash
    with pytest.raises(LedgerTampered, match="is cut"):
        ledger_totals(ledger.path)
