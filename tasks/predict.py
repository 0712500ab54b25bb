"""Scoring new stays with a release bundle alone: ``privehr predict`` and the ``privehr-score`` flow.

The bundle carries everything applying a model needs (the window, the outlier bounds the training run masked by,
the featurizer's statistics, each model's architecture and weights); nothing is read from the run that trained it.
A stay is scored when the file holds its first ``window_hours`` hours (``max_hours >= window_hours``); the column
``in_cohort`` says whether it also meets the training cohort's rule (``max_hours > window + gap``), the population the
card's evaluation describes. The scores are patient-level: they go to the file the user names and nowhere else.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from prefect import task

from privehr.core.errors import InputError
from privehr.io.mimic_extract import read_window
from privehr.io.permissions import private_file
from privehr.io.release_bundle import Bundle, read_bundle
from privehr.models.classifiers import build_classifier, classifier_inputs
from privehr.models.classifiers.training import predict_proba
from privehr.models.data.hourly_features import HourlyFeaturizer
from privehr.models.data.quarantine import mask_outside

__all__ = ["score_stays", "score_stays_task", "apply_bundle"]


def _masked(window, featurizer: dict) -> tuple[np.ndarray, np.ndarray]:
    """The hourly means and counts as the training run saw them: values beyond the outlier bounds missing."""
    mean, count = window.mean.astype(float), window.count.astype(float)
    if featurizer["mask_beyond_outlier_bounds"]:
        low, high = (np.array([np.nan if v is None else v for v in featurizer[k]]) for k in ("outlier_low",
                                                                                           "outlier_high"))
        mask_outside(mean, count, low, high)  # the rule the training run's cohort applied
    return mean, count


def apply_bundle(bundle: Bundle, mean: np.ndarray, count: np.ndarray, models: list[str] | None = None,
                 device: str = "cpu") -> dict[str, np.ndarray]:
    """Risks per bundled model (cell id -> probabilities) for (stays, hours, variables) hourly means and counts."""
    f = bundle.featurizer
    features = HourlyFeaturizer.from_statistics(np.array(f["mean"]), np.array(f["std"]),
                                                f["delta_fill"]).transform(mean, count)
    available = bundle.models()
    wanted = models or sorted(available)
    unknown = [m for m in wanted if m not in available]
    if unknown:
        raise InputError(f"the bundle has no model {unknown[0]!r}; it holds {sorted(available)}")
    risks = {}
    for cell_id in wanted:
        try:  # weights only: a pickle payload is refused, never run
            saved = torch.load(available[cell_id], weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as err:
            raise InputError(f"model file {available[cell_id]} is not a weights-only PyTorch file (a pickle payload, "
                             f"or truncated: {type(err).__name__}); it was not loaded. Copy the bundle again from its "
                             "run") from None
        arch = saved["architecture"]
        model = build_classifier(arch["model"], arch["n_variables"], arch["n_hours"], seed=0,
                                 hidden_size=arch["hidden_size"])
        model.load_state_dict(saved["state_dict"])
        model.eval()
        inputs = classifier_inputs(arch["model"], features.values, features.mask, features.delta, device)
        risks[cell_id] = predict_proba(model.to(device), inputs)
    return risks


def score_stays(bundle_path: str | Path, data_path: str | Path, out_path: str | Path,
                models: list[str] | None = None, chunk_rows: int = 32768) -> dict:
    """Score every stay of a MIMIC-Extract file with at least the window's hours; write ``out_path`` (CSV) and
    return a summary of counts (no patient-level value)."""
    bundle = read_bundle(bundle_path)
    if bundle.featurizer is None:
        raise InputError(f"release bundle {bundle.path} holds synthetic tables (a privehr-synthesize run), no model "
                         "to score stays with; give the release/ folder of a privehr-pipeline run")
    out_path, data_path = Path(out_path), Path(data_path)
    if out_path.resolve() == data_path.resolve():
        raise InputError(f"--out {out_path} is the input file; name another file for the scores")
    if out_path.resolve().is_relative_to(bundle.path.resolve()):
        raise InputError(f"--out {out_path} is inside the release bundle, which leaves the hospital; write the "
                         "scores where the data may be")
    f = bundle.featurizer
    window_hours, gap_hours = f["window_hours"], f["gap_hours"]
    try:
        patients = pd.read_hdf(data_path, "patients")
    except (ValueError, TypeError, KeyError, OSError) as err:
        raise InputError(f"key 'patients' in {data_path} cannot be read as a pandas table ({type(err).__name__}); "
                         "give a MIMIC-Extract file (all_hourly_data.h5)") from None
    ids = patients.reset_index()
    if not {"subject_id", "hadm_id", "icustay_id", "max_hours"} <= set(ids.columns):
        raise InputError(f"'patients' in {data_path} needs subject_id, hadm_id, icustay_id and max_hours, as "
                         "MIMIC-Extract writes them")
    hours = pd.to_numeric(ids["max_hours"], errors="coerce")
    stays = ids.loc[hours >= window_hours, ["subject_id", "hadm_id", "icustay_id"]].astype("int64")
    stays["in_cohort"] = (hours[hours >= window_hours] > window_hours + gap_hours).to_numpy()
    window = read_window(data_path, stays["icustay_id"].to_numpy(), window_hours, chunk_rows)
    if window.variables != f["variables"]:
        missing = [v for v in f["variables"] if v not in window.variables]
        raise InputError(f"{data_path} has {len(window.variables)} hourly variables; the bundle's models take "
                         f"{len(f['variables'])} in its order" + (f" (missing: {missing[:3]})" if missing else "")
                         + ". Extract the file with the same MIMIC-Extract variables (group_by_level2).")
    mean, count = _masked(window, f)
    risks = apply_bundle(bundle, mean, count, models)
    table = stays.reset_index(drop=True)
    for cell_id, p in risks.items():
        table[f"risk_{cell_id}"] = p
    with private_file(out_path) as tmp:  # patient-level: 0600, also over an existing file
        table.to_csv(tmp, index=False)
    return {"bundle": str(bundle.path), "data": str(data_path), "out": str(out_path), "stays": int(len(table)),
            "in_cohort": int(table["in_cohort"].sum()), "models": sorted(risks),
            "guarantee": bundle.manifest["guarantee"]}


score_stays_task = task(score_stays, name="score-stays")  # the privehr-score flow's one task
