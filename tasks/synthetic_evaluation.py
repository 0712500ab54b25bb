"""Evaluate synthetic releases against real patients: utility (train on synthetic, test on real) and fidelity.

For release tables of imputation i: the SVM (hypertension, FM-optimal cutoff) and the random forest
(mean PAP) are fitted on the synthetic table and scored on imputation i's real *test* patients (their
inputs: every attribute except those the targets are computed from, ``excluded_features``);
fidelity compares the table with the real *training* patients (the holdout for DCR is the test
patients). The train-on-real baseline fits the same models on imputation i's training patients.
Only aggregate numbers are written (``releases/<job>.evaluation.json``, ``original_<i>.json``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from prefect import task

from models.fidelity import fidelity_summary
from models.synthetic_utility import random_forest_mse, svm_accuracy
from privehr.config import SynthesisConfig
from tasks.compute import share_cores
from tasks.synthesis import imputed_tables

__all__ = ["evaluate_release", "evaluate_original"]


def _utility(train: pd.DataFrame, test: pd.DataFrame, attributes: list[str], config: SynthesisConfig, seed: int) -> dict:
    label, target = config.classification_target, config.regression_target
    features = [a for a in attributes if a not in config.excluded_features]
    svm = svm_accuracy(train[features], train[label], test[features], test[label], seed)
    return {"svm_accuracy": svm["accuracy"], "svm_cutoff": svm["cutoff"], "svm_single_class": svm["single_class"],
            "rf_mse": random_forest_mse(train[features], train[target], test[features], test[target], seed)}


@task(name="evaluate-release")
def evaluate_release(run_dir: str, record_path: str, config: SynthesisConfig) -> str:
    """Utility and fidelity of every table of one release record; return the evaluation file's path."""
    share_cores()
    record = json.loads(Path(record_path).read_text())
    train, test, summary = imputed_tables(run_dir, record["job"]["imputation"])
    features = summary["attributes"]
    rows = []
    for f in record["files"]:
        synthetic = pd.read_csv(f["path"])
        if synthetic[features].shape[0] < 2:  # every sampled row was non-finite: nothing to learn from
            rows.append({"release": f["release"], "truncated": f["truncated"], "rows": int(len(synthetic)),
                         "svm_accuracy": float("nan"), "rf_mse": float("nan"), "per_column": {}})
            continue
        fidelity = fidelity_summary(train[features], test[features], synthetic[features], seed=f["release"])
        rows.append({"release": f["release"], "truncated": f["truncated"], "rows": int(len(synthetic)),
                     **_utility(synthetic, test, features, config, 1000 * record["job"]["run"] + f["release"]),
                     **{k: v for k, v in fidelity.items() if k != "per_column"},
                     "per_column": fidelity["per_column"]})
    out = Path(record_path).with_suffix(".evaluation.json")
    out.write_text(json.dumps({"job": record["job"], "budget_label": record["budget_label"], "rows": rows}, indent=2))
    return str(out)


@task(name="evaluate-original")
def evaluate_original(run_dir: str, imputation: int, config: SynthesisConfig) -> str:
    """The train-on-real baseline of one imputation ("Original" in seed 002's tables)."""
    train, test, summary = imputed_tables(run_dir, imputation)
    result = {"imputation": imputation, **_utility(train, test, summary["attributes"], config, imputation)}
    out = Path(run_dir) / "releases" / f"original_{imputation}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    return str(out)
