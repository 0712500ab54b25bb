"""Cohort: select the benchmark stays and stream their first hours out of ``vitals_labs``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from prefect import task

from privehr.models.data.cohort import select_cohort
from privehr.models.data.quarantine import mask_beyond_bounds
from privehr.core.run_layout import RunLayout
from privehr.core.errors import InputError
from privehr.core.specs import load_mimic_spec
from privehr.io.mimic_extract import read_patients, read_window
from privehr.tasks.run_logging import exact, run_logger
from privehr.io.validation import EXCLUDED_STAYS

__all__ = ["build_cohort", "load_cohort"]


def _quarantined_stays(validation_report: str | None) -> set[int]:
    if validation_report is None:
        return set()
    report = json.loads(Path(validation_report).read_text())
    excluded = pd.read_csv(Path(report["quarantine_dir"]) / EXCLUDED_STAYS)
    return set(excluded["icustay_id"].astype("int64"))


@task(name="cohort")
def build_cohort(hdf5_path: str, run_dir: str, window_hours: int = 24, gap_hours: int = 6,
                 chunk_rows: int = 32768, validation_report: str | None = None, mimic_spec: str | None = None) -> str:
    """Write the cohort window (``intermediate/cohort.npz``) and ``cohort.json`` (counts); return the npz path.

    With a ``validation_report``, the stays it quarantined are left out (counted as ``quarantined``) and
    hourly values beyond the spec's outlier bounds are treated as missing, as the quarantine lists them.
    """
    patients = read_patients(hdf5_path)
    quarantined = _quarantined_stays(validation_report)
    keep = ~patients.index.get_level_values("icustay_id").isin(list(quarantined))
    cohort = select_cohort(patients[keep], window_hours, gap_hours)
    cohort.exclusions = {"quarantined": int((~keep).sum()), **cohort.exclusions}
    _check_size(cohort, len(patients), window_hours, gap_hours)
    window = read_window(hdf5_path, cohort.stays["icustay_id"].to_numpy(), window_hours, chunk_rows)
    masked = 0
    if validation_report is not None:
        bounds = load_mimic_spec(mimic_spec).bounds()
        masked = mask_beyond_bounds(window.mean, window.count, window.variables, bounds)
    out = RunLayout(run_dir).cohort_arrays
    np.savez(out, mean=window.mean, count=window.count, variables=np.array(window.variables),
             **{c: _array(cohort.stays[c]) for c in cohort.stays.columns})
    summary = {"stays": int(len(cohort.stays)), "subjects": int(cohort.stays["subject_id"].nunique()),
               "variables": len(window.variables), "window_hours": window_hours,
               "label_rates": cohort.label_rates(), "exclusions": cohort.exclusions,
               "missing_hour_rows": int(window.missing_rows), "values_masked_beyond_outlier": masked,
               "missing_fraction_means": float(np.isnan(window.mean).mean()) if window.mean.size else None}
    RunLayout(run_dir).cohort_summary.write_text(json.dumps(summary, indent=2))
    run_logger().info("cohort: %s stays kept, excluded %s", exact(summary["stays"]),
                      {k: exact(v) for k, v in cohort.exclusions.items()})
    return str(out)


def _array(column: pd.Series) -> np.ndarray:
    """A column as a plain array (text as fixed-width unicode: the npz is read without pickle)."""
    text = column.dtype == object or pd.api.types.is_string_dtype(column.dtype)
    return column.to_numpy(dtype=str) if text else column.to_numpy()


FIXES = {"quarantined": "see the validation report and the quarantine files",
         "duplicate_stays": "deliver each stay once",
         "missing_labels": "deliver mort_icu, mort_hosp, los_icu and max_hours for every stay",
         "non_binary_labels": "deliver mort_icu and mort_hosp as integers 0/1",
         "later_stays_of_a_subject": "the cohort keeps one stay per patient (the unit of privacy): deliver more "
                                     "patients"}


def _check_size(cohort, delivered: int, window_hours: int, gap_hours: int) -> None:
    """Stop with the rule that emptied the cohort (a split needs 3 subjects), not with a generic size message."""
    subjects = int(cohort.stays["subject_id"].nunique())
    if subjects >= 3:
        return
    rules = {k: n for k, n in cohort.exclusions.items() if n}
    listed = ", ".join(f"{k}: {n}" for k, n in rules.items()) or "none"
    worst = max(rules, key=rules.get) if rules else None
    fix = ("deliver stays of at least 3 subjects" if worst is None else
           FIXES.get(worst, f"stays must last more than window_hours + gap_hours = {window_hours + gap_hours} h; "
                            "deliver longer stays or lower data.window_hours / data.gap_hours"))
    raise InputError(f"the cohort kept {subjects} subject(s) of {delivered} stay(s) delivered (a train/dev/test "
                     f"split needs at least 3); stays excluded by rule: {listed}. Fix for the largest: {fix}.")


def load_cohort(path: str) -> dict[str, np.ndarray]:
    with np.load(path) as npz:
        return {k: npz[k] for k in npz.files}
