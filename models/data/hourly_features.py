"""Hourly features of the first hours of a stay: standardised values, a mask and time since measured.

For variable v of stay i at hour t, with m_itv = 1[count_itv > 0] (MIMIC-Extract's mask):

    z_itv     = (mean_itv - mu_v) / sd_v,  mu_v and sd_v over observed training cells only;
    x_itv     = z at the last observed hour <= t of the same stay (forward fill within the stay),
                else the stay's mean of observed z over the window, else 0 (= the training mean);
    delta_itv = t - (last observed hour <= t) within the stay, or ``delta_fill`` if none yet.

Everything is computed within each stay (MIMIC-Extract's time_since_measured carries a cumulative
sum across stays; here it does not). ``fit`` sees training stays only; ``transform`` applies the
fitted statistics to any split. The logistic-regression input flattens (mask, x, delta / delta_fill).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

__all__ = ["HourlyFeaturizer", "HourlyFeatures", "flatten_for_linear"]


@dataclass
class HourlyFeatures:
    """(stays, hours, variables) float32 tensors ready for GRU-D."""

    values: np.ndarray
    mask: np.ndarray
    delta: np.ndarray


class HourlyFeaturizer(TransformerMixin, BaseEstimator):
    """Standardise, impute and time-stamp hourly means; statistics fitted on training stays.

    Args:
        delta_fill: delta for hours before a variable's first measurement (MIMIC-Extract: 100).
    Attributes (after ``fit``):
        mean_, std_: per-variable statistics of observed training cells (mean 0 / std 1 for a
            variable never observed in training; std 1 where it is 0).
        observed_fraction_: per-variable share of observed training cells.

    ``fit`` and ``transform`` take (stays, hours, variables) arrays of hourly means and measurement counts;
    ``transform`` applies the training statistics to any stays (here a held-out one):

    >>> mean = np.array([[[1.0], [np.nan]], [[3.0], [5.0]]])  # 2 training stays x 2 hours x 1 variable
    >>> f = HourlyFeaturizer().fit(mean, np.isfinite(mean))
    >>> f.mean_.tolist(), f.std_.tolist()
    ([3.0], [2.0])
    >>> held_out = np.array([[[7.0], [np.nan]]])
    >>> out = f.transform(held_out, np.isfinite(held_out))
    >>> out.values[0, :, 0].tolist(), out.delta[0, :, 0].tolist()
    ([2.0, 2.0], [0.0, 1.0])
    """

    def __init__(self, delta_fill: float = 100.0):
        self.delta_fill = delta_fill

    @staticmethod
    def _mask(mean: np.ndarray, count: np.ndarray) -> np.ndarray:
        return (count > 0) & np.isfinite(mean)

    def fit(self, mean: np.ndarray, count: np.ndarray) -> "HourlyFeaturizer":
        mask = self._mask(mean, count)
        n = mask.sum(axis=(0, 1))
        total = np.where(mask, mean, 0.0).sum(axis=(0, 1))
        mu = np.divide(total, n, out=np.zeros_like(total), where=n > 0)
        sq = np.where(mask, (mean - mu) ** 2, 0.0).sum(axis=(0, 1))
        var = np.divide(sq, n - 1, out=np.zeros_like(sq), where=n > 1)
        sd = np.sqrt(var)
        self.mean_ = mu
        self.std_ = np.where(sd > 1e-8, sd, 1.0)
        self.observed_fraction_ = n / max(mask.shape[0] * mask.shape[1], 1)
        return self

    @classmethod
    def from_statistics(cls, mean: np.ndarray, std: np.ndarray, delta_fill: float = 100.0) -> "HourlyFeaturizer":
        """A featurizer whose statistics come from elsewhere (public ones, a DP release, a release bundle)."""
        featurizer = cls(delta_fill)
        featurizer.mean_ = np.asarray(mean, dtype=float)
        featurizer.std_ = np.where(np.asarray(std, dtype=float) > 1e-8, np.asarray(std, dtype=float), 1.0)
        return featurizer

    def transform(self, mean: np.ndarray, count: np.ndarray) -> HourlyFeatures:
        check_is_fitted(self, ("mean_", "std_"),
                        msg="HourlyFeaturizer must be fitted on training stays before transform")
        mask = self._mask(mean, count)
        z = np.where(mask, (mean - self.mean_) / self.std_, np.nan)
        hours = np.arange(mean.shape[1])[None, :, None]
        last = np.maximum.accumulate(np.where(mask, hours, -1), axis=1)
        filled = np.take_along_axis(z, np.maximum(last, 0), axis=1)
        filled = np.where(last >= 0, filled, np.nan)
        n_obs = mask.sum(axis=1, keepdims=True)
        stay_mean = np.divide(np.nansum(z, axis=1, keepdims=True), n_obs,
                              out=np.zeros(n_obs.shape), where=n_obs > 0)
        values = np.where(np.isnan(filled), stay_mean, filled)
        delta = np.where(last >= 0, hours - last, self.delta_fill)
        return HourlyFeatures(values.astype(np.float32), mask.astype(np.float32), delta.astype(np.float32))

    def fit_transform(self, mean: np.ndarray, count: np.ndarray) -> HourlyFeatures:
        return self.fit(mean, count).transform(mean, count)


def flatten_for_linear(values: np.ndarray, mask: np.ndarray, delta: np.ndarray,
                       delta_fill: float = 100.0) -> np.ndarray:
    """(stays, 3 * hours * variables) matrix of (mask, value, delta / delta_fill) per variable-hour."""
    return np.concatenate([mask, values, delta / delta_fill], axis=-1).reshape(len(values), -1)
