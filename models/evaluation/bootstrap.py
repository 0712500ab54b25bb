"""Stratified bootstrap confidence intervals of AUROC, AUPRC and Brier score, vectorised over resamples.

A resample draws the test set's positives with replacement from its positives and its negatives from
its negatives (stratified: every resample keeps the test set's class counts, so AUROC is always
defined). It is represented by counts: W[b, i] = how often stay i is drawn in resample b. Every metric
is then a weighted metric of the same sorted scores, so B resamples cost a few (B, n) array passes,
not B calls of scikit-learn:

* AUROC = sum_i W_i+ (N_<(s_i) + N_=(s_i) / 2) / (P N), the Mann-Whitney form with ties counted half;
* AUPRC = sum_k (TP_k - TP_(k-1)) / P * TP_k / (TP_k + FP_k) over distinct thresholds in decreasing
  order: scikit-learn's ``average_precision_score``;
* Brier = sum_i W_i (p_i - y_i)^2 / n.

Several sets of predictions of the same stays (the seeds of a grid cell) share the resamples, so the
interval of their median, and of the difference between two cells, come from the same draws. The
interval is the percentile interval (Efron & Tibshirani 1993). The resampling randomness is not a
privacy mechanism (these statistics carry no DP guarantee; the report says so): it comes from a seeded
generator so that a report can be recomputed.

>>> import numpy as np
>>> y = np.array([0, 0, 1, 1]); s = np.array([0.1, 0.4, 0.35, 0.8])
>>> float(weighted_auroc(s, y, np.ones((1, 4)))[0])
0.75
"""

from __future__ import annotations

import numpy as np

__all__ = ["stratified_counts", "weighted_auroc", "weighted_auprc", "weighted_brier", "percentile_interval"]


def stratified_counts(y, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, n) counts: each class resampled with replacement within itself."""
    y = np.asarray(y).astype(bool)
    counts = np.zeros((resamples, y.size), dtype=np.int32)
    rows = np.arange(resamples)[:, None]
    for members in (np.flatnonzero(y), np.flatnonzero(~y)):
        if members.size:
            draws = members[rng.integers(0, members.size, size=(resamples, members.size))]
            np.add.at(counts, (np.broadcast_to(rows, draws.shape), draws), 1)
    return counts


def _grouped(scores, y, weights):
    """Positive and negative weight per distinct score, in increasing score order: (B, groups) each."""
    scores = np.asarray(scores, float)
    order = np.argsort(scores, kind="stable")
    sorted_scores = scores[order]
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    w = np.asarray(weights, float)[:, order]
    pos = np.asarray(y).astype(bool)[order]
    return (np.add.reduceat(np.where(pos, w, 0.0), starts, axis=1),
            np.add.reduceat(np.where(pos, 0.0, w), starts, axis=1))


def weighted_auroc(scores, y, weights) -> np.ndarray:
    """AUROC of ``scores`` under each row of ``weights`` (B, n); ties count one half."""
    pos, neg = _grouped(scores, y, weights)
    below = np.cumsum(neg, axis=1) - neg
    return (pos * (below + neg / 2)).sum(1) / (pos.sum(1) * neg.sum(1))


def weighted_auprc(scores, y, weights) -> np.ndarray:
    """Average precision (scikit-learn's definition) under each row of ``weights`` (B, n)."""
    pos, neg = _grouped(scores, y, weights)
    pos, neg = pos[:, ::-1], neg[:, ::-1]  # decreasing thresholds
    tp, fp = np.cumsum(pos, axis=1), np.cumsum(neg, axis=1)
    precision = np.divide(tp, tp + fp, out=np.zeros_like(tp), where=(tp + fp) > 0)
    return (pos * precision).sum(1) / pos.sum(1)


def weighted_brier(p, y, weights) -> np.ndarray:
    w = np.asarray(weights, float)
    return (w * (np.asarray(p, float) - np.asarray(y, float)) ** 2).sum(1) / w.sum(1)


def percentile_interval(values, confidence: float = 0.95) -> tuple[float, float]:
    """The central ``confidence`` percentile interval of bootstrap replicates (NaN replicates ignored)."""
    values = np.asarray(values, float)
    values = values[np.isfinite(values)]
    if not values.size:
        return float("nan"), float("nan")
    tail = (1 - confidence) / 2 * 100
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))
