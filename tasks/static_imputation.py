"""MICE for the per-stay static table of a MIMIC-Extract cohort (optional pipeline stage).

Builds the static table (demographics and 24 h means), drops variables missing in more than
``max_missing_fraction`` of the training stays (recorded), fits m imputations on the training stays
only and replays them on dev and test; draws are truncated to the spec's valid ranges. Writes
``intermediate/static_imputed/<split>_<i>.csv`` and ``static_imputation.json`` (decisions, counts).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from prefect import task

from privehr.models.data.mice import MICEImputer
from privehr.models.data.static_table import static_table
from privehr.core.config import StaticImputationConfig
from privehr.core.run_layout import RunLayout
from privehr.core.specs import load_mimic_spec
from privehr.tasks.cohort import load_cohort
from privehr.io.mimic_extract import read_patients
from privehr.tasks.run_logging import exact, run_logger
from privehr.tasks.split import load_manifest

__all__ = ["impute_static_table"]


@task(name="impute-static-table")
def impute_static_table(hdf5_path: str, cohort_path: str, manifest_path: str, run_dir: str,
                        config: StaticImputationConfig, mimic_spec: str | None = None) -> str:
    """Impute the cohort's static table with MICE fitted on training stays; return the summary's path."""
    cohort, manifest = load_cohort(cohort_path), load_manifest(manifest_path)
    demographics = read_patients(hdf5_path).reset_index().drop_duplicates("icustay_id").set_index("icustay_id")
    table = static_table(cohort["icustay_id"], cohort["mean"], [str(v) for v in cohort["variables"]], demographics)
    parts = {s: table.loc[table.index.isin(ids)] for s, ids in manifest["icustay_ids"].items()}
    missing = parts["train"].isna().mean()
    dropped = {c: float(f) for c, f in missing.items() if f > config.max_missing_fraction}
    kept = [c for c in table.columns if c not in dropped]
    spec = load_mimic_spec(mimic_spec)
    bounds = {f"{name} (24h mean)": (b.valid_low, b.valid_high) for name, b in spec.bounds().items()}
    bounds["age"] = (15.0, 120.0)
    others = pd.concat([parts["dev"][kept], parts["test"][kept]])
    imputer = MICEImputer(m=config.m, max_iter=config.max_iter, seed=config.seed, bounds=bounds, trace=config.trace)
    train_done = imputer.fit_transform(parts["train"][kept])  # fitted on the training stays only
    others_done = imputer.transform(others)  # dev and test, by the training stays' imputers
    run = RunLayout(run_dir)
    out = run.static_imputed
    out.mkdir(parents=True, exist_ok=True)
    for i, (train, rest) in enumerate(zip(train_done, others_done)):
        train.to_csv(out / f"train_{i}.csv")
        for split in ("dev", "test"):
            rest.loc[parts[split].index].to_csv(out / f"{split}_{i}.csv")
    summary = {"m": config.m, "iterations": imputer.max_iter, "seeds": imputer.seeds_,
               "fitted_on": "training stays only",
               "stays": {s: int(len(p)) for s, p in parts.items()}, "columns_kept": kept,
               "dropped": {"rule": f"missing in more than {config.max_missing_fraction:.0%} of training stays",
                           "columns": dropped},
               "missing_before": {s: int(p[kept].isna().sum().sum()) for s, p in parts.items()},
               "missing_after": int(sum(f.isna().sum().sum() for f in train_done + others_done)),
               "rhat": imputer.rhat_,
               "max_rhat": float(np.nanmax(list(imputer.rhat_.values()))) if imputer.rhat_ else None}
    path = run.static_imputation
    path.write_text(json.dumps(summary, indent=2))
    run_logger().info("impute-static-table: %d datasets, %d columns kept of %d, %s values missing after",
                      config.m, len(kept), table.shape[1], exact(summary["missing_after"]))
    return str(path)
