"""What the ledger's accounting costs at scale: `privehr privacy ledger` and a budget check on a ledger of nightly
releases, with the accounting cache (privehr/io/accounting_cache.py) empty and filled, and a full recomposition.

A simulated year of nights on one dataset: each night the demo grid's DP-SGD releases (4 epsilons x 2 labels x 2
models x 3 seeds = 48 fits, plus a DP evaluation per label: 50 releases). The mechanisms are synthetic but shaped like
the pipeline's: sigma per epsilon as calibrated at q = 128 / 2,154 over 5 epochs, and, with ``--growing``, a database
that grows 0.5 % a night, so every night's q (and sigma) is new, as on a hospital's growing database; without it every
night repeats the same mechanisms (k-fold composition folds them into 4). What this measures is the accounting, not
the per-patient filter (issue 38, item 2, not built yet).

Process CPU time (time.process_time) of:
* ``view``: reading and verifying the ledger file (its hash chain) and composing every dataset (what
  `privehr privacy ledger` does), once with a cold cache and once again (what every later view, release card and
  budget check reads);
* ``budget check``: the next night's releases composed with the ledger (a new history: a cache miss);
* ``recompose``: the full recomposition past every cache (`--verify`'s check), whose totals the cached ones must equal.

    python bench/ledger_speed.py --nights 200 [--growing] [--out bench/results/ledger_speed.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EPSILON_SIGMA = {0.1: 19.6, 1.0: 2.55, 3.5: 1.15, 10.0: 0.72}  # sigma at q = 128/2154, T = 85 (calibrated once)


def night_entries(night: int, growing: bool):
    from privehr.models.privacy.ledger import LedgerEntry

    n = 2154 * (1.005 ** night if growing else 1.0)
    q = 128 / n
    steps = 5 * math.ceil(n / 128)
    scale = math.sqrt(q * 2154 / 128) if growing else 1.0  # sigma moves with q, roughly as calibration moves it
    entries = []
    for eps, sigma in EPSILON_SIGMA.items():
        for k in range(12):  # 2 labels x 2 models x 3 seeds
            entries.append(LedgerEntry("nightly", f"n{night}/fit-{eps}-{k}", "dp_sgd", epsilon=eps, delta=1e-5,
                                       noise_multiplier=round(sigma * scale, 6), sample_rate=q, steps=steps,
                                       run_id=f"night-{night}"))
    for label in range(2):  # each label's bundled model's DP evaluation: one Gaussian mechanism
        entries.append(LedgerEntry("nightly", f"n{night}/evaluation-{label}", "gaussian", epsilon=0.5, delta=1e-5,
                                   noise_multiplier=9.7, sample_rate=1.0, steps=1, run_id=f"night-{night}"))
    return entries


def cpu(fn):
    start = time.process_time()
    value = fn()
    return value, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nights", type=int, default=200)
    parser.add_argument("--growing", action="store_true", help="a database that grows every night (new q each night)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="privehr-ledger-bench-"))
    os.environ["PRIVEHR_CACHE_DIR"] = str(folder / "cache")

    from privehr.io.ledger import Ledger, ledger_totals, verify_ledger
    from privehr.models.privacy import accounting
    from privehr.models.privacy.ledger import check_budget, compose_entries

    ledger = Ledger(folder / "ledger.jsonl")
    start = time.perf_counter()
    with ledger.transaction() as tx:
        for night in range(args.nights):
            tx.append(night_entries(night, args.growing))
    written = time.perf_counter() - start
    entries = ledger.read()
    distinct = len({(e.noise_multiplier, e.sample_rate) for e in entries})

    (cold,), view_cold = cpu(lambda: ledger_totals(ledger.path, 1e-5))
    accounting._compose.cache_clear()  # the next process: the store alone
    (warm,), view_warm = cpu(lambda: ledger_totals(ledger.path, 1e-5))
    _, read_only = cpu(lambda: Ledger(ledger.path).read())
    tomorrow = night_entries(args.nights, args.growing)
    verdict, budget_check = cpu(lambda: check_budget(entries, tomorrow, 1e9, 1e-5))
    fresh, recompose = cpu(lambda: compose_entries(entries, 1e-5, fresh=True))
    verified, verify = cpu(lambda: verify_ledger(ledger.path))
    result = {
        "nights": args.nights, "growing": args.growing, "releases": len(entries),
        "distinct_mechanisms": distinct, "ledger_bytes": ledger.path.stat().st_size, "write_s": round(written, 2),
        "cpu_s": {"read_and_verify_chain": round(read_only, 3), "view_cold_cache": round(view_cold, 3),
                  "view_warm_cache": round(view_warm, 3), "budget_check_next_night": round(budget_check, 3),
                  "full_recomposition": round(recompose, 3), "verify_with_recomposition": round(verify, 3)},
        "epsilon_dp": {"cold": cold.epsilon_dp, "warm": warm.epsilon_dp, "recomposed": fresh.epsilon_dp,
                       "after_next_night": verdict.after.epsilon_dp},
        "by_accountant": {"prv": fresh.epsilon_dp_prv, "rdp": fresh.epsilon_dp_rdp, "pld": fresh.epsilon_dp_pld},
        "totals_equal": math.isclose(warm.epsilon_dp, fresh.epsilon_dp, rel_tol=1e-9) and verified["ok"],
        "machine": f"{os.cpu_count()} cores",
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
