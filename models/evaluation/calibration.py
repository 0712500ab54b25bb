"""Calibration of predicted probabilities: Brier score, expected calibration error, slope and intercept.

DP-SGD's clipping and noise, and ExpM+NF's sampling, distort predicted probabilities even where the
ranking (AUROC) survives, so a clinical team asks whether "30 %" means 30 %:

* Brier score: mean (p - y)^2.
* Expected calibration error over equal-mass bins: the predictions sorted and cut into ``bins``
  groups of (nearly) equal size, ECE = sum_b (n_b / n) |mean p_b - mean y_b| (Naeini et al., AAAI 2015,
  with the equal-mass binning of Nixon et al., CVPR-W 2019: equal-width bins are nearly empty for a
  rare outcome).
* Calibration slope and intercept (Cox 1958; Van Calster et al., J Clin Epidemiol 2016): the slope b
  of the logistic recalibration logit P(y) = a + b logit(p), 1 when ideal; the intercept a' of
  logit P(y) = a' + logit(p) (slope fixed at 1: calibration-in-the-large), 0 when ideal.

The reliability diagram's points are the bins' (mean p, mean y): aggregates over n / bins stays each.

>>> import numpy as np
>>> p = np.array([0.1, 0.2, 0.3, 0.4]); y = np.array([0, 0, 1, 1])
>>> round(brier_score(y, p), 3)
0.225
>>> round(expected_calibration_error(y, p, bins=2), 3)
0.4
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit
from sklearn.linear_model import LogisticRegression

__all__ = ["brier_score", "equal_mass_bins", "expected_calibration_error", "calibration_slope_intercept",
           "Calibration", "calibration"]

_CLIP = 1e-6  # probabilities are clipped to [1e-6, 1 - 1e-6] before the logit


def brier_score(y, p) -> float:
    y, p = np.asarray(y, float), np.asarray(p, float)
    return float(np.mean((p - y) ** 2))


def equal_mass_bins(p, bins: int) -> list[np.ndarray]:
    """Indices of ``bins`` groups of nearly equal size, by increasing prediction (ties by position)."""
    order = np.argsort(np.asarray(p, float), kind="stable")
    return [part for part in np.array_split(order, min(bins, order.size)) if part.size]


def expected_calibration_error(y, p, bins: int = 10) -> float:
    y, p = np.asarray(y, float), np.asarray(p, float)
    return float(sum(idx.size / y.size * abs(p[idx].mean() - y[idx].mean()) for idx in equal_mass_bins(p, bins)))


def _logit(p):
    p = np.clip(np.asarray(p, float), _CLIP, 1 - _CLIP)
    return np.log(p) - np.log1p(-p)


def _intercept_with_offset(y: np.ndarray, z: np.ndarray) -> float:
    """The MLE of a in logit P(y) = a + z: the root of sum(y - expit(a + z)), monotone in a."""
    score = lambda a: float(np.sum(y - expit(a + z)))  # noqa: E731
    low, high = -60.0, 60.0
    if score(low) <= 0 or score(high) >= 0:
        return float("nan")
    return float(brentq(score, low, high, xtol=1e-10))


def calibration_slope_intercept(y, p) -> tuple[float, float]:
    """(slope, intercept): the slope of logit P(y) = a + b logit(p); the intercept with the slope fixed at 1.
    NaN where a class is absent."""
    y = np.asarray(y, float)
    z = _logit(p)
    if y.min() == y.max():
        return float("nan"), float("nan")
    if np.ptp(z) == 0:  # constant predictions: no slope to estimate
        slope = float("nan")
    else:
        fit = LogisticRegression(C=np.inf, tol=1e-10, max_iter=1000).fit(z[:, None], y.astype(int))
        slope = float(fit.coef_[0, 0])
    return slope, _intercept_with_offset(y, z)


@dataclass
class Calibration:
    brier: float
    ece: float
    slope: float
    intercept: float
    bins: list[dict]  # per bin: stays, mean predicted, observed rate

    def as_dict(self) -> dict:
        return {"brier": self.brier, "ece": self.ece, "slope": self.slope, "intercept": self.intercept,
                "reliability": self.bins}


def calibration(y, p, bins: int = 10) -> Calibration:
    """Every calibration figure of one set of predictions."""
    y, p = np.asarray(y, float), np.asarray(p, float)
    slope, intercept = calibration_slope_intercept(y, p)
    points = [{"stays": int(idx.size), "predicted": float(p[idx].mean()), "observed": float(y[idx].mean())}
              for idx in equal_mass_bins(p, bins)]
    return Calibration(brier_score(y, p), expected_calibration_error(y, p, bins), slope, intercept, points)
