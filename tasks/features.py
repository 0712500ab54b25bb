"""Features: the hourly featuriser's statistics (public, DP on training patients, or exact on training stays),
applied to every split."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
from prefect import task

from privehr.core.config import FeaturizerSource, PrivacyConfig
from privehr.core.errors import InputError
from privehr.core.run_layout import RunLayout
from privehr.core.strict_json import strict_dumps
from privehr.io.ledger import record_release, void_reservation
from privehr.models.data.cohort import LABELS
from privehr.models.data.featurizer_statistics import (FeaturizerStatistics, can_inform, dp_statistics,
                                                       exact_statistics, fallback_threshold, public_statistics)
from privehr.models.data.hourly_features import HourlyFeaturizer
from privehr.models.data.patient_split import SPLITS
from privehr.models.privacy.ledger import LedgerEntry
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import Reserved
from privehr.resources import mimic_extract_variables
from privehr.tasks.cohort import load_cohort
from privehr.tasks.run_directory import read_summary
from privehr.tasks.run_logging import run_logger
from privehr.tasks.split import load_manifest

__all__ = ["build_features", "load_split", "featurizer_statistics"]

NOTES = {"public": "MIMIC-Extract's published per-variable statistics (Wang et al. 2020): public, no privacy cost",
         "dp": "Gaussian mechanism on the training patients' clipped values (bounds: MIMIC-Extract's valid ranges)",
         "reproducible": "the DP mechanism with reproducible noise: not DP",
         "exact": "exact statistics of the training stays: computed outside any DP guarantee"}


def _known(variables: list[str], source: str):
    table = mimic_extract_variables().set_index("level2")
    unknown = [v for v in variables if v not in table.index]
    if unknown:
        raise InputError(f"release.featurizer: {source} needs MIMIC-Extract's published statistics or valid range of "
                         f"every variable; {len(unknown)} variable(s) have none (first: {unknown[0]!r}). Use "
                         "release.featurizer: exact for this file (its bundle is then not DP end to end).")
    return table.loc[variables]


EXACT_STATISTICS = "featurizer statistics (exact, of the training stays)"  # a release without a guarantee


def featurizer_statistics(data: dict, train: np.ndarray, source: FeaturizerSource, privacy: PrivacyConfig,
                          reserved: Reserved | None, records: float | None = None):
    """The featurizer's (mean, std) by ``source``; a DP release enters the ledger before anything is written.

    ``records``: the released (DP or public) count of training stays. Where it shows that a DP release would
    leave every variable on the public values (``can_inform``), the release is not made, its reservation is
    voided and the public statistics are used: nothing spent, and said. Returns (statistics, the ledger's release
    id or None, why a DP release was not made or None)."""
    variables = data["variables"].tolist()
    if source == "exact":  # recorded as a release without a guarantee before anything is written
        release = None if reserved is None else record_release(privacy.ledger_path, reserved.reservation, LedgerEntry(
            "", "", "non_private", what=EXACT_STATISTICS)).release
        return exact_statistics(data["mean"][train], data["count"][train]), release, None
    table = _known(variables, source)
    if source == "public":
        return public_statistics(variables, dict(zip(variables, zip(table["mean"], table["sd"])))), None, None
    public = public_statistics(variables, dict(zip(variables, zip(table["mean"], table["sd"]))))
    if records is not None and not can_inform(reserved.plan.noise_multiplier, len(variables), records):
        threshold = fallback_threshold(reserved.plan.noise_multiplier, len(variables))
        why = (f"about {records:.0f} training stays, below the {threshold:.0f} every variable's noisy count would "
               "need: all would fall back to the published statistics")
        void_reservation(privacy.ledger_path, reserved.reservation, "not made: " + why)
        run_logger().info("features: the DP featurizer release was not made (%s); nothing spent", why)
        return public, None, why
    noise = NoiseSource.for_release(privacy.reproducible_noise, "featurizer statistics")
    statistics = dp_statistics(data["mean"][train], data["count"][train], data["subject_id"][train],
                               table["valid_low"].to_numpy(float), table["valid_high"].to_numpy(float),
                               reserved.plan.noise_multiplier, noise.numpy_generator("featurizer"),
                               fallback_mean=table["mean"].to_numpy(float),  # public: where the noise is too large
                               fallback_std=table["sd"].where(table["sd"] > 0, 1.0).to_numpy(float))
    entry = reserved.plan.ledger_entry(noise.guarantee, "featurizer statistics")
    return statistics, record_release(privacy.ledger_path, reserved.reservation, entry).release, None


def _released(run: RunLayout):
    if not run.featurizer.exists():
        raise RuntimeError("release.featurizer: dp needs the reservation of the preprocessing budget check")
    saved = json.loads(run.featurizer.read_text())
    return FeaturizerStatistics(np.array(saved["mean"]), np.array(saved["std"]), "dp",
                                np.array(saved["fallback"], dtype=bool)), saved["release"]


@task(name="features")
def build_features(cohort_path: str, manifest_path: str, run_dir: str, source: FeaturizerSource = "exact",
                   privacy: PrivacyConfig | None = None, reserved: Reserved | None = None) -> str:
    """Write ``intermediate/features_<split>.npz`` and ``featurizer.json``; return the directory.

    ``source`` names where the statistics come from (``release.featurizer``); ``dp`` needs the reservation of the
    preprocessing budget check and records its release in the ledger."""
    data = load_cohort(cohort_path)
    manifest = load_manifest(manifest_path)
    members = {s: np.isin(data["icustay_id"], manifest["icustay_ids"][s]) for s in SPLITS}
    empty = [s for s in SPLITS if not members[s].any()]
    if empty:
        raise InputError(f"split(s) {empty} received no stays ({len(data['icustay_id'])} cohort stays); use "
                         "a larger input file or other split fractions.")
    train = members["train"]
    run = RunLayout(run_dir)
    skipped = None
    if source == "dp" and reserved is None:  # a resumed run: its earlier attempt released them (recorded then)
        statistics, release = _released(run)
    else:
        records = read_summary(run_dir, "record_counts").of("train") if run.record_counts.exists() else None
        statistics, release, skipped = featurizer_statistics(data, train, source, privacy or PrivacyConfig(), reserved,
                                                             records)
        if source == "exact" and reserved is None and run.featurizer.exists():  # recorded by an earlier attempt
            release = json.loads(run.featurizer.read_text()).get("release")
    featurizer = HourlyFeaturizer.from_statistics(statistics.mean, statistics.std)
    out_dir = run.intermediate
    for split in SPLITS:
        idx = members[split]
        feats = featurizer.transform(data["mean"][idx], data["count"][idx])
        np.savez(out_dir / f"features_{split}.npz", values=feats.values, mask=feats.mask, delta=feats.delta,
                 icustay_id=data["icustay_id"][idx], labels=np.stack([data[lab][idx] for lab in LABELS], 1),
                 label_names=np.array(LABELS))
    kind = "reproducible" if release and source == "dp" and privacy.reproducible_noise else statistics.source
    fitted = {"source": kind, "release": release, "delta_fill": featurizer.delta_fill,
              "variables": data["variables"].tolist(), "mean": featurizer.mean_.tolist(),
              "std": featurizer.std_.tolist(), "fallback": np.asarray(statistics.fallback).tolist(),
              "note": NOTES[kind] + (f"; a DP release was not made: {skipped}" if skipped else "")}
    run.featurizer.write_text(strict_dumps(fitted))
    run_logger().info("features: %s statistics of %d variables", kind, len(fitted["variables"]))
    return str(out_dir)


# numpy parses each array's header with ast.literal_eval, and CPython 3.11's AST constructor is not safe across
# threads (gh-106905: "AST constructor recursion depth mismatch"): the grid's fits run as threads and load at once
_LOADING = threading.Lock()


def load_split(features_dir: str, split: str) -> dict[str, np.ndarray]:
    with _LOADING, np.load(Path(features_dir) / f"features_{split}.npz") as npz:
        return {k: npz[k] for k in npz.files}
