"""Affine scaling of a table before a flow sees it: z = (x - center) / scale, x = center + scale * z.

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.

Two ways to choose (center, scale), both learnt by :meth:`AffineScaling.fit`:

* ``AffineScaling(bounds=...)``: from the steward's physiological bounds, center = (low + high) / 2 and
  scale = (high - low) / 4. Data-independent (``fit`` reads only the frame's column names), so the
  synthetic data's units reveal nothing about the private records and the DP guarantee covers the whole
  release.
* ``AffineScaling()``: the training rows' mean and standard deviation (as Su et al. 2023 scale). Better
  conditioned, but these statistics are computed on private data without noise and are visible in
  every synthetic table (its location and spread): outside the DP guarantee.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

__all__ = ["AffineScaling"]


class AffineScaling(TransformerMixin, BaseEstimator):
    """Per-column affine scaling, fitted on training rows and applied to any rows.

    Args:
        bounds: column -> (low, high) to scale by the bounds; None to scale by the training rows' mean and
            standard deviation (ddof 0; a constant column keeps scale 1).
    Attributes (after ``fit``):
        center_, scale_: per-column center and scale (a column with equal bounds keeps scale 1).
        columns_: the fitted columns, in order (``transform`` selects them by name).
        private_: whether center_ and scale_ were computed from the (private) rows.

    >>> train = pd.DataFrame({"x": [1.0, 3.0], "y": [0.0, 10.0]})
    >>> scaling = AffineScaling().fit(train)
    >>> scaling.transform(pd.DataFrame({"y": [5.0], "x": [4.0]})).tolist(), scaling.private_
    ([[2.0, 0.0]], True)
    >>> AffineScaling(bounds={"x": (0, 8), "y": (0, 10)}).fit(train).center_.tolist()
    [4.0, 5.0]
    """

    def __init__(self, bounds: dict[str, tuple[float, float]] | None = None):
        self.bounds = bounds

    def fit(self, X: pd.DataFrame, y=None) -> "AffineScaling":
        """Learn (center, scale) for the columns of ``X`` (from the training rows, or from ``bounds``)."""
        columns = list(X.columns)
        if self.bounds is None:
            std = X.std(ddof=0).replace(0, 1.0)
            self.center_, self.scale_ = X.mean().to_numpy(float), std.to_numpy(float)
        else:
            low = np.array([self.bounds[c][0] for c in columns], float)
            high = np.array([self.bounds[c][1] for c in columns], float)
            # a column with one value (one category, equal bounds) keeps scale 1: it maps to 0, not to inf
            self.center_, self.scale_ = (low + high) / 2, np.where(high > low, (high - low) / 4, 1.0)
        self.columns_, self.private_ = columns, self.bounds is None  # private: the statistics came from the rows
        return self

    def transform(self, X: pd.DataFrame) -> np.ndarray:
        check_is_fitted(self, "center_")
        return (X[self.columns_].to_numpy(float) - self.center_) / self.scale_

    def inverse_transform(self, z: np.ndarray) -> pd.DataFrame:
        check_is_fitted(self, "center_")
        return pd.DataFrame(self.center_ + self.scale_ * np.asarray(z, float), columns=self.columns_)
