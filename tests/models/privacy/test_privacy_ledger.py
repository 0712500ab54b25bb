import math

import pytest
from opacus.accountants import PRVAccountant

from privehr.models.privacy.accounting import epsilon_spent
from privehr.models.privacy.ledger import LedgerEntry, compose_entries, dataset_id_of
from privehr.models.privacy.patient_accounting import check_patient_budget, member_hashes, snapshot_id
from privehr.models.privacy.rdp_filter import BudgetSetting, filter_order


def _sgd(sigma, q, steps, release, **kw):
    spend = epsilon_spent(sigma, q, steps, 1e-5)
    return LedgerEntry("d1", release, "dp_sgd", spend.epsilon, 1e-5, sigma, q, steps, **kw)


def test_two_dp_sgd_releases_compose_like_one_longer_run():
    a, b = _sgd(1.2, 0.05, 300, "m1"), _sgd(1.2, 0.05, 500, "m2")
    total = compose_entries([a, b], delta=1e-5)
    by_hand = PRVAccountant()
    by_hand.history = [(1.2, 0.05, 800)]  # the same mechanism for 300 + 500 steps
    assert total.epsilon_dp_prv == pytest.approx(by_hand.get_epsilon(1e-5, eps_error=0.01), rel=0.02)
    assert total.epsilon_dp_prv < a.epsilon + b.epsilon  # tighter than basic composition
    assert total.epsilon_dp_rdp >= total.epsilon_dp_pld  # PLD (an upper bound) is tighter than RDP
    assert abs(total.epsilon_dp_pld - total.epsilon_dp_prv) < 0.05
    assert total.dp and total.epsilon == total.epsilon_dp == total.epsilon_dp_prv and total.delta == 1e-5


def test_other_mechanisms_basic_composition_and_releases_without_a_guarantee():
    entries = [_sgd(2.0, 0.1, 100, "m1"),
               LedgerEntry("d1", "synthetic-1", "dp", 0.5, 1e-6),
               LedgerEntry("d1", "synthetic-2", "dp", 0.25, 2e-6)]
    total = compose_entries(entries)
    assert total.epsilon_other_basic == pytest.approx(0.75) and total.delta_other == pytest.approx(3e-6)
    assert total.dp and total.epsilon == pytest.approx(total.epsilon_dp_prv)
    assert total.epsilon_dp_prv == pytest.approx(epsilon_spent(2.0, 0.1, 100, 1e-5).epsilon_prv + 0.75, rel=0.01)
    assert total.delta == pytest.approx(1e-5 + 3e-6)
    for unproven in (LedgerEntry("d1", "expm-1", "expm_nf", 1.0), LedgerEntry("d1", "base", "non_private"),
                     _sgd(2.0, 0.1, 100, "seeded", guarantee="reproducible")):
        mixed = compose_entries(entries + [unproven])
        assert not mixed.dp and mixed.epsilon is None and mixed.guarantee == "not DP"  # never a number
        assert mixed.epsilon_dp == pytest.approx(total.epsilon_dp)  # the DP-only total, beside it
        assert sum(mixed.not_dp.values()) == 1
    mixed = compose_entries(entries + [LedgerEntry("d1", "expm-1", "expm_nf", 1.0)])
    assert mixed.unproven_epsilon_tilde == [1.0]


def test_a_mixed_ledger_of_expm_nf_reproducible_and_dp_sgd_releases():
    entries = [_sgd(1.0, 0.05, 200, f"dp{i}") for i in range(3)]
    entries += [_sgd(1.0, 0.05, 200, "rep", guarantee="reproducible"), LedgerEntry("d1", "ex", "expm_nf", 3.5)]
    total = compose_entries(entries)
    assert not total.dp and total.epsilon is None
    assert total.not_dp == {"not DP (reproducible noise)": 1,
                            "not DP (ExpM+NF: eps~ is a training parameter, no guarantee is proven)": 1}
    dp_only = compose_entries(entries[:3])
    assert total.epsilon_dp == dp_only.epsilon_dp  # the reproducible release is not in the DP-only total
    assert total.counts == {"dp_sgd": 4, "expm_nf": 1}


def test_reservations_count_until_settled_and_a_release_counts_whatever_its_reservation():
    reserved = _sgd(1.0, 0.05, 200, "r1", status="reserved")
    alone = compose_entries([reserved])
    assert alone.pending == 1 and alone.releases == 0 and alone.epsilon_dp > 0  # a crash after the check: counted
    released = _sgd(1.0, 0.05, 200, "x1", reservation="r1")
    settled = compose_entries([reserved, released])
    assert settled.pending == 0 and settled.releases == 1 and settled.epsilon_dp == pytest.approx(alone.epsilon_dp)
    void = LedgerEntry("d1", "v1", "dp_sgd", status="void", reservation="r1")
    assert compose_entries([reserved, void]).epsilon_dp == 0.0  # a reservation given up, never trained
    # a release against a voided reservation is still a release
    assert compose_entries([reserved, void, released]).epsilon_dp == pytest.approx(alone.epsilon_dp)


def _check(existing, planned, budget_epsilon, order=None):
    """Every entry on one patient (a snapshot of one), as a budget check per patient composes them."""
    hashes = member_hashes([1], bytes(32))
    sid = snapshot_id(hashes, bytes(32))
    cite = (lambda es: [LedgerEntry(**{**e.as_dict(), "members": sid}) for e in es])
    budget = None if budget_epsilon is None else BudgetSetting(budget_epsilon, 1e-5,
                                                               order or filter_order(budget_epsilon, 1e-5))
    return check_patient_budget(cite(existing), cite(planned), {sid: hashes}, hashes, budget, 1e-5)


def test_budget_refuses_whatever_would_exceed_it():
    existing = [_sgd(1.0, 0.05, 200, "a")]
    eps = _check(existing, [], 100.0, order=8.0).after  # the filter's epsilon at the budget's order
    assert not _check(existing, [], eps + 0.1, order=8.0).refused
    assert _check(existing, [_sgd(1.0, 0.05, 200, "b")], eps + 0.1, order=8.0).refused
    for no_guarantee in (LedgerEntry("d1", "np", "non_private"), LedgerEntry("d1", "ex", "expm_nf", 0.1),
                         _sgd(50.0, 0.01, 1, "tiny", guarantee="reproducible")):
        verdict = _check(existing, [no_guarantee], 1000.0)
        assert verdict.refused and "without a DP guarantee" in verdict.reason
    assert not _check(existing, [LedgerEntry("d1", "np", "non_private")], None).refused  # no budget


def test_a_budget_binds_on_the_renyi_filter_not_on_prv():
    """Releases are chosen adaptively night after night: a budget between PRV's total (tight for a sequence fixed in
    advance) and the filter's is refused, and the refusal names the filter and its order."""
    existing = [_sgd(1.0, 0.05, 200, "a"), _sgd(1.2, 0.05, 300, "b")]
    shown = compose_entries(existing)
    between = (shown.epsilon_dp_prv + shown.epsilon_dp_rdp) / 2
    assert shown.epsilon_dp_prv < between
    verdict = _check(existing[:1], existing[1:], between)
    assert verdict.refused and f"Renyi filter at order {filter_order(between, 1e-5):g}" in verdict.reason
    assert verdict.after >= shown.epsilon_dp_rdp  # one fixed order is never below the minimum over orders
    assert not _check(existing[:1], existing[1:], verdict.after * 1.001).refused


def test_old_ledgers_read_and_entries_are_validated():
    old = LedgerEntry.from_dict({"dataset": "d1", "release": "r/models/x.pt", "mechanism": "non_private",
                                 "epsilon": math.inf, "delta": 0.0, "run_id": "r"})
    assert old.epsilon is None and old.status == "released" and old.guarantee == "non_private"
    with pytest.raises(ValueError, match="needs noise_multiplier"):
        LedgerEntry("d1", "m", "dp_sgd", 1.0)
    several = compose_entries([LedgerEntry("d1", "a", "dp", 1.0), LedgerEntry("d2", "b", "dp", 1.0)])
    assert several.dataset == "" and several.epsilon_dp == 2.0  # one patient's releases under two sources


def test_dataset_ids_follow_the_patients_and_say_nothing_without_the_key():
    import hashlib

    key, other = bytes(range(32)), bytes(32)
    assert dataset_id_of([10005, 10006], key) == dataset_id_of(["10006", 10005.0], key)
    assert dataset_id_of([10005, 10006], key) != dataset_id_of([10005, 10007], key)
    # an attacker who knows every patient but one cannot test membership by hashing: the id is keyed
    unkeyed = hashlib.sha256("10005\n10006".encode()).hexdigest()
    assert unkeyed not in dataset_id_of([10005, 10006], key)
    assert dataset_id_of([10005, 10006], key) != dataset_id_of([10005, 10006], other)
