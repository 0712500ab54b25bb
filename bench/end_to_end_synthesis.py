"""What DP end to end costs for synthesis: privehr-synthesize with ``missing: in_release`` (DP end to end) against
``missing: mice_first`` (the papers' order, not DP end to end), everything else equal.

Runs the privehr-synthesize flow once per variant on Harrod's hemodynamic EHR table (84 patients, read from
``../shared/reference_data/harrod_ehr/EHR_dataset.csv`` through the ``harrod_ehr`` spec) when it is there, else on
the simulated Harrod-shaped table of ``privehr.io.demo_data.write_demo_ehr(seed=0)`` (the JSON says which):

* ``in_release``: each synthesizer trains on the training patients as delivered, a 0/1 missingness column per
  attribute and a public placeholder for its missing values; its synthetic tables are imputed by one MICE fitted on
  themselves (post-processing). One synthesizer per (budget, run);
* ``mice_first``: MICE (``--m`` imputations, 2 by default) fitted on the real training patients first, then one
  synthesizer per (imputation, budget, run), as Su et al. 2023 and Lee et al. 2022 do. Not DP end to end.

Both variants use the same ``--m`` (in in_release it only sets the real imputations the tables are evaluated against,
imputation 0, and the train-on-real baseline), synthesizers MAF (DP-NF), DP-HFlow and AIM (when private-pgm is
installed), budgets epsilon 1 and 4 at delta 1e-5 (no mu budgets, no non-private flow), ``--runs`` synthesizers per
cell, ``--releases`` tables each, the config's default training settings unless ``--dpnf-steps`` /
``--hflow-steps`` are given (recorded). Each variant gets its own temporary artifacts directory and privacy ledger.

Reports, per variant x synthesizer x epsilon, mean (SD) over the truncated tables (decoded to the spec, the tables a
bundle ships) of: TSTR AUROC (mean over the nine-classifier panel, tested on the real test patients), TV mean of
discrete columns, Kendall-tau matrix RMSE, mean KS of numeric columns, and the SVM accuracy and random-forest MSE of
Su et al. 2023; the train-on-real baseline (``original``, mean over imputations); the release bundle's total epsilon
(PRV, RDP, PLD) and guarantee; wall seconds per variant. Prints the JSON and writes
``bench/results/end_to_end_synthesis.json``.

    python bench/end_to_end_synthesis.py [--runs 2] [--releases 2] [--m 2] [--dpnf-steps N] [--hflow-steps N]
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
RESULTS = ROOT / "bench" / "results"
HARROD = ROOT.parent / "shared" / "reference_data" / "harrod_ehr" / "EHR_dataset.csv"
METRICS = {"tstr_auroc": "TSTR AUROC (9-classifier mean)", "tv_mean": "TV mean", "tau_rmse": "Kendall-tau RMSE",
           "ks_mean": "KS mean", "svm_accuracy": "SVM accuracy", "rf_mse": "RF MSE"}
BASELINE = ("tstr_auroc", "svm_accuracy", "rf_mse")  # what the train-on-real baseline reports


def _mean_sd(values) -> dict:
    values = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not values:
        return {"mean": None, "sd": None, "n": 0}
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else None
    return {"mean": mean, "sd": sd, "n": len(values)}


def _number(value) -> float | None:
    value = float(value)
    return None if math.isnan(value) else value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--harrod", type=Path, default=HARROD)
    parser.add_argument("--variants", nargs="+", default=["in_release", "mice_first"],
                        choices=("in_release", "mice_first"))
    parser.add_argument("--synthesizers", nargs="+", default=["maf", "hflow", "aim"], choices=("maf", "hflow", "aim"))
    parser.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 4.0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--releases", type=int, default=2)
    parser.add_argument("--m", type=int, default=2, help="MICE imputations (both variants)")
    parser.add_argument("--dpnf-steps", type=int, default=None, help="default: the config's")
    parser.add_argument("--hflow-steps", type=int, default=None, help="default: the config's")
    parser.add_argument("--output", type=Path, default=RESULTS / "end_to_end_synthesis.json")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="privehr-e2e-synth-"))
    os.environ.update(PREFECT_HOME=str(tmp / "prefect-home"), PREFECT_LOCAL_STORAGE_PATH=str(tmp / "prefect-storage"),
                      PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="300")
    os.environ.pop("PREFECT_API_URL", None)
    from prefect.testing.utilities import prefect_test_harness

    import pandas as pd

    from privehr.core.config import SynthesisConfig
    from privehr.core.run_layout import RunLayout
    from privehr.flows.synthesis import synthesize_ehr
    from privehr.models.synthesis.marginal import marginal_available

    synthesizers = [s for s in args.synthesizers if s != "aim" or marginal_available()]
    if args.harrod.exists():
        data, source = args.harrod, f"Harrod et al. hemodynamic EHR table ({args.harrod.relative_to(ROOT.parent)})" \
            if args.harrod.is_relative_to(ROOT.parent) else str(args.harrod)
    else:
        from privehr.io.demo_data import write_demo_ehr

        data = tmp / "EHR_dataset.csv"
        write_demo_ehr(data, seed=0)
        source = "simulated Harrod-shaped table (privehr.io.demo_data.write_demo_ehr, seed 0)"
    training = {k: v for k, v in (("dpnf", {"steps": args.dpnf_steps} if args.dpnf_steps else {}),
                                  ("hflow", {"steps": args.hflow_steps} if args.hflow_steps else {}))}
    out = {"data": source, "aim_available": marginal_available(), "synthesizers": synthesizers,
           "epsilons": args.epsilons, "runs": args.runs, "releases": args.releases, "mice_m": args.m,
           "cpu_count": os.cpu_count(), "metrics": METRICS, "tables_summarised": "truncated (decoded to the spec)",
           "variants": {}}
    with prefect_test_harness(server_startup_timeout=300):
        for variant in args.variants:
            config = SynthesisConfig.model_validate({
                "path": str(data), "spec": "harrod_ehr", "missing": variant, "synthesizers": synthesizers,
                "epsilons": args.epsilons, "mus": [], "non_private": False, "runs": args.runs,
                "releases": args.releases, "mice": {"m": args.m, "trace": False}, **training,
                "artifacts_dir": str(tmp / "artifacts"), "run_id": variant.replace("_", "-"),
                "privacy": {"ledger_path": str(tmp / f"ledger-{variant}.jsonl")}})
            out.setdefault("settings", {"dpnf": config.dpnf.model_dump(), "hflow": config.hflow.model_dump(),
                                        "marginal": config.marginal.model_dump(), "delta": config.privacy.delta,
                                        "scaling": config.scaling, "mice_max_iter": config.mice.max_iter})
            start = time.perf_counter()
            summary = synthesize_ehr(config, "cpu")
            seconds = time.perf_counter() - start
            run = RunLayout(summary["run_dir"])
            results = pd.read_csv(run.results)
            truncated = results[results["truncated"].astype(bool)]
            cells = {}
            for label, rows in truncated.groupby("budget_label"):  # "<synthesizer> epsilon<e>"
                cells[label if " " in label else f"{rows['synthesizer'].iloc[0]} {label}"] = {"tables": int(len(rows)), "flows": int(rows["job_id"].nunique()),
                              "target_epsilon": float(label.rpartition("epsilon")[2]),
                              **{f"{k}_per_release": _number(rows[k].iloc[0])
                                 for k in ("epsilon_prv", "epsilon_rdp", "epsilon_pld")},
                              # the evaluation drops rows with a missing value; under 2 left, no metric at all
                              "tables_unevaluable": int(rows["ks_mean"].isna().sum()),
                              **{m: _mean_sd(rows[m]) for m in METRICS if m in rows}}
            originals = [json.loads(run.original(i).read_text()) for i in range(args.m)]
            manifest = json.loads((run.release_bundle / "manifest.json").read_text())
            total = manifest["total"]
            out["variants"][variant] = {
                "seconds": round(seconds, 1), "flows": summary["flows"], "tables": summary["tables"],
                "original": {m: _mean_sd([o.get(m) for o in originals]) for m in BASELINE},
                "cells": dict(sorted(cells.items())),
                "bundle": {"guarantee": manifest["guarantee"], "releases": total["releases"], "dp": total["dp"],
                           "delta": total["delta"], "epsilon_prv": total["epsilon_prv"],
                           "epsilon_rdp": total["epsilon_rdp"], "epsilon_pld": total["epsilon_pld"],
                           "tables": len([f for f in manifest["files"] if f.startswith("tables/")])},
                "results_columns": list(results.columns)}
            print(json.dumps({variant: {k: out["variants"][variant][k] for k in ("seconds", "bundle")}}),
                  file=sys.stderr)
    out["run_dir"] = str(tmp)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
