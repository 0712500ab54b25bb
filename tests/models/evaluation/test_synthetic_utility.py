"""Fowlkes-Mallows cutoff against brute force; SVM, random forest and kNN score real behaviour."""

import numpy as np

from privehr.models.evaluation.synthetic_utility import fowlkes_mallows_cutoff, knn_mse, random_forest_mse, svm_accuracy


def test_fowlkes_mallows_cutoff_is_the_brute_force_optimum():
    rng = np.random.default_rng(0)
    y = rng.random(40) < 0.4
    p = np.clip(0.5 * y + rng.normal(0.25, 0.2, 40), 0, 1)
    best = max(np.unique(p), key=lambda c: np.sqrt(((p >= c) & y).sum() ** 2 / ((p >= c).sum() * y.sum())))
    assert fowlkes_mallows_cutoff(y, p) == best
    assert fowlkes_mallows_cutoff(np.array([0, 0, 1, 1]), np.array([0.1, 0.2, 0.7, 0.9])) == 0.7


def test_svm_learns_a_separable_label_and_handles_one_class():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(80, 3))
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(int)
    result = svm_accuracy(x[:60], y[:60], x[60:], y[60:])
    assert result["accuracy"] >= 0.85 and 0 < result["cutoff"] < 1
    flat = svm_accuracy(x[:60], np.ones(60), x[60:], y[60:])
    assert flat["single_class"] and flat["accuracy"] == np.mean(y[60:] == 1)


def test_regressors_beat_the_mean_on_a_smooth_target():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(300, 4))
    y = x[:, 0] ** 2 + x[:, 1]
    baseline = np.mean((y[200:] - y[:200].mean()) ** 2)
    assert random_forest_mse(x[:200], y[:200], x[200:], y[200:]) < 0.5 * baseline
    assert knn_mse(x[:200], y[:200], x[200:], y[200:]) < 0.7 * baseline
