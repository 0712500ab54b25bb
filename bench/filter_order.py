"""What fixing the Renyi filter's order costs: nights of a nightly bundle that fit a per-patient budget.

A patient in every night's releases, each night the nightly bundle's DP releases (one DP-SGD logistic regression at
target epsilon 1, sigma 2.55, q = 128 / 2,154, T = 85, as the demo calibrates it; and its DP evaluation, one Gaussian
mechanism at sigma 9.7). For budgets of 1, 2, 4 and 8 at delta 1e-5, the number of nights admitted:

* ``filter``: the Renyi filter at the budget's one order, fixed in advance (``filter_order``): what a budget binds on,
  valid when releases are chosen adaptively (Feldman and Zrnic 2021);
* ``rdp_best_order``: RDP at the minimum over orders, the rule before it (not a filter: the order is chosen after);
* ``prv`` and ``pld``: the tight compositions of a sequence fixed in advance (Opacus's PRV, dp-accounting's PLD).

Every number is a public function of the plans; nothing here touches data. Prints JSON.

    python bench/filter_order.py [--out bench/results/filter_order.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIT, EVALUATION, DELTA = (2.55, 128 / 2154, 85), (9.7, 1.0, 1), 1e-5


def main() -> None:
    from privehr.models.privacy.accounting import RDP_ORDERS, _rdp_step_computed, compose_history
    from privehr.models.privacy.rdp_filter import epsilon_at, filter_order

    def nights_within(budget: float, epsilon_of) -> int:
        n = 0
        while epsilon_of(n + 1) <= budget:
            n += 1
        return n

    orders = tuple(RDP_ORDERS)
    night = _rdp_step_computed(FIT[0], FIT[1], orders) * FIT[2] + _rdp_step_computed(*EVALUATION[:2], orders)

    def history(n):
        return [(FIT[0], FIT[1], FIT[2] * n), (EVALUATION[0], EVALUATION[1], n)]

    rows = []
    for budget in (1.0, 2.0, 4.0, 8.0):
        order = filter_order(budget, DELTA)
        at = orders.index(order)
        composed = {}

        def accountant(name):
            def epsilon(n):
                if (name, n) not in composed:
                    c = compose_history(history(n), DELTA, eps_error=0.01)
                    composed[("prv", n)], composed[("pld", n)] = c.prv, c.pld
                value = composed[(name, n)]
                return float("inf") if value is None else value
            return epsilon

        rows.append({
            "budget_epsilon": budget, "filter_order": order,
            "nights": {"filter": nights_within(budget, lambda n: epsilon_at([night[[at]] * n], [order], DELTA)[0]),
                       "rdp_best_order": nights_within(budget, lambda n: epsilon_at([night * n], orders, DELTA)[0]),
                       "prv": nights_within(budget, accountant("prv")),
                       "pld": nights_within(budget, accountant("pld"))}})
    result = {"bench": "filter_order", "delta": DELTA, "night": {"dp_sgd": FIT, "evaluation": EVALUATION},
              "rows": rows}
    text = json.dumps(result, indent=1)
    print(text)
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
