"""The DP model-card evaluation: the noisy score histograms and the metrics read off them, against scikit-learn."""

import json
import math

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.metrics import average_precision_score, roc_auc_score

from privehr.models.evaluation.dp_evaluation import (NoisyHistograms, metrics_from_histograms, noisy_histograms,
                                                     score_edges)

TINY = 1e-9  # noise small enough to read the exact counts back


def binormal(n, rng, separation=1.5, prevalence=0.2):
    """Logits N(-2, 1) for negatives and N(-2 + separation, 1) for positives; AUROC Phi(separation / sqrt 2)."""
    y = (rng.random(n) < prevalence).astype(int)
    return 1 / (1 + np.exp(-rng.normal(-2 + separation * y, 1.0))), y


def bin_index(p, bins):
    return np.clip(np.searchsorted(score_edges(bins), p, side="right") - 1, 0, bins - 1)


def test_edges_are_public_increasing_and_logit_spaced():
    edges = score_edges(10)
    assert edges.shape == (11,) and edges[0] == 0 and edges[-1] == 1 and np.all(np.diff(edges) > 0)
    inner = np.log(edges[1:-1] / (1 - edges[1:-1]))
    assert inner == pytest.approx(np.linspace(-7, 7, 9))
    with pytest.raises(ValueError):
        score_edges(3)


def test_metrics_at_negligible_noise_match_scikit_learn():
    p, y = binormal(20_000, np.random.default_rng(0))
    m = metrics_from_histograms(noisy_histograms(p, y, 200, TINY, np.random.default_rng(1)), resamples=10)
    ties = bin_index(p, 200)
    assert m.auroc == pytest.approx(roc_auc_score(y, ties), abs=1e-9)
    assert m.auroc == pytest.approx(roc_auc_score(y, p), abs=1e-2)
    assert m.auprc == pytest.approx(average_precision_score(y, ties), abs=1e-9)
    assert m.prevalence == pytest.approx(y.mean(), abs=1e-9) and m.records == pytest.approx(y.size, abs=1e-6)


def test_counts_add_up_and_one_record_moves_exactly_one_cell_by_one():
    p, y = binormal(3000, np.random.default_rng(2))
    h = noisy_histograms(p, y, 30, TINY, np.random.default_rng(3))
    assert h.negatives.sum() + h.positives.sum() == pytest.approx(y.size, abs=1e-6)
    assert h.positives.sum() == pytest.approx(y.sum(), abs=1e-6)

    # the same noise draw on neighbouring data sets: the releases differ in one cell, by 1
    neighbour = noisy_histograms(np.append(p, 0.5), np.append(y, 1), 30, 2.0, np.random.default_rng(4))
    h = noisy_histograms(p, y, 30, 2.0, np.random.default_rng(4))
    difference = np.concatenate([neighbour.negatives - h.negatives, neighbour.positives - h.positives])
    assert np.count_nonzero(np.abs(difference) > 1e-9) == 1
    assert difference[30 + bin_index(np.array([0.5]), 30)[0]] == pytest.approx(1.0)


def test_noise_has_standard_deviation_sigma():
    p, y = binormal(1000, np.random.default_rng(5))
    exact = noisy_histograms(p, y, 500, TINY, np.random.default_rng(6))
    rng = np.random.default_rng(7)
    residuals = np.concatenate([np.concatenate([h.negatives - exact.negatives, h.positives - exact.positives])
                                for h in (noisy_histograms(p, y, 500, 3.0, rng) for _ in range(5))])
    assert residuals.size == 5000
    assert residuals.std() == pytest.approx(3.0, rel=0.05) and abs(residuals.mean()) < 0.15


def test_intervals_cover_the_exact_auroc_and_widen_with_the_noise():
    exact = norm.cdf(1.5 / math.sqrt(2))
    covered = 0
    for seed in range(30):
        p, y = binormal(2000, np.random.default_rng(100 + seed))
        m = metrics_from_histograms(noisy_histograms(p, y, 50, 5.0, np.random.default_rng(200 + seed)),
                                    resamples=500, rng=np.random.default_rng(seed))
        low, high = m.intervals["auroc"]
        covered += low <= exact <= high
    assert covered >= 24

    p, y = binormal(2000, np.random.default_rng(300))
    widths = []
    for sigma in (0.5, 5.0, 20.0):
        m = metrics_from_histograms(noisy_histograms(p, y, 50, sigma, np.random.default_rng(301)), resamples=500)
        widths.append({k: high - low for k, (low, high) in m.intervals.items()})
    for metric in ("auroc", "auprc", "prevalence"):
        assert widths[0][metric] < widths[1][metric] < widths[2][metric]


def test_clamping_bias_is_avoided():
    """Noise alone in the many empty cells must not drag AUROC towards 1/2."""
    p, y = binormal(2000, np.random.default_rng(8))
    exact = roc_auc_score(y, bin_index(p, 50))
    estimates = [metrics_from_histograms(noisy_histograms(p, y, 50, 5.0, np.random.default_rng(s)),
                                         resamples=1).auroc for s in range(40)]
    assert abs(np.mean(estimates) - exact) < 0.02


@pytest.mark.parametrize("probabilities, labels, bins, sigma", [
    ([0.1, 1.2345678, 0.3], [0, 1, 0], 10, 1.0),
    ([0.1, -0.4567891, 0.3], [0, 1, 0], 10, 1.0),
    ([0.1, float("nan"), 0.3], [0, 1, 0], 10, 1.0),
    ([0.1, float("inf"), 0.3], [0, 1, 0], 10, 1.0),
    ([0.1, 0.2, 0.3], [0, 37, 0], 10, 1.0),
    ([0.1, 0.2, 0.3], [0, 0.5, 1], 10, 1.0),
    ([0.1, 0.2, 0.3], ["a", "b", "c"], 10, 1.0),
    ([0.1, 0.2, 0.3], [0, 1], 10, 1.0),
    ([[0.1, 0.2]], [[0, 1]], 10, 1.0),
    ([0.1, 0.2], [0, 1], 3, 1.0),
    ([0.1, 0.2], [0, 1], 10, 0.0),
    ([0.1, 0.2], [0, 1], 10, -1.0),
    ([0.1, 0.2], [0, 1], 10, float("nan")),
])
def test_bad_inputs_raise_without_echoing_values(probabilities, labels, bins, sigma):
    with pytest.raises(ValueError) as error:
        noisy_histograms(probabilities, labels, bins, sigma, np.random.default_rng(0))
    message = str(error.value)
    assert not any(s in message for s in ("1.234", "0.456", "nan", "inf", "37", "0.5", "0.1", "0.2", "0.3"))


def test_bad_post_processing_arguments_raise():
    h = noisy_histograms([0.1, 0.9], [0, 1], 10, 1.0, np.random.default_rng(0))
    for kwargs in ({"confidence": 1.0}, {"resamples": 0}, {"min_bin_records": 0.0}):
        with pytest.raises(ValueError):
            metrics_from_histograms(h, **kwargs)


def test_a_missing_class_gives_nan_not_an_error():
    p = np.random.default_rng(9).uniform(0, 1, 500)
    m = metrics_from_histograms(noisy_histograms(p, np.zeros(500, int), 20, TINY, np.random.default_rng(10)))
    assert math.isnan(m.auroc) and math.isnan(m.auprc) and all(map(math.isnan, m.intervals["auroc"]))
    assert m.prevalence == pytest.approx(0, abs=1e-6) and m.records == pytest.approx(500, abs=1e-6)

    released = NoisyHistograms(score_edges(4), np.array([3.0, 5.0, 2.0, 1.0]), -np.ones(4), 1.0)
    assert math.isnan(metrics_from_histograms(released).auroc)
    empty = NoisyHistograms(score_edges(4), -np.ones(4), -np.ones(4), 1.0)
    m = metrics_from_histograms(empty)
    assert m.records == 0 and math.isnan(m.ece) and math.isnan(m.prevalence)
    assert all(b["observed_rate"] is None for b in m.reliability)


def test_reliability_groups_are_public_and_rates_need_enough_records_and_calibrated_scores_have_small_ece():
    p, y = binormal(5000, np.random.default_rng(11))
    m = metrics_from_histograms(noisy_histograms(p, y, 50, 3.0, np.random.default_rng(12)), min_bin_records=25)
    other = metrics_from_histograms(noisy_histograms(p[:300], y[:300], 50, 30.0, np.random.default_rng(1)))
    bins = m.reliability
    edges = [(b["low"], b["high"]) for b in bins]
    assert edges == [(b["low"], b["high"]) for b in other.reliability]  # never shaped by the data or the noise
    assert len(bins) == 10 and bins[0]["low"] == 0 and bins[-1]["high"] == 1
    assert all(a["high"] == b["low"] for a, b in zip(bins, bins[1:]))
    assert all((b["observed_rate"] is None) == (b["records"] < 25) for b in bins)
    assert all(b["observed_rate"] == b["positives"] / b["records"] for b in bins if b["observed_rate"] is not None)
    assert all(b["low"] < b["mean_predicted"] < b["high"] for b in bins)

    rng = np.random.default_rng(13)
    z = rng.normal(-2, 1.2, 400_000)
    y = (rng.random(z.size) < 1 / (1 + np.exp(-z))).astype(int)
    calibrated = metrics_from_histograms(noisy_histograms(1 / (1 + np.exp(-z)), y, 100, TINY, rng),
                                         resamples=50, min_bin_records=2000)
    overconfident = metrics_from_histograms(noisy_histograms(1 / (1 + np.exp(-3 * z)), y, 100, TINY, rng),
                                            resamples=50, min_bin_records=2000)
    assert calibrated.ece < 0.01 < 0.05 < overconfident.ece


def test_releases_serialise_and_the_default_bootstrap_is_reproducible():
    p, y = binormal(1000, np.random.default_rng(14))
    h = noisy_histograms(p, y, 20, 1.0, np.random.default_rng())
    first, second = metrics_from_histograms(h, resamples=100), metrics_from_histograms(h, resamples=100)
    assert first.intervals == second.intervals
    assert set(first.intervals) == {"auroc", "auprc", "prevalence", "ece", "calibration_slope", "calibration_intercept"}
    text = json.dumps({"histograms": h.as_dict(), "metrics": first.as_dict()})
    assert json.loads(text)["histograms"]["noise_multiplier"] == 1.0
    assert len(json.loads(text)["histograms"]["edges"]) == 21


def test_a_metric_is_informative_only_when_its_interval_is_narrow_and_the_needed_count_is_computed():
    """At sigma 3 and 400 test records (about 40 positives) the AUROC interval is wide: flagged, with the number of
    records that would narrow it to 0.2; a test split of that size, at the same noise, gives about that width."""
    width = 0.2
    p, y = binormal(400, np.random.default_rng(3), prevalence=0.1)
    few = metrics_from_histograms(noisy_histograms(p, y, 30, 3.0, np.random.default_rng(4)), resamples=400)
    low, high = few.intervals["auroc"]
    assert high - low > width and few.informative["auroc"] is False
    needed = few.needed_records["auroc"]
    assert needed is not None and needed > 400
    p, y = binormal(needed, np.random.default_rng(5), prevalence=0.1)
    enough = metrics_from_histograms(noisy_histograms(p, y, 30, 3.0, np.random.default_rng(6)), resamples=400)
    low, high = enough.intervals["auroc"]
    assert 0.5 * width < high - low < 1.5 * width  # the bound is computed, within its approximation
    p, y = binormal(20000, np.random.default_rng(7))
    plenty = metrics_from_histograms(noisy_histograms(p, y, 30, 1.0, np.random.default_rng(8)), resamples=200)
    assert plenty.informative["auroc"] and plenty.needed_records["auroc"] is None
    assert plenty.as_dict()["informative"]["auroc"] is True


def test_counts_and_rates_shown_are_valid_however_loud_the_noise():
    p, y = binormal(300, np.random.default_rng(9), prevalence=0.07)
    for seed in range(20):
        m = metrics_from_histograms(noisy_histograms(p, y, 30, 5.0, np.random.default_rng(seed)), resamples=50,
                                    min_bin_records=1.0)
        assert 0 <= m.prevalence <= 1 or np.isnan(m.prevalence)
        for group in m.reliability:
            assert group["records"] >= 0 and 0 <= group["positives"] <= group["records"] + 1e-9
            assert group["observed_rate"] is None or 0 <= group["observed_rate"] <= 1


def test_needed_records_scales_the_noise_as_one_over_n_and_the_sampling_as_one_over_root_n():
    from privehr.models.evaluation.dp_evaluation import needed_records

    assert needed_records(0.4, 0.0, 100, 0.2) == 200      # noise alone: twice the records halve the width
    assert needed_records(0.0, 0.4, 100, 0.2) == 400      # sampling alone: four times the records
    assert needed_records(float("nan"), 0.1, 100, 0.2) is None


def _binormal(n: int, seed: int, distort=lambda lp: lp):
    """Risks whose logit is ``distort`` of the true log-odds: the identity is a calibrated model."""
    rng = np.random.default_rng(seed)
    lp = rng.normal(-1.5, 1.2, n)
    y = (rng.random(n) < 1 / (1 + np.exp(-lp))).astype(int)
    return 1 / (1 + np.exp(-distort(lp))), y


@pytest.mark.parametrize("distort, slope, intercept", [
    (lambda lp: lp, 1.0, 0.0),               # calibrated
    (lambda lp: 2 * lp, 0.5, None),          # overconfident: slope 1/2 (its intercept-in-the-large is not 0)
    (lambda lp: lp + 1, 1.0, -1.0),          # risks too high by one logit: intercept -1
])
def test_calibration_slope_and_intercept_recover_the_distortion(distort, slope, intercept):
    p, y = _binormal(200_000, 0, distort)
    m = metrics_from_histograms(noisy_histograms(p, y, 30, 0.01, np.random.default_rng(1)), resamples=200)
    assert m.calibration_slope == pytest.approx(slope, abs=0.03)  # binning moves it a little
    if intercept is not None:
        assert m.calibration_intercept == pytest.approx(intercept, abs=0.05)
    low, high = m.intervals["calibration_slope"]
    assert low <= m.calibration_slope <= high and high - low < 0.1 and m.informative["calibration_slope"]
    assert m.as_dict()["calibration_slope"] == m.calibration_slope


def test_calibration_under_heavy_noise_is_not_informative_and_one_class_is_undefined():
    p, y = _binormal(500, 2)
    m = metrics_from_histograms(noisy_histograms(p, y, 30, 8.0, np.random.default_rng(1)))
    assert not m.informative["calibration_slope"] and not m.informative["calibration_intercept"]
    assert m.needed_records["calibration_intercept"] > 500
    low, high = m.intervals["calibration_intercept"]
    assert low < -0.2 < 0 < high  # an open scale: not clipped to [0, 1] as the rates are
    none = metrics_from_histograms(noisy_histograms(p, np.zeros_like(y), 30, 0.01, np.random.default_rng(1)))
    assert math.isnan(none.calibration_slope) and math.isnan(none.calibration_intercept)
    assert all(math.isnan(v) for v in none.intervals["calibration_slope"])


def _calibrated_runs(n: int, sigma: float, runs: int, seed: int, distort: float = 1.0, mean: float = -1.5,
                     sd: float = 1.2):
    """``runs`` test splits of a model's risks (its logit ``distort`` times the true log-odds: 1 is calibrated),
    each released at noise ``sigma`` and evaluated."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(runs):
        lp = rng.normal(mean, sd, n)
        y = (rng.random(n) < 1 / (1 + np.exp(-lp))).astype(int)
        p = 1 / (1 + np.exp(-distort * lp))
        out.append(metrics_from_histograms(noisy_histograms(p, y, 30, sigma, rng), resamples=20))
    return out


def test_calibration_intervals_cover_the_truth_at_a_realistic_noise():
    """The review's case: sd 7.7 (an evaluation at epsilon about 0.5). Fitted to the projected table the slope's mean
    was 0.96 and its interval covered 1 in a fifth of runs while always flagged informative; fitted to the counts as
    released, at the bins' mean logits, with the sandwich's noise term, the intervals cover slope 1 and intercept 0."""
    runs = _calibrated_runs(50_000, 7.73, 200, seed=8)
    slopes = np.array([m.calibration_slope for m in runs])
    assert abs(slopes.mean() - 1) < 0.015
    for name, truth in (("calibration_slope", 1.0), ("calibration_intercept", 0.0)):
        cover = np.mean([m.intervals[name][0] <= truth <= m.intervals[name][1] for m in runs])
        assert cover >= 0.88, (name, cover)  # 0.95 expected; 200 runs: a binomial sd of 0.015
    assert np.mean([m.informative["calibration_slope"] for m in runs]) > 0.9


@pytest.mark.parametrize("mean, sd", [(0.0, 0.4), (-3.0, 0.5), (-1.5, 1.2)])
def test_a_calibrated_models_binned_slope_is_one_where_its_scores_concentrate(mean, sd):
    """At the bins' logit midpoints a calibrated model's slope was 0.88 for N(0, 0.4) logits and 0.92 for
    N(-3, 0.5): records pile up on a bin's side towards the bulk. At the mean of a log-linear density across each bin
    it is within 0.02 of 1 (no noise here: the binning's own bias)."""
    (m,) = _calibrated_runs(1_000_000, 1e-3, 1, seed=11, mean=mean, sd=sd)
    assert m.calibration_slope == pytest.approx(1.0, abs=0.02)
    assert m.calibration_intercept == pytest.approx(0.0, abs=0.02)


@pytest.mark.parametrize("records", [6_500, 8_000, 10_000])
def test_a_printed_slope_interval_misses_in_at_most_one_run_in_twenty(records):
    """The slope's Wald width grows with the slope, so the noisy fits that came out low get the narrow intervals:
    near the records a slope needs, the informative ones are a selected set (a review found 4 % coverage among them
    at 5,000 records). Flagged only where the width at the interval's upper end is narrow too, a printed interval
    that misses the truth stays within the 5 % of runs a 95 % interval may miss (logit x 2, sd 7.7: 2, 4.5 and
    2.5 % of runs), and well past the threshold the printed ones cover as they should."""
    runs = _calibrated_runs(records, 7.73, 200, seed=3, distort=2.0)
    flagged = [m for m in runs if m.informative["calibration_slope"]]
    wrong = [m for m in flagged if not m.intervals["calibration_slope"][0] <= 0.5 <= m.intervals["calibration_slope"][1]]
    assert len(wrong) / len(runs) <= 0.05, len(wrong)
    if records == 10_000:
        assert len(flagged) > 150 and 1 - len(wrong) / len(flagged) >= 0.9


def test_a_recalibration_is_released_only_where_the_model_is_shown_miscalibrated():
    """Recalibrating a calibrated model only adds the fit's noise: released where the slope is informative and its
    interval excludes 1, or the intercept's excludes 0 (about one run in ten for a calibrated model: two 95 %
    intervals)."""
    calibrated = _calibrated_runs(40_000, 7.73, 100, seed=13)
    assert np.mean([m.informative["calibration_slope"] for m in calibrated]) > 0.9
    assert np.mean([m.recalibration is not None for m in calibrated]) < 0.2
    overconfident = _calibrated_runs(15_000, 7.73, 50, seed=14, distort=2.0)
    released = [m.recalibration for m in overconfident if m.recalibration is not None]
    assert len(released) >= 0.95 * len(overconfident)
    assert np.median([r["slope"] for r in released]) == pytest.approx(0.5, abs=0.05)


def test_calibration_slope_is_not_dragged_to_zero_by_phantom_records():
    """3,500 test records at noise sd 7.7: the projected table's phantom end-bin records gave a median slope of
    about 0.67 for a calibrated model; the noisy counts as released give about 1 (not informative at this size)."""
    runs = _calibrated_runs(3_500, 7.73, 100, seed=9)
    slopes = np.array([m.calibration_slope for m in runs])
    assert np.isfinite(slopes).mean() > 0.95
    assert abs(np.nanmedian(slopes) - 1) < 0.15
    assert not any(m.informative["calibration_slope"] for m in runs)
    assert all(m.needed_records["calibration_slope"] > 3_500 for m in runs)


def test_a_slope_through_one_bin_is_undefined_not_one():
    """Every record in one score bin: no slope can be fitted (the information is singular), so nan, not the
    starting value 1 the fit used to return; the intercept-in-the-large is still defined."""
    p = np.full(400, 0.3)
    y = (np.arange(400) % 3 == 0).astype(int)
    m = metrics_from_histograms(noisy_histograms(p, y, 30, 1e-6, np.random.default_rng(0)), resamples=20)
    assert math.isnan(m.calibration_slope) and not m.informative["calibration_slope"]
    assert all(math.isnan(v) for v in m.intervals["calibration_slope"]) and m.recalibration is None
    assert math.isfinite(m.calibration_intercept)


def test_logit_midpoints_are_the_bins_centres_on_the_logit_scale():
    from privehr.models.evaluation.dp_evaluation import logit_midpoints

    edges = score_edges(30)
    x = logit_midpoints(edges)
    inner = np.log(edges[1:-1] / (1 - edges[1:-1]))
    np.testing.assert_allclose(x[1:-1], (inner[:-1] + inner[1:]) / 2)
    width = inner[1] - inner[0]
    assert x[0] == pytest.approx(inner[0] - width / 2) and x[-1] == pytest.approx(inner[-1] + width / 2)


@pytest.mark.parametrize("records, seed, defined", [(2000, 2, True), (500, 1, False)])
def test_calibration_is_the_maximum_of_the_noisy_counts_likelihood_or_undefined_where_there_is_none(records, seed,
                                                                                                     defined):
    """At sigma 8 plain Newton from slope 1 overshoots on these tables (a few records in the end bins, at logit
    -7.25 and 7.25). Where the likelihood of the counts as released (negative cells included) has a maximum, the
    step-halving fit reaches the one scipy's Nelder-Mead finds, and the offset fit the root of its score equation;
    where negative cells leave it unbounded (Nelder-Mead runs off), the slope is nan, not a number from a stopped
    iteration."""
    from scipy.optimize import brentq, minimize

    from privehr.models.evaluation.dp_evaluation import _nonnegative, calibration_abscissae

    p, y = _binormal(records, 2)
    h = noisy_histograms(p, y, 30, 8.0, np.random.default_rng(seed))
    m = metrics_from_histograms(h, resamples=50)
    neg, pos = np.asarray(h.negatives), np.asarray(h.positives)
    x = calibration_abscissae(h.edges, _nonnegative(neg) + _nonnegative(pos), 8.0)
    assert (neg < 0).any() and (pos < 0).any()  # the fit sees negative cells

    def minus_log_likelihood(theta):
        z = theta[0] + theta[1] * x
        return float(np.sum(pos * np.logaddexp(0, -z) + neg * np.logaddexp(0, z)))

    best = minimize(minus_log_likelihood, [0.0, 1.0], method="Nelder-Mead",
                    options={"xatol": 1e-9, "fatol": 1e-12, "maxiter": 10_000}).x
    if not defined:
        assert abs(best[1]) > 1e3 and math.isnan(m.calibration_slope) and not m.informative["calibration_slope"]
        return
    assert m.calibration_slope == pytest.approx(best[1], abs=1e-4)
    in_the_large = brentq(lambda c: pos.sum() - np.sum((neg + pos) / (1 + np.exp(-(c + x)))), -20, 20, xtol=1e-12)
    assert m.calibration_intercept == pytest.approx(in_the_large, abs=1e-8)
    low, high = m.intervals["calibration_slope"]
    assert math.isfinite(low) and low < m.calibration_slope < high


def test_degenerate_tables_leave_calibration_undefined_not_a_crash():
    from privehr.core.strict_json import strict_dumps
    from privehr.models.evaluation.dp_evaluation import logit_midpoints

    edges = score_edges(30)
    x = logit_midpoints(edges)
    one = np.zeros(30)
    one[10] = 1.0
    # every record in one score bin: any line passes through it, so no slope; calibration-in-the-large is defined
    m = metrics_from_histograms(NoisyHistograms(edges, 5000 * one, 3000 * one, 1e-9), resamples=50)
    assert math.isnan(m.calibration_slope) and all(math.isnan(v) for v in m.intervals["calibration_slope"])
    assert not m.informative["calibration_slope"] and m.recalibration is None
    assert m.calibration_intercept == pytest.approx(math.log(3000 / 5000) - x[10], abs=1e-9)
    # the classes separated (negatives low, positives high): the likelihood has no maximum, the fit no slope
    low, high = np.zeros(30), np.zeros(30)
    low[5], high[25] = 5000, 3000
    m = metrics_from_histograms(NoisyHistograms(edges, low, high, 1e-9), resamples=50)
    assert math.isnan(m.calibration_slope) and not m.informative["calibration_slope"]
    # nothing released but noise below zero: every metric undefined, and the card's JSON holds null
    m = metrics_from_histograms(NoisyHistograms(edges, -np.ones(30), -np.ones(30), 1.0), resamples=50)
    assert math.isnan(m.calibration_slope) and math.isnan(m.calibration_intercept)
    card = json.loads(strict_dumps(m.as_dict()))
    assert card["calibration_slope"] is None and card["intervals"]["calibration_intercept"] == [None, None]


def test_a_released_record_count_sets_the_size_the_intervals_and_needed_counts_are_read_at():
    """The histograms' noisy total sums 60 noisy cells (sd about 77 at sigma 10); a released count has one draw. Given
    it, the bootstrap draws that many records: the sampling part of an interval, and the needed counts, follow it."""
    p, y = _binormal(400, 3)
    h = noisy_histograms(p, y, 30, 10.0, np.random.default_rng(4))
    alone = metrics_from_histograms(h, resamples=300)
    small, large = (metrics_from_histograms(h, resamples=300, records=n) for n in (400, 4000))
    assert alone.records_source == "histograms" and alone.records == pytest.approx(h.negatives.sum() + h.positives.sum())
    assert small.records == 400 and small.records_source == "record count" and small.as_dict()["records"] == 400
    assert small.auroc == alone.auroc and small.calibration_intercept == alone.calibration_intercept  # the table's
    width = lambda m: m.intervals["prevalence"][1] - m.intervals["prevalence"][0]  # noqa: E731
    assert width(large) < width(small)  # ten times the records: the sampling part shrinks
    assert small.needed_records["prevalence"] > 400 and large.needed_records["prevalence"] != small.needed_records[
        "prevalence"]


def test_a_prevalence_interval_that_reaches_zero_is_not_informative():
    """The demo's mortality card printed "prevalence 0.000 [0.000, 0.128]": narrower than 0.2, so flagged, yet it
    cannot tell a 7 % outcome from none. A prevalence informs only where its interval shows positives exist."""
    rng = np.random.default_rng(21)
    p = rng.uniform(0, 1, 550)
    y = (rng.random(550) < 0.07).astype(int)
    m = metrics_from_histograms(noisy_histograms(p, y, 30, 8.0, rng), resamples=300, records=550)
    low, high = m.intervals["prevalence"]
    assert low == 0.0 and high - low <= 0.2  # the case: narrow enough for the old rule, and at 0
    assert not m.informative["prevalence"] and m.needed_records["prevalence"] > 550
    p = rng.uniform(0, 1, 2000)
    common = (rng.random(2000) < 0.4).astype(int)  # a common outcome on more stays: a number with its interval
    m = metrics_from_histograms(noisy_histograms(p, common, 30, 8.0, rng), resamples=300, records=2000)
    assert m.informative["prevalence"] and m.intervals["prevalence"][0] > 0


def _thin_positives(sigma: float, negatives: int = 550, bins: int = 30) -> NoisyHistograms:
    """The demo's mortality GRU-D: a few hundred negatives, and positives whose noisy total came out at -24."""
    rng = np.random.default_rng(31)
    neg = np.bincount(bin_index(1 / (1 + np.exp(-rng.normal(-2.5, 1.0, negatives))), bins), minlength=bins)
    pos = rng.normal(0, sigma, bins)
    return NoisyHistograms(score_edges(bins), neg + rng.normal(0, sigma, bins), pos - pos.mean() - 24 / bins, sigma)


def test_a_class_under_one_noisy_record_gets_a_computed_lower_bound_not_silence():
    """A metric undefined because a class has under one noisy record says how many test stays it needs at least, and
    the bound is one. The attack: true populations a little under it (0.9 of it, at the largest prevalence the
    interval allows), the positives where AUROC's interval is narrowest (all in the top bin or all in the bottom
    one: clipped at 1 or 0) or spread like the negatives, released and evaluated as the card is: AUROC (and the
    prevalence, at 0.9 of its own bound) is almost never informative there."""
    from privehr.models.evaluation.dp_evaluation import thin_class_records

    sigma, bins = 7.7, 30
    h = _thin_positives(sigma)
    m = metrics_from_histograms(h, resamples=300, records=550)
    assert math.isnan(m.auroc) and all(map(math.isnan, m.intervals["calibration_slope"]))
    for key in ("auroc", "auprc", "prevalence", "calibration_slope", "calibration_intercept"):
        assert m.needed_basis[key] == "lower bound" and m.needed_records[key] > 0, key
    share, z = m.intervals["prevalence"][1], norm.ppf(0.975)
    assert m.needed_records["prevalence"] == math.ceil(z * sigma * math.sqrt(bins) / share)
    assert m.needed_records["auroc"] >= m.needed_records["prevalence"]
    shape = np.clip(h.negatives, 0, None) / np.clip(h.negatives, 0, None).sum()
    rng = np.random.default_rng(32)
    for key, where in (("auroc", bins - 1), ("auroc", 0), ("auroc", None), ("prevalence", None)):
        stays = 0.9 * m.needed_records[key]
        positives = np.zeros(bins)
        if where is None:
            positives = share * stays * shape
        else:
            positives[where] = share * stays
        negatives = (1 - share) * stays * shape
        informative = [metrics_from_histograms(NoisyHistograms(
            score_edges(bins), negatives + rng.normal(0, sigma, bins), positives + rng.normal(0, sigma, bins), sigma),
            resamples=200, records=stays).informative[key] for _ in range(8)]
        assert sum(informative) <= 1, (key, where, informative)
    # both classes thin, or neither: nothing to bound from
    assert thin_class_records(-np.ones(30), -np.ones(30), sigma, z, 0.2, (0.0, 0.5)) == {}
    assert thin_class_records(np.full(30, 5.0), np.full(30, 5.0), sigma, z, 0.2, (0.0, 0.5)) == {}


def test_a_calibration_fit_without_a_maximum_says_what_a_calibrated_model_would_need():
    """The demo's mortality logistic regression put every test stay in the lowest bin, with 22 noisy deaths: both
    classes there, no maximum for the calibration fit. The card says how many stays a calibrated model with those
    scores would need, and that this is what it says."""
    rng = np.random.default_rng(33)
    neg, pos = np.zeros(30), np.zeros(30)
    neg[0], pos[0] = 450.0, 20.0
    h = NoisyHistograms(score_edges(30), neg + rng.normal(0, 7.7, 30), pos + rng.normal(0, 7.7, 30), 7.7)
    assert h.negatives.sum() >= 1 and h.positives.sum() >= 1
    m = metrics_from_histograms(h, resamples=200, records=470)
    assert math.isnan(m.calibration_slope)
    assert m.needed_basis["calibration_slope"] == "calibrated model" and m.needed_records["calibration_slope"] > 470
    # a calibrated model on many stays: every metric informative, so none needs more stays, by any basis
    p = 1 / (1 + np.exp(-rng.normal(-1, 1.2, 200_000)))
    calibrated = metrics_from_histograms(noisy_histograms(p, (rng.random(p.size) < p).astype(int), 30, 2.0, rng),
                                         resamples=50)
    assert all(calibrated.informative.values()) and calibrated.needed_basis == {}
    assert set(calibrated.needed_records.values()) == {None}
