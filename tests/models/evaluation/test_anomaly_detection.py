"""DP-AD's exponential mechanism is eps-DP in the vote count; the threshold rule ranks tail points as anomalous."""

import numpy as np
import pytest

from privehr.models.evaluation.anomaly_detection import (content_ids, dp_ad_roc, exponential_mechanism_votes, partition_by_id,
                                      tail_anomalies, threshold_roc, vote_counts)


def _p_in(counts, k, eps, draws=200_000):
    rng = np.random.default_rng(0)
    return np.array([exponential_mechanism_votes(np.full(draws, c), k, eps, rng).mean() for c in counts])


def test_answer_probabilities_are_those_of_algorithm_2():
    k, eps = 10, 0.7
    c = np.arange(k + 1)
    exact = np.exp(eps * c / 2) / (np.exp(eps * c / 2) + np.exp(eps * (k - c) / 2))
    np.testing.assert_allclose(_p_in(c, k, eps), exact, atol=4e-3)
    # neighbouring datasets move c by one: each answer's probability changes by at most e^eps
    ratios = np.r_[exact[1:] / exact[:-1], (1 - exact[:-1]) / (1 - exact[1:])]
    assert ratios.max() <= np.exp(eps) + 1e-12


def test_no_privacy_loss_means_a_coin_and_a_huge_budget_means_the_majority():
    assert _p_in([0, 10], 10, 0.0) == pytest.approx([0.5, 0.5], abs=5e-3)
    assert list(_p_in([3, 7], 10, 50.0)) == [0.0, 1.0]


def test_tail_anomalies_lie_in_the_tails():
    rng = np.random.default_rng(1)
    reference = rng.normal(size=(5000, 3))
    points = tail_anomalies(reference, 1000, rng)
    q = np.percentile(reference, [5, 30, 70, 95], axis=0)
    inside = ((points >= q[0]) & (points <= q[1])) | ((points >= q[2]) & (points <= q[3]))
    assert inside.all()


def test_threshold_and_dp_ad_separate_tail_points():
    rng = np.random.default_rng(2)
    normal = rng.normal(size=(400, 2))
    anomalous = tail_anomalies(rng.normal(size=(4000, 2)), 400, rng) * 1.8
    log_p = lambda x, s: -0.5 * (x ** 2).sum(1) / s ** 2 - 2 * np.log(s)  # noqa: E731
    assert threshold_roc(log_p(normal, 1.0), log_p(anomalous, 1.0))["auroc"] > 0.8
    scales = np.linspace(0.9, 1.1, 10)  # k = 10 slightly different density estimators
    votes_normal = np.stack([log_p(normal, s) for s in scales])
    votes_anomalous = np.stack([log_p(anomalous, s) for s in scales])
    strong = dp_ad_roc(votes_normal, votes_anomalous, 5.0, rng)
    weak = dp_ad_roc(votes_normal, votes_anomalous, 0.01, rng)
    assert strong["auroc"] > 0.75 and abs(weak["auroc"] - 0.5) < 0.1
    assert vote_counts(votes_normal, -1.0).max() <= 10


def test_adding_or_removing_a_record_moves_no_other_record_between_partitions():
    """DP-AD's sensitivity of 1 needs it: with a random permutation cut into k parts, one more record shifts the
    boundaries of every part (and a seeded permutation is replayable by an attacker who has the code)."""
    ids = [f"patient-{i}" for i in range(200)]
    before = dict(zip(ids, partition_by_id(ids, 10)))
    after = dict(zip(ids + ["newcomer"], partition_by_id(ids + ["newcomer"], 10)))
    assert all(after[i] == before[i] for i in ids)
    fewer = dict(zip(ids[1:], partition_by_id(ids[1:], 10)))
    assert all(fewer[i] == before[i] for i in ids[1:])
    assert np.bincount(list(before.values()), minlength=10).min() >= 8  # a hash spreads the records
    rows = np.random.default_rng(0).normal(size=(5, 3))
    assert content_ids(rows[[2, 0]]) == [content_ids(rows)[2], content_ids(rows)[0]]
