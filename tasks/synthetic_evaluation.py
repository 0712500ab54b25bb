"""Evaluate synthetic releases against real patients: utility (train on synthetic, test on real) and fidelity.

References:
    Lee, Kim, Jeong, Ro (2022). Differentially Private Normalizing Flows for Synthetic Tabular Data Generation. AAAI.
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.

For the tables of imputation i, against imputation i's real patients (Only aggregate numbers are written:
``releases/<job>.evaluation.json``, ``original_<i>.json``):

* utility on the real *test* patients, with every column except the targets and ``excluded_features`` as
  inputs: the TSTR panel of Lee et al. 2022 (nine classifiers, macro-F1, AUROC, average precision) for the
  classification target, and the SVM accuracy (FM-optimal cutoff) and random-forest MSE of Su et al. 2023 for
  the classification and regression targets. The train-on-real baseline fits the same models on the real
  training patients;
* fidelity to the real *training* patients: per-column KS / Wasserstein and Kendall-tau RMSE, detection AUROC
  and DCR (:mod:`privehr.models.evaluation.fidelity`, the holdout being the test patients), and the mixed-type view of
  Lee et al. 2022 (:mod:`privehr.models.evaluation.mixed_fidelity`): TV distance of discrete columns, Kendall-tau RMSE and
  MAE, and the share of synthetic values that are no valid value of their column (a binary column emitted as 0.37);
* membership inference on each *decoded* table (raw tables are skipped to bound the cost), the DOMIAS
  density-ratio attack of van Breugel et al. 2023 (:mod:`privehr.models.evaluation.membership_inference`):
  members are the real training patients, the real test patients are split by a public rule (even positions of
  the test file: the attacker's reference sample; odd positions: the non-member candidates). AUROC and TPR at
  FPR 10 %, 1 % and 0.1 % (``None`` where 1 / non-members exceeds the FPR), also for the p_syn-only baseline.

A table decoded to the spec (``-truncated.csv``: categories as the spec names them) is read back into codes.

Beside the train-on-real baseline, ``original_<i>.json`` holds what a TSTR AUROC must beat to say anything: the same
panel trained on the real training patients with the label shuffled (:data:`PERMUTATIONS` public permutations),
which breaks the label's relation to the features and keeps everything else, and how many test patients' labels
MICE imputed (TSTR scores those against the imputation model's guess, not an observed outcome).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from prefect import task

from privehr.models.synthesis.codec import TableCodec
from privehr.models.evaluation.fidelity import fidelity_summary
from privehr.models.evaluation.membership_inference import domias_attack, holdout_split
from privehr.models.evaluation.mixed_fidelity import mixed_fidelity_summary
from privehr.models.evaluation.synthetic_utility import random_forest_mse, svm_accuracy
from privehr.models.evaluation.tstr_panel import tstr, tstr_summary
from privehr.core.run_layout import RunLayout
from privehr.core.config import SynthesisConfig
from privehr.core.specs import load_ehr_spec
from privehr.tasks.compute import share_cores
from privehr.tasks.synthesis import imputed_tables

__all__ = ["evaluate_release", "evaluate_original", "chance_baseline", "imputed_labels", "PERMUTATIONS"]


def _kinds(spec, columns: list[str]) -> tuple[dict, dict]:
    """(column -> kind, column -> valid codes of a discrete column) in frame units."""
    kinds, codes = spec.kinds(), spec.codes()
    return {c: kinds[c] for c in columns}, {c: v for c, v in codes.items() if c in columns}


def _utility(train: pd.DataFrame, test: pd.DataFrame, attributes: list[str], config: SynthesisConfig, spec,
             seed: int) -> dict:
    label, target, excluded = config.targets(spec)
    features = [a for a in attributes if a not in excluded and a not in (label, target)]
    out: dict = {}
    if label is not None:
        columns = features + [label]
        kinds, codes = _kinds(spec, columns)
        # a raw table's label is a number like 0.37: the panel, like the SVM, reads it as its nearest class
        train_rows = train[columns].assign(**{label: train[label].astype(float).round().clip(0, 1)})
        test_rows = test[columns].assign(**{label: test[label].astype(float)})
        panel = tstr(train_rows, test_rows, label, kinds, categories=codes, seed=seed % (2 ** 31))
        summary = tstr_summary(panel)
        out |= {"tstr_macro_f1": summary["macro_f1"], "tstr_auroc": summary["auroc"],
                "tstr_average_precision": summary["average_precision"], "tstr_fitted": summary["n_fitted"],
                "tstr_per_classifier": {name: {k: (None if pd.isna(row[k]) else float(row[k]))
                                               for k in ("macro_f1", "auroc", "average_precision")}
                                        | {"reason": row["reason"]} for name, row in panel.iterrows()}}
        labels = train[label].round()  # the SVM needs 0/1 labels; a raw table's 0.37 becomes 0
        svm = svm_accuracy(train[features], labels.clip(0, 1), test[features], test[label], seed)
        out |= {"svm_accuracy": svm["accuracy"], "svm_cutoff": svm["cutoff"], "svm_single_class": svm["single_class"]}
    if target is not None:
        out["rf_mse"] = random_forest_mse(train[features], train[target], test[features], test[target], seed)
    return out


MIA_MAX_MEMBERS = 5000  # members subsampled (public seed) past this: the cost is members x synthetic rows


def membership_inference(train: pd.DataFrame, test: pd.DataFrame, synthetic: pd.DataFrame) -> dict:
    """The DOMIAS attack's numbers as ``mia_*`` fields: members = ``train``, the ``test`` rows split by
    :func:`holdout_split` into the reference (even positions) and the non-member candidates (odd positions)."""
    reference, nonmembers = holdout_split(test)
    if len(nonmembers) < 1 or len(reference) < 2:
        return {}
    result = domias_attack(synthetic, train, nonmembers, reference, max_members=MIA_MAX_MEMBERS)
    return {f"mia_{k}": v for k, v in result.items()}


def _read_table(path: str, truncated: bool, codec: TableCodec, columns: list[str]) -> pd.DataFrame:
    table = pd.read_csv(path)
    if truncated:  # categories as the spec names them -> codes
        table[codec.names] = codec.encode_labels(table[codec.names])
    return table[[c for c in columns if c in table]].astype(float)


@task(name="evaluate-release")
def evaluate_release(run_dir: str, record_path: str, config: SynthesisConfig) -> str:
    """Utility and fidelity of every table of one release record; return the evaluation file's path."""
    share_cores()
    record = json.loads(Path(record_path).read_text())
    spec = load_ehr_spec(config.spec)
    train, test, summary = imputed_tables(run_dir, record["job"]["imputation"])
    features = summary.attributes
    codec = TableCodec.from_spec(spec, features, require_bounds=False)
    columns = features + [d for d in summary.derived if d in train]
    kinds, codes = _kinds(spec, columns)
    rows = []
    for f in record["files"]:
        synthetic = _read_table(f["path"], f["truncated"], codec, columns)
        finite = np.isfinite(synthetic[features].to_numpy(float)).all(axis=1)
        if finite.sum() < 2:  # every sampled row was non-finite: nothing to learn from
            rows.append({"release": f["release"], "truncated": f["truncated"], "rows": int(len(synthetic)),
                         "svm_accuracy": float("nan"), "rf_mse": float("nan"), "per_column": {}})
            continue
        synthetic = synthetic[finite].reset_index(drop=True)
        fidelity = fidelity_summary(train[features], test[features], synthetic[features], seed=f["release"])
        mixed = mixed_fidelity_summary(train[features], synthetic[features], {c: kinds[c] for c in features},
                                       categories={c: v for c, v in codes.items() if c in features})
        rows.append({"release": f["release"], "truncated": f["truncated"], "rows": int(len(synthetic)),
                     **_utility(synthetic, test, features, config, spec,
                                1000 * record["job"]["run"] + f["release"]),
                     **{k: v for k, v in fidelity.items() if k != "per_column"},
                     "tv_mean": mixed["tv_mean"], "tau_rmse": mixed["tau_rmse"], "tau_mae": mixed["tau_mae"],
                     "invalid_share": mixed["invalid_share"],
                     **(membership_inference(train[features], test[features], synthetic[features])
                        if f["truncated"] else {}),
                     "per_column": fidelity["per_column"], "per_column_mixed": mixed["per_column"]})
    out = Path(record_path).with_suffix(".evaluation.json")
    out.write_text(json.dumps({"job": record["job"], "budget_label": record["budget_label"], "rows": rows},
                              indent=2, default=_json_number))
    return str(out)


def _json_number(value):
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


PERMUTATIONS = 3  # shuffled-label fits per imputation: the chance baseline's mean and spread, a few seconds


def chance_baseline(train: pd.DataFrame, test: pd.DataFrame, attributes: list[str], config: SynthesisConfig, spec,
                    seed: int, permutations: int = PERMUTATIONS) -> list[float]:
    """The TSTR AUROC of the panel trained on ``train`` with its label shuffled (a public seed per permutation): what
    a table whose label says nothing about its features scores against ``test``. Empty without a label."""
    label, target, excluded = config.targets(spec)
    if label is None:
        return []
    columns = [a for a in attributes if a not in excluded and a not in (label, target)] + [label]
    kinds, codes = _kinds(spec, columns)
    out = []
    for k in range(permutations):
        rng = np.random.default_rng([seed, k])
        shuffled = train[columns].assign(**{label: rng.permutation(train[label].astype(float).round().to_numpy())})
        panel = tstr(shuffled, test[columns].assign(**{label: test[label].astype(float)}), label, kinds,
                     categories=codes, seed=(seed * 101 + k) % (2 ** 31))
        auroc = tstr_summary(panel)["auroc"]
        if auroc is not None and np.isfinite(auroc):
            out.append(float(auroc))
    return out


def imputed_labels(run_dir: str, label: str | None) -> dict | None:
    """How many of the test patients' ``label`` MICE imputed: missing in the split as delivered (None where the label
    is not a delivered attribute, e.g. a derived column)."""
    path = RunLayout(run_dir).split_tables / "test.csv"
    if label is None or not path.exists():
        return None
    delivered = pd.read_csv(path, index_col=0)
    if label not in delivered:
        return None
    return {"imputed": int(delivered[label].isna().sum()), "of": int(len(delivered))}


@task(name="evaluate-original")
def evaluate_original(run_dir: str, imputation: int, config: SynthesisConfig) -> str:
    """The train-on-real baseline of one imputation ("Original" in the tables of Su et al. 2023), the shuffled-label
    chance baseline of TSTR and the count of imputed test labels."""
    train, test, summary = imputed_tables(run_dir, imputation)
    spec = load_ehr_spec(config.spec)
    label = config.targets(spec)[0]
    result = {"imputation": imputation, **_utility(train, test, summary.attributes, config, spec, imputation),
              "tstr_auroc_shuffled": chance_baseline(train, test, summary.attributes, config, spec, imputation),
              "test_labels_imputed": imputed_labels(run_dir, label)}
    out = RunLayout(run_dir).original(imputation)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=_json_number))
    return str(out)
