"""Cohort: select the benchmark stays and stream their first hours out of ``vitals_labs``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from prefect import task

from models.cohort import select_cohort
from tasks.mimic_extract import read_patients, read_window
from tasks.run_directory import INTERMEDIATE
from tasks.run_logging import run_logger

__all__ = ["build_cohort", "load_cohort"]


@task(name="cohort")
def build_cohort(hdf5_path: str, run_dir: str, window_hours: int = 24, gap_hours: int = 6,
                 chunk_rows: int = 32768) -> str:
    """Write the cohort window (``intermediate/cohort.npz``) and ``cohort.json`` (counts); return the npz path."""
    cohort = select_cohort(read_patients(hdf5_path), window_hours, gap_hours)
    window = read_window(hdf5_path, cohort.stays["icustay_id"].to_numpy(), window_hours, chunk_rows)
    out = Path(run_dir) / INTERMEDIATE / "cohort.npz"
    np.savez(out, mean=window.mean, count=window.count, variables=np.array(window.variables),
             **{c: cohort.stays[c].to_numpy() for c in cohort.stays.columns})
    summary = {"stays": int(len(cohort.stays)), "subjects": int(cohort.stays["subject_id"].nunique()),
               "variables": len(window.variables), "window_hours": window_hours,
               "label_rates": cohort.label_rates(), "exclusions": cohort.exclusions,
               "missing_hour_rows": int(window.missing_rows),
               "missing_fraction_means": float(np.isnan(window.mean).mean()) if window.mean.size else None}
    (Path(run_dir) / "cohort.json").write_text(json.dumps(summary, indent=2))
    run_logger().info("cohort: %d stays kept, excluded %s", summary["stays"], cohort.exclusions)
    return str(out)


def load_cohort(path: str) -> dict[str, np.ndarray]:
    with np.load(path) as npz:
        return {k: npz[k] for k in npz.files}
