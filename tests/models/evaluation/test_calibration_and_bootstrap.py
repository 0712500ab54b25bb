"""Calibration figures and the vectorised stratified bootstrap, against hand computation and scikit-learn."""

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from privehr.models.evaluation.bootstrap import (percentile_interval, stratified_counts, weighted_auprc, weighted_auroc,
                              weighted_brier)
from privehr.models.evaluation.calibration import calibration, calibration_slope_intercept, expected_calibration_error


def test_ece_of_a_fixed_example_by_hand():
    y = np.array([0, 0, 1, 0, 1, 1])
    p = np.array([0.1, 0.3, 0.2, 0.6, 0.7, 0.9])
    # three equal-mass bins by increasing p: {0.1, 0.2}, {0.3, 0.6}, {0.7, 0.9}
    by_hand = (2 / 6) * abs(0.15 - 0.5) + (2 / 6) * abs(0.45 - 0.0) + (2 / 6) * abs(0.8 - 1.0)
    assert expected_calibration_error(y, p, bins=3) == pytest.approx(by_hand)
    fit = calibration(y, p, bins=3)
    assert fit.brier == pytest.approx(np.mean((p - y) ** 2))
    assert [b["stays"] for b in fit.bins] == [2, 2, 2]
    assert [b["observed"] for b in fit.bins] == pytest.approx([0.5, 0.0, 1.0])


def test_a_calibrated_model_has_slope_one_and_intercept_zero_an_overconfident_one_a_smaller_slope():
    rng = np.random.default_rng(0)
    z = rng.normal(0, 1.5, 200_000)
    y = (rng.random(z.size) < 1 / (1 + np.exp(-z))).astype(int)
    slope, intercept = calibration_slope_intercept(y, 1 / (1 + np.exp(-z)))
    assert slope == pytest.approx(1, abs=0.03) and intercept == pytest.approx(0, abs=0.03)
    slope, _ = calibration_slope_intercept(y, 1 / (1 + np.exp(-2 * z)))  # logits twice too large
    assert slope == pytest.approx(0.5, abs=0.03)
    _, intercept = calibration_slope_intercept(y, 1 / (1 + np.exp(-(z + 1))))  # predictions too high
    assert intercept == pytest.approx(-1, abs=0.05)


def test_weighted_metrics_equal_scikit_learn_on_the_expanded_resample():
    rng = np.random.default_rng(1)
    y = (rng.random(300) < 0.15).astype(int)
    s = np.round(rng.random(300) + 0.4 * y, 2)  # ties
    w = stratified_counts(y, 20, rng)
    assert (w[:, y == 1].sum(1) == y.sum()).all() and (w[:, y == 0].sum(1) == (1 - y).sum()).all()
    for b in range(20):
        idx = np.repeat(np.arange(y.size), w[b])
        assert weighted_auroc(s, y, w)[b] == pytest.approx(roc_auc_score(y[idx], s[idx]), abs=1e-12)
        assert weighted_auprc(s, y, w)[b] == pytest.approx(average_precision_score(y[idx], s[idx]), abs=1e-12)
        assert weighted_brier(s.clip(0, 1), y, w)[b] == pytest.approx(np.mean((s.clip(0, 1)[idx] - y[idx]) ** 2))


def test_bootstrap_interval_of_a_fixed_example_equals_the_loop_over_resamples():
    y = np.array([0, 0, 0, 0, 1, 1, 0, 1, 0, 0, 1, 0])
    s = np.array([0.1, 0.2, 0.25, 0.3, 0.35, 0.8, 0.4, 0.7, 0.5, 0.15, 0.9, 0.6])
    w = stratified_counts(y, 1000, np.random.default_rng(7))
    loop = []
    for counts in w:  # the textbook bootstrap: draw, expand, call scikit-learn
        idx = np.repeat(np.arange(y.size), counts)
        loop.append(roc_auc_score(y[idx], s[idx]))
    assert percentile_interval(weighted_auroc(s, y, w)) == pytest.approx(
        (np.percentile(loop, 2.5), np.percentile(loop, 97.5)))
    lo, hi = percentile_interval(weighted_auroc(s, y, w))
    assert lo < roc_auc_score(y, s) < hi and hi - lo > 0.1  # 4 positives: a wide interval
