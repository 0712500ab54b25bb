"""Benchmark: the pipeline on a full-size MIMIC-Extract file (34,472 stays), wall time per stage, fits per
minute and peak RSS, and the `full` profile's total projected from the measured per-fit times.

The run is the nightly deployment's configuration (prefect.yaml: the defaults, no synthesis) plus
GRU-D's ExpM+NF cells (in the `full` profile only), on a generated file of the MIMIC-Extract layout,
with ``--labels`` and ``--seeds`` to shorten it (the JSON says which were used). It runs in a subprocess with a throw-away PREFECT_HOME (Prefect's ephemeral
server) and reports that process's own peak RSS (VmHWM). The projections multiply the measured
median seconds per fit of each (model, method) by the number of fits of the nightly deployment and
of the `full` profile (their labels, seeds, epsilons, losses and search trials); ExpM+NF fits are
scaled by the larger of the ratios of flow steps x parameter draws and of evaluated draws. They are
projections, not measurements.

    python bench/full_size_run.py [--path FILE] [--stays 34472] [--labels mort_icu] [--seeds 1] [--device auto]

Without --path a file is generated under bench/data/ first (about 7.5 GB; its time is reported
apart). Writes bench/results/full_size_run_<device>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
from pathlib import Path
from privehr.flows.pipeline import pipeline
from privehr.core.config import PipelineConfig
config = PipelineConfig.model_validate(json.loads(sys.argv[1]))
t0 = time.perf_counter()
summary = pipeline(config)
wall = time.perf_counter() - t0
rows = [json.loads(p.read_text())["value"] for p in (Path(summary["run_dir"]) / "models").glob("*.json")
        if not p.name.endswith(".draws.json")]
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print(json.dumps({"flow_wall_s": wall, "peak_rss_mb": int(hwm) / 1024, "stage_seconds": summary["stage_seconds"],
                  "cohort": summary.get("cohort"), "split": summary.get("split"),
                  "fits": [{k: r[k] for k in ("label", "model", "method", "loss", "target_epsilon", "seed",
                                              "fit_seconds", "auroc", "device")} for r in rows]}))
"""


def projections(stage_seconds: dict, per_kind: dict[tuple[str, str], list[float]]) -> dict:
    """The nightly deployment's and the full profile's time, from the measured median seconds per fit."""
    from privehr.core.config import PipelineConfig, load_config
    from privehr.models.methods import grid, seeds_of

    concurrent = 2  # privehr.tasks.compute.CONCURRENT_FITS fits share the cores
    data_stages = sum(v for k, v in stage_seconds.items() if k not in ("search", "fit (after the last search)"))
    out = {}
    for name in ("nightly", "full"):
        # the nightly deployment (prefect.yaml) runs the defaults; this bench measured them (plus GRU-D's ExpM+NF)
        config = PipelineConfig() if name == "nightly" else load_config(None, "full")
        training, base = config.training, PipelineConfig().training.expm_nf
        e = training.expm_nf
        # an ExpM+NF fit trains (steps x draws utility estimates) and evaluates eval_samples draws: scaled by the
        # larger of the two ratios to the measured (nightly) settings, an upper end
        expm_scale = {m: max(e.steps * (e.grud_samples if m == "grud" else e.samples)
                             / (base.steps * (base.grud_samples if m == "grud" else base.samples)),
                             e.eval_samples / base.eval_samples) for m in ("logistic_regression", "grud")}
        counts: dict[tuple[str, str], dict] = defaultdict(lambda: {"fits": 0, "search_trials": 0})
        for cell in grid(training, config.labels):
            c = counts[(cell.model, cell.method)]
            c["fits"] += seeds_of(cell, training)
            # one configuration: DP-SGD and ExpM+NF take it untried, non-private trains it once to pick the epochs
            c["search_trials"] += (training.search_budget if training.search_budget > 1 or cell.method == "non_private"
                                   else 0)
        kinds, unmeasured = {}, []
        for (model, method), n in sorted(counts.items()):
            if not per_kind.get((model, method)):
                unmeasured.append(f"{model}/{method}")
                continue
            per_fit = statistics.median(per_kind[(model, method)]) * (
                expm_scale[model] if method == "expm_nf" else 1.0)
            kinds[f"{model}/{method}"] = {**n, "seconds_per_fit": per_fit,
                                          "cpu_seconds": per_fit * (n["fits"] + n["search_trials"])}
        fit_hours = sum(k["cpu_seconds"] for k in kinds.values()) / concurrent / 3600
        out[f"projection_{name}"] = {
            "labels": config.labels, "per_kind": kinds, "not_measured": unmeasured, "fit_hours": fit_hours,
            "total_hours": fit_hours + data_stages / 3600,
            "assumptions": f"{concurrent} fits at once as in the pipeline; a search trial costs one fit (with "
                           "search_budget 1 only non-private cells train one); ExpM+NF fits scaled by max(steps x draws, eval_samples) against the "
                           f"measured settings ({expm_scale}); the data stages as measured here"}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", type=Path)
    parser.add_argument("--stays", type=int, default=34472)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--labels", nargs="+", default=["mort_icu"])
    parser.add_argument("--seeds", type=int, default=1, help="final fits per cell (the nightly default is 3)")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from privehr.models.device import resolve_device

    sys.path.insert(0, str(ROOT / "bench"))
    from generated_extract import generated_extract

    path, generation = generated_extract(args.path, args.stays, args.seed)
    device = resolve_device(args.device)
    work = Path(tempfile.mkdtemp(prefix="privehr-full-size-"))
    # GRU-D's ExpM+NF cells are in the full profile only; the run includes them so that the projection has their time
    config = {"data": {"hdf5_path": str(path)}, "labels": args.labels,
              "training": {"seeds": args.seeds, "expm_nf": {"models": ["logistic_regression", "grud"]}},
              "artifacts_dir": str(work / "artifacts"), "privacy": {"ledger_path": str(work / "ledger.jsonl")},
              "versioning": {"dvc": False}, "device": args.device}
    env = {**os.environ, "PREFECT_HOME": str(work / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(config)], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-5000:])
        raise SystemExit(f"the pipeline failed (exit {out.returncode})")
    child = json.loads(out.stdout.strip().splitlines()[-1])
    fits = child.pop("fits")
    per_kind: dict[tuple[str, str], list[float]] = defaultdict(list)
    for f in fits:
        per_kind[(f["model"], f["method"])].append(f["fit_seconds"])
    measured = {f"{m}/{k}": {"fits": len(v), "median_fit_s": statistics.median(v), "total_fit_s": sum(v)}
                for (m, k), v in sorted(per_kind.items())}
    fit_stage = child["stage_seconds"].get("search", 0) + child["stage_seconds"].get("fit (after the last search)", 0)
    result = {
        "benchmark": "full_size_run", "device": str(device), "cpus": os.cpu_count(), "file": str(path),
        "generation": generation, "stays": args.stays, "labels": args.labels, "seeds": args.seeds,
        "grid": "the nightly deployment's (defaults: LR and GRU-D; non-private, DP-SGD at 4 epsilons, ExpM+NF for "
                "logistic regression at 4 eps~) plus GRU-D's ExpM+NF cells (full profile only), labels and seeds as "
                "given",
        "wall_s": wall, "flow_wall_s": child["flow_wall_s"], "peak_rss_mb": child["peak_rss_mb"],
        "stage_seconds": child["stage_seconds"], "cohort": child["cohort"], "split": child["split"],
        "fits": len(fits), "fits_per_minute": len(fits) / (fit_stage / 60) if fit_stage else None,
        "measured_fits": measured, **projections(child["stage_seconds"], per_kind),
    }
    out_path = ROOT / "bench" / "results" / f"full_size_run_{device.type}.json"
    out_path.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
