"""The per-stay static table of MIMIC-Extract: demographics and 24 h summaries, one row per stay.

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.

Columns: ``age`` (MIMIC-III shifts ages above 89 to about 300; they are set to 91.4, the median
age of that group), ``gender_male`` (0/1), and for each LEVEL2 variable the mean of its hourly means
over the first hours (NaN where it was never measured), the table that the MICE step (after Su et al. 2023) and the
static baselines use.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

__all__ = ["static_table", "SHIFTED_AGE"]

SHIFTED_AGE = 91.4


def static_table(icustay_ids: np.ndarray, window_mean: np.ndarray, variables: list[str],
                 demographics: pd.DataFrame) -> pd.DataFrame:
    """``window_mean`` is (stays, hours, variables); ``demographics`` is indexed by icustay_id with
    ``age`` and ``gender``. Returns a frame indexed by icustay_id."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # never measured in the window: the mean is NaN
        means = np.nanmean(window_mean, axis=1)
    columns = [f"{v} (24h mean)" for v in variables]
    table = pd.DataFrame(means, index=pd.Index(icustay_ids, name="icustay_id"), columns=columns)
    demo = demographics.reindex(table.index)
    age = pd.to_numeric(demo["age"], errors="coerce")
    table.insert(0, "age", age.where(age < 200, SHIFTED_AGE).to_numpy())
    table.insert(1, "gender_male", (demo["gender"].astype(str) == "M").astype(float).to_numpy())
    return table
