"""A simulated year of nightly retraining on a growing database, under a per-patient budget (issue 38, item 5).

Each night a delivery of the source's current patients arrives (admissions every night, a few patients withdrawn),
and the night's releases are planned: 24 DP-SGD fits (2 labels x 2 models x 2 epsilons x 3 seeds: sigma 6 and 8,
batch 256 of the night's n, or n / 8 where that is smaller, 3 epochs), 2 DP evaluations (one Gaussian each) and the
record counts (epsilon 0.005).
As the pipeline's patient-budget task does, each patient's Renyi-filter spend is composed with the night's plan (built
on the night's patient count, as the pipeline plans on its released count); those it would take past the budget are
left out, the rest go into the night's membership snapshot, and the night's releases are reserved through the real
ledger (hash chain, snapshots, per-patient check under the lock).

The mechanisms are synthetic but shaped like the pipeline's (the accounting is what is measured, not the fits); the
parameters were chosen before the first run so that a patient present since night 1 meets the budget within the
year, and are reported as they are. JSON on stdout (and ``--out``): per night the patients, the admitted, the
withdrawn, the left out, the spend's median / 99th percentile / maximum, and the CPU seconds of the budget check
(the leave-out composition) and of the reservation; at checkpoints, the CPU seconds of the ledger's per-patient view
in a fresh state (in-process caches cleared; the accounting store kept, as a later process finds it); the nights
until the first patient reaches the budget; and a figure of spend per patient over time (``--figure``).

    python bench/nightly_year.py [--nights 365] [--out bench/results/nightly_year.json] [--figure F.png]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ledger_speed import cpu  # noqa: E402  (process CPU seconds of one call)

SIGMAS = (6.0, 8.0)
PER_NIGHT = {"fits": 24, "evaluations": 2}


def night_plan(n: int):
    """The night's releases as ledger entry templates, planned on n patients."""
    from privehr.models.privacy.ledger import LedgerEntry

    batch = max(1, min(256, n // 8))  # a small training set takes smaller batches (q at most 1/8)
    q, steps = batch / n, 3 * math.ceil(n / batch)
    fits = [LedgerEntry("", "", "dp_sgd", delta=1e-5, noise_multiplier=SIGMAS[k % 2], sample_rate=q, steps=steps,
                        what="final fit") for k in range(PER_NIGHT["fits"])]
    evaluations = [LedgerEntry("", "", "gaussian", delta=1e-5, noise_multiplier=9.7, sample_rate=1.0, steps=1,
                               what="DP evaluation") for _ in range(PER_NIGHT["evaluations"])]
    return fits + evaluations + [LedgerEntry("", "", "dp", 0.005, what="record counts")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nights", type=int, default=365)
    parser.add_argument("--start", type=int, default=15_000, help="patients on night 1")
    parser.add_argument("--admitted", type=int, default=20, help="admissions per night")
    parser.add_argument("--withdrawn", type=int, default=3, help="withdrawals per night")
    parser.add_argument("--budget", type=float, default=8.0, help="per-patient epsilon budget (delta 1e-5)")
    parser.add_argument("--checkpoint", type=int, default=30, help="time the view every N nights")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--figure", type=Path)
    parser.add_argument("--plot", type=Path, help="only draw --figure from this JSON")
    parser.add_argument("--measure", type=Path, help="only measure the view and the recomposition on the ledger a "
                        "year's run left in this folder")
    args = parser.parse_args()
    if args.plot:
        plot(json.loads(args.plot.read_text()), args.figure)
        return
    if args.measure:
        os.environ["PRIVEHR_CACHE_DIR"] = str(args.measure / "cache")
        print(json.dumps(measure(args.measure, args.budget), indent=1))
        return
    folder = Path(tempfile.mkdtemp(prefix="privehr-year-"))
    os.environ["PRIVEHR_CACHE_DIR"] = str(folder / "cache")

    from privehr.io.ledger import members as snapshot_store
    from privehr.io.ledger import Ledger, reserve, source_patients
    from privehr.models.privacy import accounting
    from privehr.models.privacy.patient_accounting import member_hashes, patient_curves, patient_spend
    from privehr.models.privacy.rdp_filter import BudgetSetting, filter_order

    setting = BudgetSetting(args.budget, 1e-5, filter_order(args.budget, 1e-5))  # what the first reserve records

    rng = np.random.default_rng(0)  # the simulated database's admissions and withdrawals (no privacy claim)
    ledger = Ledger(folder / "ledger.jsonl")
    key = ledger.key()
    source = "nightly-year"
    present = list(range(args.start))
    next_id = args.start
    hashes: dict[int, int] = {}
    first_night = {s: 0 for s in present}

    def hash_of(subjects):
        missing = [s for s in subjects if s not in hashes]
        for s in missing:
            hashes[s] = int(member_hashes([s], key)[0])
        return np.array([hashes[s] for s in subjects], dtype=np.uint64)

    nights, views, first_reached, extra = [], [], None, {}

    def write(nights, views, first_reached, complete, final=False):
        """The JSON so far (every checkpoint: a long run leaves its partial result); at the end, printed, and the
        figure."""
        report(args, summarise(args, ledger, next_id, nights, views, first_reached, complete, extra), tracked, final)

    tracked = {"since night 1": present[:200]}  # spend over time of patients present from the start
    for night in range(1, args.nights + 1):
        if night > 1:
            gone = set(rng.choice(len(present), size=args.withdrawn, replace=False).tolist())
            withdrawn = [present[i] for i in gone]
            present = [s for i, s in enumerate(present) if i not in gone]
            admitted = list(range(next_id, next_id + args.admitted))
            next_id += args.admitted
            present += admitted
            for s in admitted:
                first_night[s] = night
            if night == 60:
                tracked["admitted night 60"] = admitted
        else:
            withdrawn, admitted = [], []

        def check():
            """The patient-budget task's rule: the patients' past composed once, the night's plan (built on the
            night's count, which the pipeline releases with noise before it plans) added; whoever it would take past
            the budget is left out. The decision rests on each patient's own past and a public plan."""
            existing = [e for e in ledger.read() if e.dataset == source]
            snapshots = ledger.members({e.members for e in existing if e.members})
            tonight = hash_of(present)
            past = patient_curves(existing, snapshots, 1e-5, patients=np.unique(tonight), fresh=True,
                                  budget=setting)
            over = set(past.plus(night_plan(len(present))).over(args.budget).tolist())
            return [s for s in present if hashes[s] not in over], True

        (kept, settled), check_s = cpu(check)
        left_out = len(present) - len(kept)
        if not kept or not settled:
            nights.append({"night": night, "patients": len(present), "left_out": left_out, "refused": True,
                           "why": "no one left" if not kept else "the leave-out did not settle in 8 rounds",
                           "cpu_s": {"budget_check": round(check_s, 3), "reserve": 0.0}})
            continue

        def reserve_night():
            sid = ledger.write_members(kept)
            plan = {f"r{i}": e for i, e in enumerate(night_plan(len(present)))}  # planned on the night's count
            return reserve(ledger, source, f"night-{night}", plan, args.budget, 1e-5, False, "nightly release(s)",
                           members=sid)

        _, reserve_s = cpu(reserve_night)
        entries = [e for e in ledger.read() if e.dataset == source]
        snapshots = ledger.members({e.members for e in entries if e.members})
        now = patient_spend(entries, snapshots, 1e-5, patients=np.sort(hash_of(present)), budget=setting)
        reached = int((now.epsilon >= args.budget * (1 - 1e-9)).sum())
        if reached and first_reached is None:
            first_reached = night
        by_hash = dict(zip(now.hashes.tolist(), now.epsilon.tolist()))
        nights.append({
            "night": night, "patients": len(present), "admitted": len(admitted), "withdrawn": len(withdrawn),
            "left_out": left_out, "trained_on": len(kept), "reached_budget": reached,
            "spend": {"median": float(np.median(now.epsilon)), "p99": float(np.quantile(now.epsilon, 0.99)),
                      "max": float(now.epsilon.max())},
            "tracked_mean_spend": {k: float(np.mean([by_hash.get(hashes.get(s, -1), np.nan) for s in v
                                                     if s in hashes and hashes[s] in by_hash] or [0.0]))
                                   for k, v in tracked.items()},
            "cpu_s": {"budget_check": round(check_s, 3), "reserve": round(reserve_s, 3)}})
        if night % args.checkpoint == 0 or night == args.nights:
            snapshot_store._VERIFIED.clear()  # as a new process finds it: the store kept, nothing in memory
            accounting._rdp_step_stored.cache_clear()
            mine = [e for e in ledger.read() if e.dataset == source]
            summary, view_s = cpu(lambda: source_patients(Ledger(ledger.path), mine, source, 1e-5, setting,
                                                          args.budget, accountants=False))
            views.append({"night": night, "releases": len(mine), "snapshots": summary["snapshots"],
                          "patients": summary["patients"], "cpu_s_per_patient_view": round(view_s, 3),
                          "median": summary["median"], "p99": summary["p99"], "max": summary["max"],
                          "reached_budget": summary["reached_budget"]})
            print(json.dumps(views[-1]), file=sys.stderr)
            write(nights, views, first_reached, complete=night == args.nights)

    extra["measured"] = measure(folder, args.budget)
    write(nights, views, first_reached, complete=True, final=True)


def measure(folder: Path, budget: float) -> dict:
    """On the year's ledger: `privehr privacy ledger` as a user runs it (a new process, the accounting store as the
    nights left it; CPU of the child), and every patient's total from stored curves against a full recomposition."""
    import resource
    import subprocess

    from privehr.io.ledger import Ledger
    from privehr.models.privacy.patient_accounting import patient_spend

    ledger = Ledger(folder / "ledger.jsonl")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    view = subprocess.run([sys.executable, "-m", "privehr", "privacy", "ledger", "--ledger", str(ledger.path),
                           "--budget", str(budget), "--json"], capture_output=True, text=True,
                          env=os.environ | {"PRIVEHR_CACHE_DIR": str(folder / "cache")})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_view = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    entries = ledger.read()
    snapshots = ledger.members({e.members for e in entries if e.members})
    (kept, kept_s), (fresh, fresh_s) = (cpu(lambda f=f: patient_spend(entries, snapshots, 1e-5, fresh=f))
                                        for f in (False, True))
    shown = json.loads(view.stdout)["datasets"][0]["patients"] if view.returncode == 0 else None
    return {"cli_view_cpu_s": round(cpu_view, 3), "cli_view_exit": view.returncode,
            "cli_view_patients": shown and {k: shown[k] for k in ("patients", "median", "p99", "max",
                                                                  "reached_budget")},
            "per_patient_from_store_cpu_s": round(kept_s, 3), "per_patient_recomposed_cpu_s": round(fresh_s, 3),
            "max_abs_difference": float(np.max(np.abs(kept.epsilon - fresh.epsilon))) if len(kept.epsilon) else 0.0,
            "totals_equal_to_1e-9": bool(np.allclose(kept.epsilon, fresh.epsilon, rtol=1e-9, atol=1e-9))}


def summarise(args, ledger, next_id, nights, views, first_reached, complete: bool, extra: dict) -> dict:
    last = nights[-1]
    result = {
        "nights": args.nights, "budget_epsilon": args.budget, "delta": 1e-5,
        "releases_per_night": sum(PER_NIGHT.values()) + 1, "releases": views[-1]["releases"],
        "patients_ever": next_id, "patients_last_night": last["patients"],
        "snapshot_bytes": sum(p.stat().st_size for p in ledger.members_dir.iterdir()),
        "ledger_bytes": ledger.path.stat().st_size,
        "first_night_a_patient_reached_the_budget": first_reached,
        # a patient is left out when the night's releases would take them past the budget: their budget is spent
        "first_night_a_patient_was_left_out": next((n["night"] for n in nights if n["left_out"]), None),
        "left_out_per_night": [n["left_out"] for n in nights],
        "refused_nights": [{"night": n["night"], "why": n["why"]} for n in nights if n.get("refused")],
        "cpu_s_budget_check": {"max": max(n["cpu_s"]["budget_check"] for n in nights if "cpu_s" in n),
                               "last": last.get("cpu_s", {}).get("budget_check")},
        "cpu_s_reserve": {"max": max(n["cpu_s"]["reserve"] for n in nights if "cpu_s" in n),
                          "last": last.get("cpu_s", {}).get("reserve")},
        "views": views, "per_night": nights, "machine": f"{os.cpu_count()} cores",
        "complete": complete, "nights_run": len(nights), **extra,
    }
    return result


def report(args, result: dict, tracked: dict, final: bool) -> None:
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if not final:
        return
    print(text)
    if args.figure:
        plot(result, args.figure)


def plot(result: dict, figure: Path) -> None:
    """Spend per patient over the nights (median, 99th percentile, maximum, and the mean of two tracked groups) and
    the patients left out each night."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nights = result["per_night"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    spent = [n for n in nights if "spend" in n]
    x = [n["night"] for n in spent]
    for key in ("median", "p99", "max"):
        top.plot(x, [n["spend"][key] for n in spent], label=f"{key} patient")
    for name in dict.fromkeys(k for n in spent for k in n["tracked_mean_spend"]):
        top.plot(x, [n["tracked_mean_spend"].get(name, np.nan) for n in spent], "--", label=f"mean, {name}")
    top.axhline(result["budget_epsilon"], color="k", lw=0.8)
    top.set_ylabel("epsilon spent (Renyi filter)")
    top.legend(fontsize=7)
    bottom.plot([n["night"] for n in nights], [n["left_out"] for n in nights])
    bottom.set_ylabel("patients left out")
    bottom.set_xlabel("night")
    fig.tight_layout()
    fig.savefig(figure, dpi=100)


if __name__ == "__main__":
    main()
