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

__all__ = ["Cohort", "select_cohort", "stay_labels", "ID_COLUMNS", "LABELS", "LABEL_RULES", "DEMOGRAPHICS"]

ID_COLUMNS = ["subject_id", "hadm_id", "icustay_id"]
LABELS = ["mort_hosp", "mort_icu", "los_3", "los_7"]
# each label: the ``patients`` column it is read from and its rule on that column's numbers (the one definition:
# the cohort's labels and ``privehr predict``'s outcomes in MEDS files both come from here)
LABEL_RULES = {"mort_hosp": ("mort_hosp", lambda v: v == 1), "mort_icu": ("mort_icu", lambda v: v == 1),
               "los_3": ("los_icu", lambda v: v > 3), "los_7": ("los_icu", lambda v: v > 7)}
FLAG_COLUMNS = ("mort_hosp", "mort_icu")  # 0 or 1; another value is no label (the cohort excludes such a stay)
DEMOGRAPHICS = ["gender", "age", "ethnicity"]


def stay_labels(table: pd.DataFrame) -> dict[str, np.ndarray]:
    """Each label whose column ``table`` (a ``patients`` table, index reset) holds, per stay: 1.0, 0.0, or nan
    where the column's value is missing, not a number, or (a death flag) neither 0 nor 1."""
    labels = {}
    for label, (column, rule) in LABEL_RULES.items():
        if column not in table:
            continue
        values = pd.to_numeric(table[column], errors="coerce").to_numpy(dtype=float)
        known = ~np.isnan(values) & (np.isin(values, (0, 1)) if column in FLAG_COLUMNS else True)
        with np.errstate(invalid="ignore"):
            labels[label] = np.where(known, rule(values), np.nan)
    return labels


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
                  + [c for c in DEMOGRAPHICS + ["intime"] if c in table]]
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

    # one stay per patient, the subject's earliest eligible one (MIMIC-Extract's cohort keeps first stays already): the
    # unit every DP release and the per-patient budget protect is the subject, and a second stay would be a second
    # record of them in the same release
    order = pd.to_datetime(table["intime"], errors="coerce") if "intime" in table else table["icustay_id"]
    first = table.assign(_order=order)[keep].sort_values(["_order", "icustay_id"]).drop_duplicates("subject_id").index
    later = keep & ~table.index.isin(first)
    exclusions["later_stays_of_a_subject"] = int(later.sum())
    keep &= ~later

    stays = table[keep].copy()
    stays["los_icu"] = los[keep].astype(float)
    stays["max_hours"] = hours[keep].astype(np.int64)
    for label, values in stay_labels(stays).items():  # every one known: missing and non-binary stays left out
        stays[label] = values.astype(np.int64)
    for col in ("gender", "ethnicity"):
        if col in stays:
            stays[col] = stays[col].astype(object).where(stays[col].notna(), "").astype(str)
    if "age" in stays:
        stays["age"] = pd.to_numeric(stays["age"], errors="coerce").astype(float)
    for col in ID_COLUMNS:
        stays[col] = stays[col].astype(np.int64)
    return Cohort(stays.drop(columns=["intime"], errors="ignore").reset_index(drop=True), exclusions)
