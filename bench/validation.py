"""Benchmark: GX validation of a full-size hourly table, and MICE on the Harrod and a 20k-row static table.

    python bench/validation.py [--path FILE] [--skip-full] [--harrod ../shared/.../EHR_dataset.csv]

* validation: ``validate_extract`` on a full-size generated ``all_hourly_data.h5`` (34,472 stays,
  about 2.2 M hourly rows; generated under bench/data/ when absent, as bench/cohort_loader.py does),
  wall time and peak RSS in a subprocess. Goal (issue 3): <= 60 s on 2 cores.
* MICE: m = 5 imputations, 10 rounds, on Harrod's table (82 x 19) and on a 20,000-row per-stay static
  table of MIMIC-Extract's kind (demographics and 24 h summaries from the simulator, 30 % missing):
  wall time, rounds, and the largest R-hat where traced.

Prints JSON and writes bench/results/validation.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, sys, time
from privehr.core.specs import load_mimic_spec
from privehr.io.validation import validate_extract
t0 = time.perf_counter()
s = validate_extract(sys.argv[1], sys.argv[2], load_mimic_spec())
wall = time.perf_counter() - t0
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print(json.dumps({"wall_s": wall, "peak_rss_mb": int(hwm) / 1024, "passed": s["passed"], "stays": s["stays"],
                  "hourly_rows": s["hourly_rows"], "variables": s["variables"], "expectations": s["expectations"],
                  "quarantined": {k: v["rows"] for k, v in s["quarantine"].items()}}))
"""


def _validation(path: Path) -> dict:
    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.run([sys.executable, "-c", CHILD, str(path), out], capture_output=True, text=True,
                              cwd=ROOT, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _static_table(rows: int, seed: int = 0):
    """Per-stay static features (age, 24 h means of vitals/labs) of simulated stays, 30 % masked."""
    import numpy as np

    from privehr.simulate.severity_simulator import simulate_extract
    from privehr.resources import mimic_extract_variables

    variables = mimic_extract_variables()
    keep = ["heart rate", "systolic blood pressure", "diastolic blood pressure", "respiratory rate", "temperature",
            "oxygen saturation", "glucose", "creatinine", "hemoglobin", "platelets", "white blood cell count",
            "sodium", "potassium", "bicarbonate"]
    sim = simulate_extract(variables[variables["level2"].isin(keep)], 2000, seed)
    first = sim.vitals_labs.xs("mean", axis=1, level=1)
    first = first[first.index.get_level_values("hours_in") < 24].groupby(level="icustay_id").mean()
    ages = sim.patients.reset_index().set_index("icustay_id")["age"].clip(upper=91.4)
    table = first.join(ages).dropna(how="all")
    rng = np.random.default_rng(seed)
    table = table.sample(rows, replace=True, random_state=seed).reset_index(drop=True)
    table = table + rng.normal(0, 0.01, table.shape) * table.std().to_numpy()  # break exact duplicates
    return table.mask(rng.random(table.shape) < 0.3)


def _mice(name: str, frame, trace: bool) -> dict:
    from privehr.models.data.mice import MICEImputer

    t0 = time.perf_counter()
    imputer = MICEImputer(m=5, max_iter=10, seed=0, trace=trace)
    completed = imputer.fit_transform(frame)
    wall = time.perf_counter() - t0
    return {"table": name, "rows": int(len(frame)), "columns": int(frame.shape[1]), "m": 5, "rounds": imputer.max_iter,
            "missing_fraction": float(frame.isna().mean().mean()), "wall_s": wall,
            "traced": trace, "max_rhat": max(imputer.rhat_.values()) if imputer.rhat_ else None,
            "missing_after": int(sum(d.isna().sum().sum() for d in completed))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", type=Path, default=ROOT / "bench" / "data" / "all_hourly_data_34472.h5")
    parser.add_argument("--skip-full", action="store_true", help="skip the full-size validation")
    parser.add_argument("--harrod", type=Path,
                        default=ROOT.parent / "shared" / "reference_data" / "harrod_ehr" / "EHR_dataset.csv")
    args = parser.parse_args()
    result = {"benchmark": "validation", "cpus": os.cpu_count(), "python": platform.python_version()}
    if not args.skip_full:
        if not args.path.exists():
            from privehr.io.demo_data import write_demo_mimic

            write_demo_mimic(args.path, 34472, 0)
        result["validation_full"] = {"path": str(args.path), **_validation(args.path), "goal_wall_s": 60}
    mice = []
    if args.harrod.exists():
        from privehr.core.specs import load_ehr_spec
        from privehr.io.ehr_table import drop_by_missingness, read_ehr_table

        spec = load_ehr_spec("harrod_ehr")
        table = read_ehr_table(args.harrod, spec)
        kept, _, _ = drop_by_missingness(table.frame, spec, table.decisions["records_read"])
        mice.append(_mice("harrod_ehr", kept, trace=True))
    mice.append(_mice("static_20k", _static_table(20_000), trace=False))
    result["mice"] = mice
    out = ROOT / "bench" / "results" / "validation.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
