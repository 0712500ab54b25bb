"""Features: fit the hourly featuriser on training stays only and apply it to every split."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from prefect import task

from privehr.models.data.cohort import LABELS
from privehr.models.data.hourly_features import HourlyFeaturizer
from privehr.models.data.patient_split import SPLITS
from privehr.core.errors import InputError
from privehr.core.run_layout import RunLayout
from privehr.tasks.cohort import load_cohort
from privehr.tasks.run_logging import run_logger
from privehr.tasks.split import load_manifest

__all__ = ["build_features", "load_split"]


@task(name="features")
def build_features(cohort_path: str, manifest_path: str, run_dir: str) -> str:
    """Write ``intermediate/features_<split>.npz`` and ``featurizer.json``; return the directory."""
    data = load_cohort(cohort_path)
    manifest = load_manifest(manifest_path)
    members = {s: np.isin(data["icustay_id"], manifest["icustay_ids"][s]) for s in SPLITS}
    empty = [s for s in SPLITS if not members[s].any()]
    if empty:
        raise InputError(f"split(s) {empty} received no stays ({len(data['icustay_id'])} cohort stays); use "
                         "a larger input file or other split fractions.")
    train = members["train"]
    featurizer = HourlyFeaturizer().fit(data["mean"][train], data["count"][train])
    run = RunLayout(run_dir)
    out_dir = run.intermediate
    for split in SPLITS:
        idx = members[split]
        feats = featurizer.transform(data["mean"][idx], data["count"][idx])
        np.savez(out_dir / f"features_{split}.npz", values=feats.values, mask=feats.mask, delta=feats.delta,
                 icustay_id=data["icustay_id"][idx], labels=np.stack([data[lab][idx] for lab in LABELS], 1),
                 label_names=np.array(LABELS))
    fitted = {"fitted_on": "train", "train_stays": int(train.sum()), "delta_fill": featurizer.delta_fill,
              "variables": data["variables"].tolist(), "mean": featurizer.mean_.tolist(),
              "std": featurizer.std_.tolist(), "observed_fraction": featurizer.observed_fraction_.tolist(),
              "note": "aggregate statistics of training stays; computed outside any DP guarantee"}
    run.featurizer.write_text(json.dumps(fitted))
    run_logger().info("features: fitted on %d training stays, %d variables", train.sum(), len(fitted["variables"]))
    return str(out_dir)


def load_split(features_dir: str, split: str) -> dict[str, np.ndarray]:
    with np.load(Path(features_dir) / f"features_{split}.npz") as npz:
        return {k: npz[k] for k in npz.files}
