"""The MIMIC-Extract benchmark cohort and its labels (Wang et al., CHIL 2020).

A stay enters the cohort when max_hours > window + gap (24 h + 6 h); its inputs are the first
``window`` hours and its labels are the four the benchmark defines for this cohort:

    mort_hosp = 1[death in the hospital],  mort_icu = 1[death in the ICU],
    los_3 = 1[los_icu > 3 days],           los_7 = 1[los_icu > 7 days].

The demographics MIMIC-Extract's ``patients`` table carries (gender, age, ethnicity) travel with the
stays, where present, for the subgroup evaluation (``models/evaluation/subgroups.py``); they are never inputs.

Stays whose labels are missing or not binary, and stays that appear more than once, are excluded and
counted, never dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

__all__ = ["Cohort", "select_cohort", "ID_COLUMNS", "LABELS", "DEMOGRAPHICS"]

ID_COLUMNS = ["subject_id", "hadm_id", "icustay_id"]
LABELS = ["mort_hosp", "mort_icu", "los_3", "los_7"]
DEMOGRAPHICS = ["gender", "age", "ethnicity"]


@dataclass
class Cohort:
    """Cohort stays (ids, labels) in file order, and why every other stay was left out."""

    stays: pd.DataFrame
    exclusions: dict[str, int] = field(default_factory=dict)

    def label_rates(self) -> dict[str, float]:
        return {label: float(self.stays[label].mean()) for label in LABELS if len(self.stays)}


def select_cohort(patients: pd.DataFrame, window_hours: int = 24, gap_hours: int = 6) -> Cohort:
    """Apply the benchmark's cohort rule to the ``patients`` table.

    Args:
        patients: MIMIC-Extract ``patients`` with index (subject_id, hadm_id, icustay_id) and columns
            mort_icu, mort_hosp, los_icu, max_hours (and, optionally, gender, age, ethnicity).
        window_hours: hours of input data per stay.
        gap_hours: hours between the end of the window and the earliest admissible outcome.
    Returns:
        Cohort with columns subject_id, hadm_id, icustay_id, max_hours, los_icu, the labels and the
        demographics present.
    """
    table = patients.reset_index()
    table = table[ID_COLUMNS + ["max_hours", "los_icu", "mort_icu", "mort_hosp"]
                  + [c for c in DEMOGRAPHICS if c in table]]
    exclusions = {}

    duplicated = table["icustay_id"].duplicated(keep=False)
    exclusions["duplicate_stays"] = int(duplicated.sum())
    table = table[~duplicated]

    mort = pd.to_numeric(table["mort_icu"], errors="coerce")
    mort_hosp = pd.to_numeric(table["mort_hosp"], errors="coerce")
    los = pd.to_numeric(table["los_icu"], errors="coerce")
    hours = pd.to_numeric(table["max_hours"], errors="coerce")
    missing = mort.isna() | mort_hosp.isna() | los.isna() | hours.isna()
    exclusions["missing_labels"] = int(missing.sum())
    non_binary = ~missing & ~(mort.isin([0, 1]) & mort_hosp.isin([0, 1]))
    exclusions["non_binary_labels"] = int(non_binary.sum())
    keep = ~missing & ~non_binary
    short = keep & (hours <= window_hours + gap_hours)
    exclusions[f"max_hours_le_{window_hours + gap_hours}"] = int(short.sum())
    keep &= ~short

    stays = table[keep].copy()
    stays["mort_icu"] = mort[keep].astype(np.int64)
    stays["mort_hosp"] = mort_hosp[keep].astype(np.int64)
    stays["los_icu"] = los[keep].astype(float)
    stays["max_hours"] = hours[keep].astype(np.int64)
    stays["los_3"] = (stays["los_icu"] > 3).astype(np.int64)
    stays["los_7"] = (stays["los_icu"] > 7).astype(np.int64)
    for col in ("gender", "ethnicity"):
        if col in stays:
            stays[col] = stays[col].astype(object).where(stays[col].notna(), "").astype(str)
    if "age" in stays:
        stays["age"] = pd.to_numeric(stays["age"], errors="coerce").astype(float)
    for col in ID_COLUMNS:
        stays[col] = stays[col].astype(np.int64)
    return Cohort(stays.reset_index(drop=True), exclusions)
