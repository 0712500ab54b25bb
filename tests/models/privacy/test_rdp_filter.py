"""The per-patient budget is the Renyi filter of Feldman and Zrnic (2021) at one order fixed in advance (issue 54.5):
a worked case by hand, the theorem's premise held on an adaptively chosen sequence, and the minimum over orders (which
admitted patients whose union bound was 2.64 under a budget of 2) no longer admits anyone."""

import math

import numpy as np
import pytest
from opacus.accountants.analysis import rdp as opacus_rdp

from privehr.models.privacy.accounting import RDP_ORDERS
from privehr.models.privacy.ledger import LedgerEntry
from privehr.models.privacy.patient_accounting import check_patient_budget, member_hashes, patient_spend, snapshot_id
from privehr.models.privacy.rdp_filter import BudgetSetting, epsilon_at, filter_order, rdp_budget

KEY = bytes(32)
DELTA = 1e-5


def _sgd(sigma: float, q: float, steps: int, name: str, members: str | None = None, **kw) -> LedgerEntry:
    return LedgerEntry("src", name, "dp_sgd", 1.0, DELTA, sigma, q, steps, members=members, **kw)


def _one_patient():
    hashes = member_hashes([1], KEY)
    return hashes, snapshot_id(hashes, KEY)


def test_a_worked_case_budget_2_at_delta_1e_5():
    """epsilon 2 at delta 1e-5 fixes order 10.2 and B = 2 - log(0.902) + (log 1e-5 + log 10.2) / 9.2 = 1.1042; a
    DP-SGD release (sigma 1.5, q 0.01, T 1000) has Renyi divergence rho at that order (Opacus); a patient is admitted
    to the k-th such release exactly while k rho <= B, and what they were admitted to converts to at most 2."""
    budget = BudgetSetting(2.0, DELTA, filter_order(2.0, DELTA))
    assert budget.order == 10.2
    b = 2.0 - math.log(9.2 / 10.2) + (math.log(DELTA) + math.log(10.2)) / 9.2
    assert rdp_budget(2.0, DELTA, 10.2) == pytest.approx(b, rel=1e-12) and b == pytest.approx(1.1042, abs=1e-4)
    rho = float(opacus_rdp.compute_rdp(q=0.01, noise_multiplier=1.5, steps=1000, orders=[10.2])[0])
    fits = int(b // rho)
    assert fits == 3  # rho 0.302: room for three releases, and a fourth too many
    hashes, sid = _one_patient()
    made = []
    for k in range(fits + 2):
        verdict = check_patient_budget(made, [_sgd(1.5, 0.01, 1000, f"r{k}", sid)], {sid: hashes}, hashes, budget,
                                       DELTA)
        assert verdict.refused == ((k + 1) * rho > b), k
        if not verdict.refused:
            made.append(_sgd(1.5, 0.01, 1000, f"r{k}", sid))
    assert len(made) == fits
    spent = patient_spend(made, {sid: hashes}, DELTA, budget=budget).epsilon[0]
    assert spent == pytest.approx(opacus_rdp.get_privacy_spent(orders=[10.2], rdp=[fits * rho], delta=DELTA)[0])
    assert spent <= 2.0


def test_the_theorems_premise_holds_on_an_adaptive_sequence_and_patients_dropped_alone():
    """Releases whose noise and sampling rate follow the outputs before them (simulated), over patients who come and
    go; each release admits the patients the filter admits. Every patient's summed Renyi divergence at the budget's
    order stays <= B (Feldman and Zrnic's premise), so each is (alpha, B)-RDP: (2, 1e-5)-DP."""
    rng = np.random.default_rng(0)  # the simulation's choices and outputs (no privacy claim rests on them)
    budget = BudgetSetting(2.0, DELTA, filter_order(2.0, DELTA))
    b = rdp_budget(2.0, DELTA, budget.order)
    patients = np.arange(300)
    snapshots, made, output = {}, [], 0.0
    for t in range(40):
        present = patients[rng.random(len(patients)) < 0.6]
        sigma = 1.5 + 0.5 * (output > 0)  # the next release's parameters depend on the last output
        q = float(rng.choice([0.01, 0.02]))
        hashes = member_hashes(present.tolist(), KEY)
        sid = snapshot_id(hashes, KEY)
        snapshots[sid] = hashes
        planned = _sgd(sigma, q, 300, f"t{t}", sid)
        past = [e for e in made]
        spend = patient_spend(past + [planned], snapshots, DELTA, patients=hashes, budget=budget)
        admitted = hashes[spend.epsilon <= budget.epsilon]  # the rest are left out of this release
        if len(admitted):
            sid = snapshot_id(admitted, KEY)
            snapshots[sid] = admitted
            made.append(_sgd(sigma, q, 300, f"t{t}", sid))
        output = rng.normal()
    everyone = member_hashes(patients.tolist(), KEY)
    final = patient_spend(made, snapshots, DELTA, patients=everyone, budget=budget)
    assert final.used.max() <= 1 + 1e-12 and np.max(final.epsilon) <= 2.0
    assert (final.used > 0.9).sum() > 50  # many patients met their budget and were left out alone
    for h in everyone[:25]:  # the premise by hand: Opacus's RDP at the order, summed over what each was admitted to
        mine = [e for e in made if int(h) in set(snapshots[e.members].tolist())]
        rho = sum(opacus_rdp.compute_rdp(q=e.sample_rate, noise_multiplier=e.noise_multiplier, steps=e.steps,
                                         orders=[budget.order])[0] for e in mine)
        assert rho <= b + 1e-12


def test_the_minimum_over_orders_admits_what_the_fixed_order_refuses():
    """A history whose best order is far from the budget's converts to less than the budget by the minimum over
    orders (the rule a filter may not use: the order is then chosen after the data) and to more at the fixed order:
    the fixed-order filter refuses the release the old rule admitted."""
    budget = BudgetSetting(2.0, DELTA, filter_order(2.0, DELTA))
    hashes, sid = _one_patient()
    history = [_sgd(0.95, 0.01, 500, "steep", sid)]  # low noise: a sampled Gaussian's curve that turns up in the order
    rdp = opacus_rdp.compute_rdp(q=0.01, noise_multiplier=0.95, steps=500, orders=RDP_ORDERS)
    best = epsilon_at([rdp], RDP_ORDERS, DELTA)[0]
    fixed = epsilon_at([rdp[[RDP_ORDERS.index(budget.order)]]], [budget.order], DELTA)[0]
    assert best <= 2.0 < fixed
    verdict = check_patient_budget([], history, {sid: hashes}, hashes, budget, DELTA)
    assert verdict.refused and verdict.after == pytest.approx(fixed)
    assert not check_patient_budget([], history, {sid: hashes}, hashes, None, DELTA).refused  # no budget: a view
    assert patient_spend(history, {sid: hashes}, DELTA).epsilon[0] == pytest.approx(best)  # labelled RDP there


def test_the_order_is_chosen_from_the_budget_alone_and_every_budget_has_room():
    for epsilon in (0.01, 0.1, 0.5, 1.0, 2.0, 4.0, 8.0, 20.0):
        order = filter_order(epsilon, DELTA)
        assert order in RDP_ORDERS
        # the most Gaussian zCDP rho that fits the budget, over the accountant's orders
        fits = [(epsilon + (math.log(DELTA) + math.log(a)) / (a - 1) - math.log((a - 1) / a)) / a for a in RDP_ORDERS]
        assert RDP_ORDERS[int(np.argmax(fits))] == order
        assert rdp_budget(epsilon, DELTA, order) > 0  # small budgets too: epsilon 0.1 at order 128 (63 left none)
    with pytest.raises(ValueError, match="order is above 1"):
        BudgetSetting(2.0, DELTA, 1.0)
    with pytest.raises(ValueError, match="leaves no Renyi divergence"):
        BudgetSetting(0.1, DELTA, 10.2)  # the conversion alone costs more than 0.1 at order 10.2
