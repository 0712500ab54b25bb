"""Differentially private evaluation of a binary classifier on a private test split (the model card's metrics).

**The one release.** The predicted probabilities are cut by public, data-independent edges
(:func:`score_edges`: equal width on the logit scale, since clinical risks pile up near 0) and the test
records are counted in a 2 x ``bins`` table, label by score bin. Each record lies in exactly one of the
2 x ``bins`` cells, so adding or removing one record changes one cell by 1: the L2 sensitivity is 1.
Releasing every cell with independent N(0, sigma^2) noise is the Gaussian mechanism (Dwork & Roth, "The
Algorithmic Foundations of Differential Privacy", 2014, Thm. A.1) with noise multiplier sigma; in an
accountant it composes exactly as a Poisson-subsampled Gaussian with sample rate 1 and 1 step, e.g.
``epsilon_spent(sigma, 1.0, 1, delta)`` of :mod:`models.privacy.accounting`.

**Everything else is post-processing** (no further privacy cost). AUROC is the Mann-Whitney statistic
of the two histograms with ties inside a bin counted one half (the trapezoidal ROC through the bin
edges); AUPRC is average precision over thresholds at the bin edges (scikit-learn's step-wise
convention, a bin's records entering together); calibration is read off fixed, public groups of bins. Private ROC and PR figures through noisy score histograms follow
Stoddard, Chen, Machanavajjhala, "Differentially private algorithms for empirical machine learning"
(arXiv:1411.5428, 2014); Boyd, Lantz, Page, "Differential Privacy for Classifier Evaluation" (AISec
2015) study private AUROC and average precision directly.

AUROC and AUPRC use the noisy counts as released, *not* clamped at 0: AUROC's numerator and
denominator are bilinear in the two classes' independent noise, so it is unbiased (AUPRC, a sum of
ratios, nearly so), and both are ratios clipped to [0, 1]. Clamping each cell instead adds about
0.4 sigma phantom records to every empty cell, positives at the lowest scores and negatives at the
highest, which drags AUROC towards 1/2 (by about 0.05 at sigma = 5, 50 bins and 2000 records). What is
shown as counts or rates (the reliability table, prevalence, ECE) is read off a valid table: each class's
noisy counts projected onto non-negative counts with the same total (below), so no bin holds a negative
count or a rate outside [0, 1]. A class with under one noisy record counts as absent: its metrics are nan.

**Calibration slope and intercept** (Cox, "Two further applications of a model for binary regression",
Biometrika 1958; as Van Calster et al., "Calibration: the Achilles heel of predictive analytics", BMC Medicine
2019, define them): the slope b of logit P(y = 1) = a + b logit(p) and the intercept a' of
logit P(y = 1) = a' + logit(p) (calibration-in-the-large; slope 1 and intercept 0 for a calibrated model), each
bin's records at their mean logit under a log-linear density across the bin (:func:`calibration_abscissae`).
They are fitted to the noisy counts as released, negative cells included, not to the valid table: the logistic
score equations are linear in the counts, so the noise leaves them unbiased, whereas the projection's phantom
records in the empty end bins drag the slope towards 0 (a calibrated model's mean slope was 0.67 at noise sd 7.7
and 3,500 test records, 0.96 at 50,000, its interval covering 1 in a fifth of runs). Their intervals are not
bootstrapped but Wald intervals from the fits' sandwich variance, the test records' sampling and the DP noise
(known sigma) apart (:func:`_standard_errors`), on an open scale. In simulation (30 bins) they cover slope 1 and
intercept 0 of a calibrated model in 93-95 % of runs at 50,000-200,000 records (sd 2-7.7). The slope's width
grows with the slope, so among noisy fits the low ones get the narrow intervals; the slope is flagged informative
only where the width at its interval's upper end is narrow too (:func:`_calibration_inference`). Near the
threshold the printed intervals are still a selected set (logit x 2, sd 7.7: 80 % coverage among them at 8,000
records, 97 % at 10,000), but a printed interval that misses stays within the 5 % of runs a 95 % interval may
miss. They are undefined (nan, not informative) where a class has under one noisy record, the slope also where
under two bins hold a record, and either where the fit reaches no maximum from (0, 1) or its information is not
positive definite (with negative cells the likelihood need not be concave). Where the slope is informative and
the model is shown miscalibrated (the slope's interval excludes 1 or the intercept's excludes 0), the
two-parameter fit (intercept a, slope b) is released as the logistic recalibration p' = sigmoid(a + b logit(p))
(``privehr predict --recalibrate``): recalibrating a calibrated model only adds the fit's noise (for one, about
one run in ten still releases one: two 95 % intervals). It is fitted inside the evaluation's budget, on the
same test split the card reports, so the card's metrics are not an independent check of the recalibrated risks.

**Saying what it knows.** A metric whose interval is wider than ``informative_width`` (0.2) is flagged not
informative (prevalence also where its interval reaches 0 or is wider than twice the estimate: a rare outcome's
narrow interval at 0 shows nothing), with about how many test records would narrow it to that width at the same noise: the
bootstrap is run apart for the noise alone and for the sampling alone (the calibration fits have the two
variances apart already), the noise's width scales as 1/n and
the sampling's as 1/sqrt(n), and :func:`needed_records` solves for n. The card prints such a metric as "not
informative", never as a number.

**What the bins cost.** The ranking inside a bin is lost: the AUROC of binned scores is that of scores
rounded to their bin, not the exact one (about 0.01 lower at 20 bins in simulation, less with more bins,
while the noise on AUROC grows with the number of bins). The mean prediction inside a bin is not
released either (it would spend budget), so each reliability bin's ``mean_predicted`` is the arithmetic
midpoint of its edges in probability, (low + high) / 2, which is defined for the end bins too, unlike a
logit midpoint. The edges are fixed and public, never chosen from the data.

**Intervals** of AUROC, AUPRC, prevalence and ECE are a parametric bootstrap that states two sources of error, sampling of the test split
and the DP noise (not the binning's: the interval is around the binned AUROC, about 0.02 from the exact one at
30 bins and 0.05 at 10 in ``bench/dp_evaluation.py``): counts ~ Multinomial(n, q) over the 2 x ``bins`` cells, plus fresh N(0, sigma^2) per
cell, the metric recomputed; the percentile interval at ``confidence``. The population q is the noisy
table made non-negative per class by Euclidean projection onto {x >= 0, sum x = the class's noisy total}
(max(v - tau, 0): a clamp that keeps the totals instead of adding phantom records), n its rounded sum.
ECE is an absolute deviation, biased upwards by sampling and by noise, and resampling adds the bias again,
so its interval is the percentile interval reflected about the population's ECE (the basic bootstrap,
first-order bias-corrected); it can lie below the point estimate, and with small reliability bins and a
well-calibrated model it still under-covers: ECE's bias is the estimator's, not the privacy's. The
bootstrap's generator is public (post-processing of a DP output), so a fixed seed is fine.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> p = rng.uniform(0, 1, 5000)
>>> y = (rng.uniform(0, 1, p.size) < p).astype(int)
>>> h = noisy_histograms(p, y, bins=50, noise_multiplier=2.0, rng=np.random.default_rng(1))
>>> m = metrics_from_histograms(h, resamples=200)
>>> bool(0.78 < m.auroc < 0.88), bool(m.intervals["auroc"][0] < m.auroc < m.intervals["auroc"][1])
(True, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

__all__ = ["score_edges", "NoisyHistograms", "noisy_histograms", "DPMetrics", "metrics_from_histograms",
           "needed_records", "thin_class_records", "shown_miscalibrated", "INFORMATIVE_WIDTH"]


def score_edges(bins: int) -> np.ndarray:
    """``bins`` + 1 public edges on [0, 1]: 0, sigmoid(linspace(-7, 7, bins - 1)), 1."""
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 4:
        raise ValueError("bins must be an integer of at least 4")
    inner = 1 / (1 + np.exp(-np.linspace(-7.0, 7.0, int(bins) - 1)))
    return np.concatenate([[0.0], inner, [1.0]])


@dataclass(frozen=True)
class NoisyHistograms:
    """The DP release: label-0 and label-1 counts per score bin, each cell + N(0, sigma^2)."""

    edges: np.ndarray
    negatives: np.ndarray
    positives: np.ndarray
    noise_multiplier: float

    def as_dict(self) -> dict:
        return {"edges": self.edges.tolist(), "negatives": self.negatives.tolist(),
                "positives": self.positives.tolist(), "noise_multiplier": float(self.noise_multiplier)}


def noisy_histograms(probabilities, labels, bins: int, noise_multiplier: float,
                     rng: np.random.Generator) -> NoisyHistograms:
    """The Gaussian mechanism on the 2 x ``bins`` table of (label, score bin) counts; L2 sensitivity 1."""
    edges = score_edges(bins)
    if not (math.isfinite(noise_multiplier) and noise_multiplier > 0):
        raise ValueError("noise_multiplier must be a finite positive number")
    p = np.asarray(probabilities, dtype=float)
    y = np.asarray(labels)
    if p.ndim != 1 or y.ndim != 1:
        raise ValueError("probabilities and labels must be one-dimensional")
    if p.size != y.size:
        raise ValueError("probabilities and labels must have the same length")
    if not np.all(np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError("probabilities must be finite and within [0, 1]")
    if y.dtype.kind not in "biuf" or not np.all((y == 0) | (y == 1)):
        raise ValueError("labels must be 0 or 1")
    cell = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, bins - 1)  # [low, high); 1.0 in the last bin
    counts = np.bincount(y.astype(int) * bins + cell, minlength=2 * bins).reshape(2, bins)
    noisy = counts + rng.normal(0.0, noise_multiplier, counts.shape)
    return NoisyHistograms(edges, noisy[0], noisy[1], float(noise_multiplier))


@dataclass(frozen=True)
class DPMetrics:
    """Model-card metrics, all post-processing of one :class:`NoisyHistograms`."""

    auroc: float
    auprc: float
    prevalence: float
    records: float
    ece: float
    reliability: list[dict]
    intervals: dict[str, tuple[float, float]]
    confidence: float
    #: per metric: whether its interval is at most ``informative_width`` wide (else it is not reported as a number)
    informative: dict[str, bool] = None
    #: per uninformative metric: about how many test records would make its interval that narrow at this noise
    needed_records: dict[str, int | None] = None
    informative_width: float = math.nan
    calibration_slope: float = math.nan
    calibration_intercept: float = math.nan
    #: the logistic recalibration p' = sigmoid(intercept + slope logit(p)) fitted to the same counts (None where the
    #: slope is not informative, a recalibration by noise being worse than none, or where the intervals hold a
    #: calibrated model's slope 1 and intercept 0: recalibrating a calibrated model only adds noise)
    recalibration: dict | None = None
    #: where ``records`` comes from: "histograms" (their noisy total) or "record count" (a count already released)
    records_source: str = "histograms"
    #: how a metric's ``needed_records`` was made where not by scaling its interval's width (it is undefined on
    #: these counts): "lower bound" (a class under one noisy record: the noise on its count alone,
    #: :func:`thin_class_records`) or "calibrated model" (a calibration fit with no maximum: the records a
    #: calibrated model with these scores would need)
    needed_basis: dict[str, str] = None

    def as_dict(self) -> dict:
        return {"auroc": self.auroc, "auprc": self.auprc, "prevalence": self.prevalence, "records": self.records,
                "ece": self.ece, "calibration_slope": self.calibration_slope,
                "calibration_intercept": self.calibration_intercept,
                "recalibration": None if self.recalibration is None else dict(self.recalibration),
                "reliability": [dict(b) for b in self.reliability],
                "intervals": {k: [lo, hi] for k, (lo, hi) in self.intervals.items()}, "confidence": self.confidence,
                "informative": dict(self.informative or {}), "needed_records": dict(self.needed_records or {}),
                "needed_basis": dict(self.needed_basis or {}),
                "informative_width": self.informative_width, "records_source": self.records_source}


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, nan where den <= 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _auroc(neg: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Mann-Whitney over score bins (last axis, low to high), ties counted one half."""
    n, p = neg.sum(-1), pos.sum(-1)
    wins = np.sum(pos * (np.cumsum(neg, axis=-1) - 0.5 * neg), axis=-1)
    return np.where((n >= 1) & (p >= 1), np.clip(_ratio(wins, n * p), 0, 1), np.nan)


def _auprc(neg: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Average precision over thresholds at the bin edges, high to low."""
    pos, neg = pos[..., ::-1], neg[..., ::-1]
    tp, fp = np.cumsum(pos, axis=-1), np.cumsum(neg, axis=-1)
    precision = np.clip(np.nan_to_num(_ratio(tp, tp + fp)), 0, 1)
    p = pos.sum(-1)
    return np.where(p >= 1, np.clip(_ratio(np.sum(pos * precision, axis=-1), p), 0, 1), np.nan)


def _prevalence(neg: np.ndarray, pos: np.ndarray) -> np.ndarray:
    total = neg.sum(-1) + pos.sum(-1)
    return np.where(total >= 1, np.clip(_ratio(pos.sum(-1), total), 0, 1), np.nan)


def _groups(edges: np.ndarray, groups: int) -> np.ndarray:
    """Starts of the reliability groups: score bins grouped by their midpoint's tenth (of ``groups``) of [0, 1].
    Public and fixed, never read off the noisy counts: a merge driven by the noise would make the table's shape
    (its edges) a discrete outcome of the release."""
    mid = (edges[:-1] + edges[1:]) / 2
    group = np.minimum((mid * groups).astype(int), groups - 1)
    return np.flatnonzero(np.diff(np.concatenate([[-1], group])))


def _ece(neg: np.ndarray, pos: np.ndarray, starts: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """|observed rate - midpoint| over the merged bins, weighted by their mass (a negative mass weighs 0)."""
    if not starts.size:
        return np.full(neg.shape[:-1], np.nan)
    n, k = np.add.reduceat(neg, starts, axis=-1), np.add.reduceat(pos, starts, axis=-1)
    mass = np.maximum(n + k, 0)
    observed = np.clip(np.nan_to_num(_ratio(k, n + k)), 0, 1)
    return _ratio(np.sum(mass * np.abs(observed - predicted), axis=-1), mass.sum(-1))


def _valid_rows(v: np.ndarray) -> np.ndarray:
    """:func:`_nonnegative` of every row of ``v`` (last axis) at once."""
    total = np.maximum(v.sum(-1, keepdims=True), 0.0)
    u = -np.sort(-v, axis=-1)
    tau = (np.cumsum(u, axis=-1) - total) / np.arange(1, v.shape[-1] + 1)
    last = np.maximum((u > tau).sum(-1, keepdims=True) - 1, 0)  # the condition holds on a prefix
    return np.where(total > 0, np.maximum(v - np.take_along_axis(tau, last, axis=-1), 0.0), 0.0)


#: Newton steps of the calibration fits (a logistic regression of one or two parameters on a few dozen bins)
CALIBRATION_STEPS = 50
#: halvings of a Newton step that would lower the likelihood (plain Newton overshoots and diverges on a noisy table
#: whose end bins hold a few records: from slope 1, the logit midpoints of +-7 make its first step far too long)
CALIBRATION_HALVINGS = 30
#: a fitted slope or intercept beyond this is a fit that has not converged (a class seen in one bin): nan
CALIBRATION_LIMIT = 20.0
#: a fit whose last full Newton step still moves a parameter by more than this has not converged (separation: the
#: likelihood has no maximum and the slope creeps upwards every step): nan
CALIBRATION_TOLERANCE = 1e-6
#: the slope needs records (a noisy total of at least one) in this many score bins: through one bin any line fits
CALIBRATION_MIN_BINS = 2


def _log_likelihood(neg: np.ndarray, pos: np.ndarray, z: np.ndarray) -> np.ndarray:
    """The binomial log-likelihood of the counts at log-odds ``z``, summed over the last axis (stable at any z)."""
    return -(pos * np.logaddexp(0.0, -z) + neg * np.logaddexp(0.0, z)).sum(-1)


def _logistic_fit(neg: np.ndarray, pos: np.ndarray, x: np.ndarray, slope: bool) -> tuple[np.ndarray, ...]:
    """The root (a, b) of the logistic score equations of logit P(y = 1) = a + b x over the bins (last axis; b fixed
    at 1, an offset, where not ``slope``), vectorised over leading axes. The counts may be the noisy ones as released,
    negative cells included: the score equations sum(pos - (neg + pos) p) = 0 and sum(x (pos - (neg + pos) p)) = 0
    are linear in the counts, so the DP noise (mean zero) leaves them unbiased, whereas any projection onto
    non-negative counts puts phantom records into the empty end bins and drags the slope towards 0 (to 0.67 for a
    calibrated model at noise sd 7.7 and 3,500 test records). Newton's method with step halving on the binomial
    log-likelihood of those counts (each step the longest of 1, 1/2, 1/4, ... that does not lower it; Nocedal &
    Wright, "Numerical Optimization", 2006, ch. 3), from (0, 1), taken only where the information matrix is
    positive definite (with negative cells the likelihood need not be concave: where it is not, there is no fit).
    Returns (a, b) and the largest parameter change of the last full Newton step (inf where the information matrix
    is singular or not positive definite)."""
    total = neg + pos
    shape = neg.shape[:-1]
    a, b = np.zeros(shape), np.ones(shape)
    size = np.full(shape, np.inf)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for _ in range(CALIBRATION_STEPS):
            z = a[..., None] + b[..., None] * x
            p = 1 / (1 + np.exp(-z))
            r, w = pos - total * p, total * p * (1 - p)
            ga, haa = r.sum(-1), w.sum(-1)
            if slope:
                gb, hab, hbb = (r * x).sum(-1), (w * x).sum(-1), (w * x * x).sum(-1)
                det = haa * hbb - hab ** 2
                ok = (det > 1e-9 * haa * hbb) & (haa > 1e-12)  # relative: through one bin det is 0 up to rounding
                da = np.where(ok, (hbb * ga - hab * gb) / np.where(ok, det, 1), 0.0)
                db = np.where(ok, (haa * gb - hab * ga) / np.where(ok, det, 1), 0.0)
            else:
                ok = haa > 1e-12
                da, db = np.where(ok, ga / np.where(ok, haa, 1), 0.0), np.zeros(shape)
            size = np.where(ok, np.maximum(np.abs(da), np.abs(db)), np.inf)
            moving = ok & (size > CALIBRATION_TOLERANCE * 1e-3)  # the fits a step still changes
            if not moving.any():
                break
            n_, p_, z_, a_, b_, da_, db_ = (v[moving] for v in (neg, pos, z, a, b, da, db))
            now = _log_likelihood(n_, p_, z_)
            now = now - 1e-12 * (1 + np.abs(now))  # rounding at the maximum is not a lower likelihood
            t = np.ones(a_.shape)
            for _ in range(CALIBRATION_HALVINGS):
                worse = _log_likelihood(n_, p_, (a_ + t * da_)[:, None] + (b_ + t * db_)[:, None] * x) < now
                if not worse.any():
                    break
                t = np.where(worse, t / 2, t)
            else:
                t = np.where(worse, 0.0, t)  # no step found that does not lower it: the fit stays where it is
            a[moving], b[moving] = a_ + t * da_, b_ + t * db_
    return a, b, size


def _calibration(neg: np.ndarray, pos: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """(slope, intercept-in-the-large, the two-parameter fit's own intercept a of a + b logit(p): the logistic
    recalibration's) of the bins' counts (the noisy ones as released: see :func:`_logistic_fit`) against their
    abscissae ``x`` (:func:`calibration_abscissae`), vectorised over leading axes; nan where a class has under one
    record, the slope (and a) where under ``CALIBRATION_MIN_BINS`` bins hold a record, and any where its fit does
    not converge (its last full Newton step above ``CALIBRATION_TOLERANCE``, an information matrix that is singular
    or not positive definite, or a value beyond ``CALIBRATION_LIMIT``)."""
    a, b, size_ab = _logistic_fit(neg, pos, x, slope=True)
    c, _, size_c = _logistic_fit(neg, pos, x, slope=False)  # the intercept with the slope fixed at 1 (an offset)
    enough = (neg.sum(-1) >= 1) & (pos.sum(-1) >= 1)
    spread = ((neg + pos) >= 1).sum(-1) >= CALIBRATION_MIN_BINS
    fitted = enough & spread & (size_ab <= CALIBRATION_TOLERANCE)
    slope = np.where(fitted & np.isfinite(b) & (np.abs(b) < CALIBRATION_LIMIT), b, np.nan)
    intercept = np.where(enough & (size_c <= CALIBRATION_TOLERANCE) & np.isfinite(c) & (np.abs(c) < CALIBRATION_LIMIT),
                         c, np.nan)
    return slope, intercept, np.where(np.isfinite(slope) & np.isfinite(a) & (np.abs(a) < CALIBRATION_LIMIT), a, np.nan)


def _metrics(neg: np.ndarray, pos: np.ndarray, starts: np.ndarray, predicted: np.ndarray) -> dict[str, np.ndarray]:
    """The bootstrapped metrics of tables (last axis: score bins), vectorised over leading axes."""
    return {"auroc": _auroc(neg, pos), "auprc": _auprc(neg, pos), "prevalence": _prevalence(neg, pos),
            "ece": _ece(neg, pos, starts, predicted)}


#: metrics computed from the noisy counts as released (unbiased: see the module's docstring); the others from the
#: valid table
RAW = ("auroc", "auprc")
#: the calibration fits' metrics: on an open scale, with intervals from the fits' sandwich variance
CALIBRATION = ("calibration_slope", "calibration_intercept")


def _standard_errors(neg: np.ndarray, pos: np.ndarray, x: np.ndarray, a: float, b: float, slope: bool,
                     noise_multiplier: float) -> tuple[float, float]:
    """The standard errors of a calibration fit's last parameter (b where ``slope``, else the offset fit's a) from
    the sampling of the test records and from the DP noise, apart: the fit solves score equations linear in the
    counts, so its variance is the sandwich H^-1 (S_sampling + S_noise) H^-1 (Huber 1967; Stefanski & Boos, "The
    calculus of M-estimation", The American Statistician 2002) with H the information of the counts as released
    (unbiased: linear in them), S_sampling the records' own (y - p)^2 x x' summed over the cells (each cell's part
    clipped at 0, so a negative noisy cell cannot shrink it) and S_noise the noise's sigma^2 ((1 - p)^2 + p^2) x x'
    (each cell's N(0, sigma^2) enters the positives' equations times 1 - p and the negatives' times -p). Nan where H
    is not positive definite."""
    with np.errstate(over="ignore"):
        p = 1 / (1 + np.exp(-(a + b * x)))
    design = np.stack([np.ones_like(x), x], axis=-1) if slope else np.ones_like(x)[:, None]
    def moment(weight):  # noqa: E306
        return design.T @ (design * weight[:, None])
    info = moment((neg + pos) * p * (1 - p))
    if not (np.all(np.isfinite(info)) and np.all(np.linalg.eigvalsh(info) > 1e-12)):
        return math.nan, math.nan
    inverse = np.linalg.inv(info)
    sampling = inverse @ moment(np.maximum(pos * (1 - p) ** 2 + neg * p ** 2, 0.0)) @ inverse
    noise = inverse @ moment(noise_multiplier ** 2 * ((1 - p) ** 2 + p ** 2)) @ inverse
    return math.sqrt(max(sampling[-1, -1], 0.0)), math.sqrt(max(noise[-1, -1], 0.0))


def _calibration_inference(neg: np.ndarray, pos: np.ndarray, x: np.ndarray, noise_multiplier: float,
                           z: float) -> dict:
    """Each calibration metric's (point, interval, sampling sd, noise sd, the interval's width where the slope is
    at its upper end), all fitted to the counts as released; nan where a fit is undefined (:func:`_calibration`).
    Also the two-parameter fit's intercept under "a".

    The slope's Wald width grows with the slope itself (a flatter fitted curve has more information and feels
    the noise less), so among noisy fits those that came out low get the narrow intervals: flagged informative
    on its own width, a calibrated model's slope was printed at a median of 0.87 with an interval covering the
    truth in 41 % of runs near the threshold (25,000 records, noise sd 7.7; a review's 1,000 runs). The width is
    therefore also computed at the interval's upper end (the intercept refitted there), and the caller flags the
    slope informative only where both are narrow enough. That moves the threshold up rather than removing the
    selection: for logit x 2 at sd 7.7, 80 % of the printed intervals covered the truth at 8,000 records and 97 % at
    10,000, and those that miss stay within 5 % of all runs."""
    slope, intercept, a = (float(v) for v in _calibration(neg, pos, x))
    out = {}
    for name, point, fit_a, fit_b, is_slope in (("calibration_slope", slope, a, slope, True),
                                                ("calibration_intercept", intercept, intercept, 1.0, False)):
        if not (math.isfinite(point) and math.isfinite(fit_a)):
            out[name] = (math.nan, (math.nan, math.nan), math.nan, math.nan, math.nan)
            continue
        se_s, se_n = _standard_errors(neg, pos, x, fit_a, fit_b, is_slope, noise_multiplier)
        half = z * math.hypot(se_s, se_n)
        upper = 2 * half
        if is_slope and math.isfinite(half):
            top = point + half
            a_top, _, size = _logistic_fit(neg, pos, top * x, slope=False)  # the intercept with the slope at top
            upper = 2 * z * math.hypot(*_standard_errors(neg, pos, x, float(a_top), top, True, noise_multiplier)) \
                if float(size) <= CALIBRATION_TOLERANCE else math.nan
        out[name] = (point, (point - half, point + half) if math.isfinite(half) else (math.nan, math.nan), se_s, se_n,
                     upper)
    out["a"] = a
    return out


def _logit(p: np.ndarray) -> np.ndarray:
    """log(p / (1 - p)): -inf at 0, inf at 1."""
    p = np.asarray(p, dtype=float)
    with np.errstate(divide="ignore"):
        return np.log(p) - np.log1p(-p)


def logit_midpoints(edges: np.ndarray) -> np.ndarray:
    """Each score bin's midpoint on the logit scale, the abscissa of the calibration fits: the edges are equally
    spaced in logit (:func:`score_edges`), so this is where a bin's records lie on average when the logits are
    locally uniform (the logit of the probability midpoint lies off it towards the middle; at 30 bins it moved
    a calibrated model's intercept by 0.02-0.04 in simulation, against 0.01 here). The end bins, open to logit
    -inf and +inf, take their finite edge moved out by half the neighbouring bin's width."""
    z = _logit(edges)
    low, high = z[:-1].copy(), z[1:].copy()
    if not np.isfinite(low[0]):
        low[0] = high[0] - (high[1] - low[1] if low.size > 1 and np.isfinite(low[1]) else 1.0)
    if not np.isfinite(high[-1]):
        high[-1] = low[-1] + (high[-2] - low[-2] if high.size > 1 and np.isfinite(high[-2]) else 1.0)
    return (low + high) / 2


def calibration_abscissae(edges: np.ndarray, totals: np.ndarray, noise_multiplier: float) -> np.ndarray:
    """Where each score bin's records lie on the logit scale on average, the calibration fits' abscissae: the
    bin's logit midpoint (:func:`logit_midpoints`) moved by the mean of a log-linear density across the bin,
    (h / 2) coth(k h / 2) - 1 / k for width h and log-density slope k (k h^2 / 12 for small k), k read off the two
    neighbouring bins' ``totals`` (the valid table's records per bin, each with ``noise_multiplier`` + 1 added so
    that noise in sparse bins moves little). Post-processing of the release.

    At the midpoints a calibrated model's binned slope was 0.88-0.98 at 30 bins, the lower the more its scores
    concentrate (N(0, 0.4) logits: 0.88; N(-1.5, 1.2): 0.98), because records pile up on a bin's side towards the
    bulk; this brings it to within about 0.01 of 1 without noise (a review's quadrature, 2026-11-28). The end bins
    stay at their midpoints."""
    x = logit_midpoints(edges)
    t = np.log(np.maximum(np.asarray(totals, dtype=float), 0.0) + float(noise_multiplier) + 1.0)
    if x.size < 4:
        return x
    inner = slice(1, x.size - 1)
    h = np.diff(_logit(np.asarray(edges)[1:-1]))  # the inner bins' widths
    k = (t[2:] - t[:-2]) / (x[2:] - x[:-2])
    u = k * h / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        shift = np.where(np.abs(u) > 1e-6, h / 2 / np.tanh(u) - 1 / np.where(k == 0, 1, k), k * h ** 2 / 12)
    out = x.copy()
    out[inner] = x[inner] + shift
    return out


def _nonnegative(v: np.ndarray) -> np.ndarray:
    """The Euclidean projection of v onto {x >= 0, sum x = max(sum v, 0)}: max(v - tau, 0) for one tau."""
    return _valid_rows(np.asarray(v, dtype=float)[None])[0]


def _interval(replicates: np.ndarray, point: float, centre: float, confidence: float,
              reflect: bool) -> tuple[float, float]:
    """Percentile interval of the replicates, clipped to [0, 1]; reflected about the centre (the basic bootstrap)
    where ``reflect``."""
    replicates = replicates[np.isfinite(replicates)]
    if not (replicates.size and math.isfinite(point) and math.isfinite(centre)):
        return math.nan, math.nan
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(replicates, [tail, 100 - tail])
    if reflect:
        low, high = point - (high - centre), point - (low - centre)
    return float(np.clip(low, 0, 1)), float(np.clip(high, 0, 1))


#: a DP metric whose interval is wider than this is reported as not informative, not as a number
INFORMATIVE_WIDTH = 0.2


def _width(replicates: np.ndarray, confidence: float) -> float:
    replicates = replicates[np.isfinite(replicates)]
    if not replicates.size:
        return math.nan
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(replicates, [tail, 100 - tail])
    return float(high - low)


def needed_records(noise_width: float, sampling_width: float, records: float, width: float) -> int | None:
    """About how many test records would make an interval ``width`` wide, from the widths the DP noise and the test
    sampling give it alone at ``records``: the noise's part scales as 1/n (the counts grow with n, the noise does
    not), the sampling's as 1/sqrt(n), and the two add in quadrature; solved for n (the score and label distribution
    held fixed). None where nothing can be computed."""
    a, b = noise_width ** 2, sampling_width ** 2
    if not (math.isfinite(a) and math.isfinite(b) and records > 0 and width > 0) or a + b <= 0:
        return None
    x = width ** 2 / b if a == 0 else (-b + math.sqrt(b * b + 4 * a * width ** 2)) / (2 * a)  # x = n / n'
    return int(math.ceil(records / x)) if x > 0 else None


def thin_class_records(neg: np.ndarray, pos: np.ndarray, noise_multiplier: float, z: float, width: float,
                       prevalence_interval: tuple[float, float]) -> dict[str, int]:
    """Lower bounds on the test records the metrics need where one class has under one noisy record (they are
    undefined, so no width can be scaled as :func:`needed_records` does). From the DP noise alone, sampling and the
    other class's noise ignored, so more are needed:

    - every metric needs the thin class's count told from none: its noisy total has sd sigma sqrt(bins), so at
      least z sigma sqrt(bins) of its records (that much makes the prevalence's interval exclude 0 and no wider
      than twice the estimate, the rule for an informative prevalence);
    - AUROC is the thin class's mean of w, the share of the other class it outranks (ties one half), by cell:
      the noise e_i on its cells moves it by sum e_i (w_i - AUROC) / k to first order for k records, sd
      sigma sqrt(sum (w_i - AUROC)^2) / k >= sigma sqrt(sum (w_i - mean w)^2) / k whatever the thin class's
      scores. A central interval is 2 z sd wide, but AUROC is clipped to [0, 1], so a model near 0 or 1 gets one
      only z sd wide (a review found 2 z overstated the need: at 0.7 of it a separating model came out
      informative); an interval ``width`` wide therefore needs k >= z sigma sqrt(sum (w_i - mean w)^2) /
      ``width``, given the other class's released shape.

    Records from the thin class's count: k over its largest share the prevalence's interval allows (the upper
    end for positives, one less the lower end for negatives), so the bound holds to the interval's confidence.
    ``neg`` and ``pos`` are the counts as released, the other class's shape read off them made non-negative.
    Empty where neither class, or both, is thin, or the interval gives no share."""
    totals = float(np.sum(neg)), float(np.sum(pos))
    if (totals[0] < 1) == (totals[1] < 1) or not noise_multiplier > 0:
        return {}
    low, high = prevalence_interval
    thin_pos = totals[1] < 1
    share = high if thin_pos else 1 - low
    other = _nonnegative(np.asarray(neg if thin_pos else pos, dtype=float)[::1 if thin_pos else -1])
    if not (math.isfinite(share) and share > 0 and other.sum() > 0):
        return {}
    w = (np.cumsum(other) - 0.5 * other) / other.sum()
    count = z * noise_multiplier * math.sqrt(other.size)
    auroc = z * noise_multiplier * float(np.sqrt(np.sum((w - w.mean()) ** 2))) / width
    return {k: int(math.ceil(max(count, auroc if k == "auroc" else 0.0) / share))
            for k in ("auroc", "auprc", "prevalence", *CALIBRATION)}


def _calibrated_needs(neg: np.ndarray, pos: np.ndarray, x: np.ndarray, noise_multiplier: float, z: float,
                      records: float, width: float) -> dict[str, int | None]:
    """Where a calibration fit is undefined on the counts (no maximum, or an information that is not positive
    definite), about how many test records would make its interval ``width`` wide for a calibrated model (slope 1,
    intercept 0) with these scores: :func:`_standard_errors` at that model on the valid table ``neg``, ``pos``,
    scaled by :func:`needed_records`. An estimate under that assumption, not a bound: a miscalibrated model needs
    more or fewer."""
    out = {}
    for key, slope in (("calibration_slope", True), ("calibration_intercept", False)):
        se_s, se_n = _standard_errors(neg, pos, x, 0.0, 1.0, slope, noise_multiplier)
        out[key] = needed_records(2 * z * se_n, 2 * z * se_s, records, width)
    return out


def shown_miscalibrated(intervals: dict) -> bool:
    """Whether calibration intervals (a metrics dict's ``intervals``, as released or read back from JSON) exclude a
    calibrated model: the slope's excludes 1 or the intercept-in-the-large's excludes 0. A missing or undefined
    bound (nan, None) excludes nothing."""
    def excludes(key: str, value: float) -> bool:
        low, high = (float("nan") if v is None else float(v) for v in (intervals.get(key) or (None, None)))
        return low > value or high < value

    return excludes("calibration_slope", 1.0) or excludes("calibration_intercept", 0.0)


def metrics_from_histograms(h: NoisyHistograms, confidence: float = 0.95, resamples: int = 1000,
                            rng: np.random.Generator | None = None, min_bin_records: float = 10.0,
                            groups: int = 10, informative_width: float = INFORMATIVE_WIDTH,
                            records: float | None = None) -> DPMetrics:
    """AUROC, AUPRC, prevalence, record count, ECE, calibration slope and intercept and a reliability table, with
    intervals: a parametric bootstrap for the first four, the calibration fits' sandwich variance for the last two.

    Reliability groups: the score bins grouped by their midpoint into ``groups`` equal parts of [0, 1] (public
    and fixed); each group's records and positives in the valid table (the noisy counts projected onto
    non-negative ones with the same class totals), and its observed rate (in [0, 1]) where it holds at least
    ``min_bin_records`` records, else None. Prevalence and ECE are read off the valid table too; AUROC and AUPRC off
    the noisy counts as released (unbiased; a ratio clipped to [0, 1]: the valid table's AUROC is biased towards
    1/2 by about 0.03 at sigma 3-5). A metric whose class has under one noisy record is nan, and so is its interval.
    A metric whose interval is wider than ``informative_width`` is flagged not informative, with about how many
    test records would narrow it to that width (:func:`needed_records`, from the noise's and the sampling's
    widths bootstrapped, or for the calibration fits computed, apart). ``rng`` only drives the bootstrap (public;
    default seed 0).

    ``records``: the test split's record count where one better than the histograms' noisy total is already
    released (the run's DP record counts, or a public count): the noisy total sums 2 x ``bins`` noisy cells (an sd
    of sigma sqrt(2 bins), 77 test stays at sigma 10 and 30 bins), a released count has one noise draw. The
    bootstrap then draws that many records, the needed counts scale from it, and it is the result's ``records``
    (post-processing of releases either way).
    """
    if not 0 < confidence < 1:
        raise ValueError("confidence must lie strictly between 0 and 1")
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    if not min_bin_records > 0:
        raise ValueError("min_bin_records must be positive")
    rng = np.random.default_rng(0) if rng is None else rng
    neg, pos = np.asarray(h.negatives, dtype=float), np.asarray(h.positives, dtype=float)
    edges, bins = np.asarray(h.edges, dtype=float), neg.size

    if groups < 1:
        raise ValueError("groups must be at least 1")
    starts = _groups(edges, groups)
    stops = np.append(starts[1:], bins)
    predicted = (edges[starts] + edges[stops]) / 2
    if not informative_width > 0:
        raise ValueError("informative_width must be positive")
    valid_neg, valid_pos = _nonnegative(neg), _nonnegative(pos)  # post-processing: counts >= 0, rates in [0, 1]
    reliability = []
    for a, b, mid in zip(starts, stops, predicted):
        in_group, positives = float(valid_neg[a:b].sum() + valid_pos[a:b].sum()), float(valid_pos[a:b].sum())
        reliability.append({"low": float(edges[a]), "high": float(edges[b]), "mean_predicted": float(mid),
                            "records": in_group, "positives": positives,
                            "observed_rate": positives / in_group if in_group >= min_bin_records else None})
    raw = _metrics(neg, pos, starts, predicted)
    valid = _metrics(valid_neg, valid_pos, starts, predicted)
    point = {k: float(raw[k] if k in RAW else valid[k]) for k in raw}

    intervals = {k: (math.nan, math.nan) for k in point}
    informative = {k: False for k in point}
    needed: dict[str, int | None] = {k: None for k in (*point, *CALIBRATION)}
    cells = np.concatenate([valid_neg, valid_pos])
    if records is not None and cells.sum() > 0:  # the population's shape from the table, its size from the count
        cells = cells * (max(float(records), 0.0) / cells.sum())
    total = float(cells.sum())
    draws = int(round(total))
    if draws > 0:
        centre = _metrics(cells[:bins], cells[bins:], starts, predicted)
        counts = rng.multinomial(draws, cells / cells.sum(), size=resamples)
        noise = rng.normal(0.0, h.noise_multiplier, counts.shape)
        noisy = counts + noise
        replicates = _metrics(noisy[:, :bins], noisy[:, bins:], starts, predicted)
        intervals = {k: _interval(replicates[k], point[k], float(centre[k]), confidence, reflect=k == "ece")
                     for k in point}
        sampling = _metrics(counts[:, :bins].astype(float), counts[:, bins:].astype(float), starts, predicted)
        noise_only = _metrics(cells[:bins] + noise[:, :bins], cells[bins:] + noise[:, bins:], starts, predicted)
        for k, (low, high) in intervals.items():
            # prevalence: a rare outcome's interval may be narrow and still reach 0 (the demo's mortality printed
            # "prevalence 0.000 [0.000, 0.128]"); it informs only where it shows the positives exist, so its width
            # must also be under twice the estimate
            width = informative_width if k != "prevalence" else min(informative_width, 2 * max(point[k], 0.0))
            informative[k] = bool(math.isfinite(low) and math.isfinite(high) and high - low <= width
                                  and (k != "prevalence" or low > 0))
            if not informative[k]:
                needed[k] = needed_records(_width(noise_only[k], confidence), _width(sampling[k], confidence),
                                           total, width) if width > 0 else None
    z = float(NormalDist().inv_cdf(1 - (1 - confidence) / 2))
    x = calibration_abscissae(edges, valid_neg + valid_pos, float(h.noise_multiplier))
    fits = _calibration_inference(neg, pos, x, float(h.noise_multiplier), z)
    for k in CALIBRATION:
        point[k], intervals[k], se_sampling, se_noise, upper = fits[k]
        low, high = intervals[k]
        informative[k] = bool(math.isfinite(low) and math.isfinite(high) and high - low <= informative_width
                              and upper <= informative_width)
        if not informative[k]:
            needed[k] = needed_records(2 * z * se_noise, 2 * z * se_sampling, total, informative_width)
    basis = {}
    bounds = thin_class_records(neg, pos, float(h.noise_multiplier), z, informative_width, intervals["prevalence"])
    for k in (k for k, n in bounds.items() if not informative[k] and needed[k] is None):
        needed[k], basis[k] = bounds[k], "lower bound"
    for k, n in _calibrated_needs(valid_neg, valid_pos, x, float(h.noise_multiplier), z, total,
                                  informative_width).items():
        if not informative[k] and needed[k] is None and n is not None and min(neg.sum(), pos.sum()) >= 1:
            needed[k], basis[k] = n, "calibrated model"
    slope, intercept = point["calibration_slope"], fits["a"]
    miscalibrated = shown_miscalibrated(intervals)
    recalibration = {"intercept": intercept, "slope": slope} \
        if informative["calibration_slope"] and miscalibrated and math.isfinite(intercept) else None
    return DPMetrics(point["auroc"], point["auprc"], point["prevalence"],
                     max(float(neg.sum() + pos.sum()), 0.0) if records is None else float(records),
                     point["ece"], reliability, intervals, float(confidence), informative, needed,
                     float(informative_width), point["calibration_slope"], point["calibration_intercept"],
                     recalibration, "histograms" if records is None else "record count", basis)
