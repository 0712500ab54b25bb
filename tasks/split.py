"""Split: assign whole subjects to train/dev/test; the manifest of ids stays under ``intermediate/``, its counts
and hash go with the run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
from prefect import task

from privehr.models.data.cohort import LABELS
from privehr.models.data.patient_split import SPLITS, hash_split, split_subjects
from privehr.core.run_layout import RunLayout
from privehr.core.config import SplitConfig
from privehr.core.errors import InputError
from privehr.tasks.cohort import load_cohort
from privehr.tasks.run_logging import exact, run_logger

__all__ = ["split_cohort", "load_manifest", "check_labels"]

STRATA = ("mort_icu", "los_3")


@task(name="split")
def split_cohort(cohort_path: str, config: SplitConfig, run_dir: str, exclude: list | None = None) -> str:
    """Write ``intermediate/split_manifest.json`` (subject and stay ids per split: patient-level, out of DVC) and
    ``split_summary.json`` (counts, label rates and the manifest's sha256, versioned); return the manifest's path.

    ``split.method: hash`` (the default) assigns each subject by its own hash; ``stratified``: the strata are the
    combinations of mort_icu and los_3, whatever labels the run trains: the test set of a cohort is the same for
    every label set (runs stay comparable), and all four labels would cut a small cohort into strata too small
    to reach the dev split.

    ``exclude``: subjects left out of the run (their privacy budget is spent: ``tasks/patient_budget.py``); with the
    hash split, everyone else keeps their split."""
    data = load_cohort(cohort_path)
    stratify_on = list(STRATA) if config.method == "stratified" else []
    stays = pd.DataFrame({c: data[c] for c in ["subject_id", "icustay_id", *LABELS]})
    if exclude:
        stays = stays[~stays["subject_id"].isin(exclude)].reset_index(drop=True)
    if stays["subject_id"].nunique() < 3:
        raise InputError(f"the cohort has {stays['subject_id'].nunique()} subject(s); a train/dev/test split "
                         "needs at least 3. Use a larger input file.")
    fractions = (config.train, config.dev, config.test)
    split = (split_subjects(stays, stratify_on, fractions, config.seed) if config.method == "stratified" else
             hash_split(stays["subject_id"], fractions, config.seed))
    manifest = {
        "seed": config.seed, "fractions": [config.train, config.dev, config.test],
        "unit": "subject_id", "method": config.method, "stratified_by": stratify_on,
        "counts": {s: {"subjects": int(stays.loc[split == s, "subject_id"].nunique()),
                       "stays": int((split == s).sum())} for s in SPLITS},
        "label_rates": {s: {lab: float(stays.loc[split == s, lab].mean()) for lab in LABELS} for s in SPLITS},
        "subjects": {s: sorted(stays.loc[split == s, "subject_id"].unique().tolist()) for s in SPLITS},
        "icustay_ids": {s: stays.loc[split == s, "icustay_id"].tolist() for s in SPLITS},
    }
    out = RunLayout(run_dir).split_manifest
    out.write_text(json.dumps(manifest, indent=1))
    summary = {k: v for k, v in manifest.items() if k not in ("subjects", "icustay_ids")}
    summary["manifest_sha256"] = hashlib.sha256(out.read_bytes()).hexdigest()
    RunLayout(run_dir).split_summary.write_text(json.dumps(summary, indent=1))
    run_logger().info("split: %s", {s: exact(manifest["counts"][s]["stays"]) for s in SPLITS})
    return str(out)


def load_manifest(path: str) -> dict:
    return json.loads(Path(path).read_text())


@task(name="check-labels")
def check_labels(manifest_path: str, labels: list[str]) -> str:
    """Stop the run before anything is trained when a label of the grid has a single class in a split; return the
    manifest the run goes on with."""
    rates = load_manifest(manifest_path)["label_rates"]
    for label in labels:
        for split in SPLITS:
            rate = rates[split][label]
            if rate in (0.0, 1.0) or rate != rate:
                value = "no stay" if rate != rate else f"every stay {int(rate)}"
                raise InputError(f"label {label} has a single class in the {split} split ({value}): no classifier "
                                 "can be trained or evaluated on it, and nothing was trained. Deliver stays with "
                                 f"both outcomes, or leave {label} out of labels.")
    return manifest_path
