"""Small tables that summarise the wide hourly table for validation, built chunk by chunk.

* Variable profile (one row per LEVEL2 variable): non-null fraction of its hourly means, share of
  values beyond the outlier bounds and outside the valid range, and the mean of its values; a mean
  outside the valid range flags a unit mismatch (98.6 for a temperature in degC).
* Stay keys (one row per stay): rows, first and last ``hours_in``, duplicated hours, contiguity.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["VariableProfile", "outlier_bounds", "stay_keys"]


def outlier_bounds(variables: list[str], bounds: dict) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) outlier bounds per variable; NaN where a variable has none (never beyond it)."""
    def col(attr):
        return np.array([getattr(bounds[v], attr) if v in bounds and getattr(bounds[v], attr) is not None
                         else np.nan for v in variables], dtype=float)
    return col("outlier_low"), col("outlier_high")


class VariableProfile:
    """Accumulates per-variable counts over row chunks of hourly means (rows x variables)."""

    def __init__(self, variables: list[str], bounds: dict):
        self.variables = list(variables)
        spec = [bounds.get(v) for v in self.variables]
        nan = np.nan

        def col(attr):
            return np.array([getattr(b, attr) if b is not None and getattr(b, attr) is not None else nan
                             for b in spec], dtype=float)
        self.in_spec = np.array([b is not None for b in spec])
        self.valid_low, self.valid_high = col("valid_low"), col("valid_high")
        self.outlier_low, self.outlier_high = outlier_bounds(self.variables, bounds)
        self.min_nonnull = np.array([b.min_nonnull_fraction if b is not None else 0.0 for b in spec])
        k = len(self.variables)
        self.rows, self.nonnull, self.beyond, self.outside = 0, np.zeros(k), np.zeros(k), np.zeros(k)
        self.total = np.zeros(k)

    def beyond_outlier(self, means: np.ndarray) -> np.ndarray:
        """Boolean (rows x variables): values beyond the outlier (hard) bounds."""
        with np.errstate(invalid="ignore"):
            return (means < self.outlier_low) | (means > self.outlier_high)

    def update(self, means: np.ndarray) -> np.ndarray:
        """Add a chunk; return its beyond-outlier mask."""
        observed = ~np.isnan(means)
        beyond = self.beyond_outlier(means)
        with np.errstate(invalid="ignore"):
            outside = (means < self.valid_low) | (means > self.valid_high)
        self.rows += means.shape[0]
        self.nonnull += observed.sum(0)
        self.beyond += beyond.sum(0)
        self.outside += outside.sum(0)
        self.total += np.where(observed, means, 0.0).sum(0)
        return beyond

    def frame(self) -> pd.DataFrame:
        n = np.maximum(self.nonnull, 1)
        mean = np.where(self.nonnull > 0, self.total / n, np.nan)
        in_range = np.isnan(mean) | ~self.in_spec | ~((mean < self.valid_low) | (mean > self.valid_high))
        return pd.DataFrame({
            "variable": self.variables, "in_spec": self.in_spec,
            "nonnull_fraction": self.nonnull / max(self.rows, 1), "min_nonnull_fraction": self.min_nonnull,
            "fraction_beyond_outlier": self.beyond / n, "fraction_outside_valid": self.outside / n,
            "mean": mean, "valid_low": self.valid_low, "valid_high": self.valid_high,
            "mean_in_valid_range": in_range})


def stay_keys(icustay: np.ndarray, hours_in: np.ndarray, patient_stays: np.ndarray) -> pd.DataFrame:
    """One row per stay of the hourly index: rows, first/last hour, duplicate rows, contiguity."""
    keys = pd.DataFrame({"icustay_id": icustay, "hours_in": hours_in})
    g = keys.groupby("icustay_id", sort=True)["hours_in"]
    out = pd.DataFrame({"rows": g.size(), "first_hour": g.min(), "last_hour": g.max(), "unique_hours": g.nunique()})
    out["duplicate_rows"] = out["rows"] - out["unique_hours"]
    out["contiguous"] = (out["last_hour"] - out["first_hour"] + 1) == out["unique_hours"]
    out = out.reset_index()
    out["in_patients"] = out["icustay_id"].isin(patient_stays)
    return out.drop(columns="unique_hours")
