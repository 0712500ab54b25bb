"""Affine scaling of a table before a flow sees it: z = (x - center) / scale, x = center + scale * z.

Two ways to choose (center, scale):

* ``from_bounds``: from the steward's physiological bounds, center = (low + high) / 2 and
  scale = (high - low) / 4. Data-independent, so the synthetic data's units reveal nothing about the
  private records and the DP guarantee covers the whole release.
* ``fit``: the training rows' mean and standard deviation (what the seeds' code does). Better
  conditioned, but these statistics are computed on private data without noise and are visible in
  every synthetic table (its location and spread): outside the DP guarantee.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["AffineScaling"]


class AffineScaling:
    def __init__(self, center: np.ndarray, scale: np.ndarray, columns: list[str], private: bool):
        self.center_, self.scale_ = np.asarray(center, float), np.asarray(scale, float)
        self.columns_, self.private_ = list(columns), private  # private: the statistics came from private rows

    @classmethod
    def from_bounds(cls, bounds: dict[str, tuple[float, float]], columns: list[str]) -> "AffineScaling":
        low = np.array([bounds[c][0] for c in columns], float)
        high = np.array([bounds[c][1] for c in columns], float)
        # a column with one value (one category, equal bounds) keeps scale 1: it maps to 0, not to inf
        return cls((low + high) / 2, np.where(high > low, (high - low) / 4, 1.0), columns, private=False)

    @classmethod
    def fit(cls, frame: pd.DataFrame) -> "AffineScaling":
        std = frame.std(ddof=0).replace(0, 1.0)
        return cls(frame.mean().to_numpy(), std.to_numpy(), list(frame.columns), private=True)

    def transform(self, frame: pd.DataFrame) -> np.ndarray:
        return (frame[self.columns_].to_numpy(float) - self.center_) / self.scale_

    def inverse_transform(self, z: np.ndarray) -> pd.DataFrame:
        return pd.DataFrame(self.center_ + self.scale_ * np.asarray(z, float), columns=self.columns_)
