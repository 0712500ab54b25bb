"""Anomaly detection with density estimators (Waites & Cummings 2021, Section 5).

References:
    Waites, Cummings (2021). Differentially Private Normalizing Flows for Privacy-Preserving Density Estimation.
    AIES. arXiv:2103.14068.

Likelihood threshold: x is flagged out-of-distribution when log p(x) <= T. With a DP-trained flow
every such query is post-processing of the DP release and costs no further privacy.

DP-AD (Waites & Cummings 2021, Algorithm 2, sample-and-aggregate): k non-private flows fitted on disjoint
partitions vote. A record's partition is a hash of the record's own id (:func:`partition_by_id`),
so adding or removing one record changes one partition and leaves every other record where it was;
a random permutation split into k parts would shift the boundaries of every part and let one record
change all k flows. With c = #{i : log p_i(x) > T} the answer is "in-distribution" with probability

    exp(eps c / 2) / (exp(eps c / 2) + exp(eps (k - c) / 2)) = sigmoid(eps (2c - k) / 2),

the exponential mechanism with scores c and k - c, whose sensitivity is 1 (a record sits in one
partition, so it moves c by at most one). Each *answer* is eps-DP for the training records; q
answers cost q * eps by basic composition. The flows themselves are not private and must never be
released. The answers' randomness must come from a secret source (``NoiseSource.secret()``).

Test anomalies as in Waites & Cummings 2021: per dimension uniform in the tails of reference data, between the 5th
and 30th or the 70th and 95th percentiles (side chosen at random).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve

__all__ = ["tail_anomalies", "threshold_roc", "vote_counts", "exponential_mechanism_votes", "dp_ad_roc",
           "partition_by_id", "content_ids"]


def partition_by_id(ids: Iterable, k: int) -> np.ndarray:
    """The partition (0..k-1) of each record: sha256 of its id, mod k; independent of the other records.

    >>> partition_by_id(["a", "b", "c"], 4).tolist() == partition_by_id(["c", "b", "a"], 4).tolist()[::-1]
    True
    """
    if k < 1:
        raise ValueError("k must be at least 1")
    return np.array([int.from_bytes(hashlib.sha256(str(i).encode()).digest()[:8], "little") % k for i in ids],
                    dtype=np.int64)


def content_ids(x: np.ndarray) -> list[str]:
    """Ids for records that carry none: the sha256 of each row's bytes (equal rows share an id)."""
    rows = np.ascontiguousarray(np.asarray(x, dtype=np.float64))
    return [hashlib.sha256(r.tobytes()).hexdigest() for r in rows]


def tail_anomalies(reference: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n points, each dimension uniform in [q5, q30] or [q70, q95] of ``reference``."""
    q = np.percentile(reference, [5, 30, 70, 95], axis=0)
    low_side = rng.random((n, reference.shape[1])) < 0.5
    u = rng.random((n, reference.shape[1]))
    return np.where(low_side, q[0] + u * (q[1] - q[0]), q[2] + u * (q[3] - q[2]))


def threshold_roc(log_p_normal: np.ndarray, log_p_anomalous: np.ndarray) -> dict:
    """ROC of the rule "anomalous when log p <= T" over all T (positive class: anomalous)."""
    y = np.r_[np.zeros(len(log_p_normal)), np.ones(len(log_p_anomalous))]
    score = -np.r_[log_p_normal, log_p_anomalous]
    fpr, tpr, _ = roc_curve(y, score)
    return {"auroc": float(roc_auc_score(y, score)), "fpr": fpr.tolist(), "tpr": tpr.tolist()}


def vote_counts(log_probs: np.ndarray, threshold: float) -> np.ndarray:
    """c per query: ``log_probs`` is (k flows, q queries)."""
    return (log_probs > threshold).sum(axis=0)


def exponential_mechanism_votes(counts: np.ndarray, k: int, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """One eps-DP answer per query: True = "in-distribution"."""
    p_in = 1.0 / (1.0 + np.exp(-epsilon * (2 * np.asarray(counts, float) - k) / 2))
    return rng.random(len(p_in)) < p_in


def dp_ad_roc(log_probs_normal: np.ndarray, log_probs_anomalous: np.ndarray, epsilon: float,
              rng: np.random.Generator, thresholds: np.ndarray | None = None) -> dict:
    """ROC points of DP-AD traced by the threshold T; each point from one eps-DP answer per query.

    An evaluation device: every query is answered once per threshold, so the whole curve costs
    len(thresholds) * eps per query, and the default thresholds (quantiles of the flows' scores)
    depend on the data. A deployment fixes one public threshold and answers each query once."""
    k = log_probs_normal.shape[0]
    if thresholds is None:
        pooled = np.r_[log_probs_normal.ravel(), log_probs_anomalous.ravel()]
        thresholds = np.quantile(pooled, np.linspace(0, 1, 41))
    points = []
    for t in thresholds:
        in_normal = exponential_mechanism_votes(vote_counts(log_probs_normal, t), k, epsilon, rng)
        in_anomalous = exponential_mechanism_votes(vote_counts(log_probs_anomalous, t), k, epsilon, rng)
        points.append((float(np.mean(~in_normal)), float(np.mean(~in_anomalous)),
                       float((np.sum(in_normal) + np.sum(~in_anomalous)) / (len(in_normal) + len(in_anomalous)))))
    fpr, tpr, accuracy = map(np.array, zip(*sorted(points)))
    fpr, tpr = np.r_[0.0, fpr, 1.0], np.r_[0.0, tpr, 1.0]
    return {"auroc": float(np.trapezoid(tpr, fpr)), "fpr": fpr.tolist(), "tpr": tpr.tolist(),
            "best_accuracy": float(accuracy.max()), "epsilon_per_answer": epsilon}
