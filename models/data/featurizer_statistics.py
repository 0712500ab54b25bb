"""Per-variable (mean, std) for :class:`HourlyFeaturizer` that can leave the hospital with a DP model.

``HourlyFeaturizer.fit`` standardises with the exact mean and std of the training cells: exact functions of
the training patients, so a model shipped with them is not differentially private whatever its training.
This module supplies the pair from one of three sources:

* ``exact_statistics``: what ``HourlyFeaturizer.fit`` computes (not private; the non-DP reference);
* ``public_statistics``: published per-variable statistics, MIMIC-Extract's ``level2`` mean and sd (Wang et
  al. 2020), looked up by name; no privacy cost, but they describe MIMIC-III as a whole, not this cohort;
* ``dp_statistics``: a Gaussian mechanism on bounded per-patient sufficient statistics, below.

The mechanism (privacy unit: the patient). For variable v, with public bounds low_v < high_v:

1. clip every observed hourly mean to [low_v, high_v] and rescale, u = (x - low_v) / (high_v - low_v) in [0, 1];
2. per stay: a_v = mean of u over the stay's observed hours, b_v = mean of u^2 over them, c_v = 1 if the stay
   observed v at all (a_v = b_v = c_v = 0 otherwise);
3. per patient: the average of the stays' vectors (a, b, c), so each patient gives one vector in [0, 1]^(3V)
   however many stays they have;
4. release S = sum over patients + N(0, sigma^2 I) with sigma = noise_multiplier * sqrt(3V);
5. post-process S: m = S_a / S_c, var = max(S_b / S_c - m^2, 0), mean = low + m (high - low) clipped to the
   bounds, std = sqrt(var) (high - low). A variable falls back (to ``fallback_mean``/``fallback_std``, e.g.
   the public values, else the midpoint and a quarter of the range) when its noisy count S_c is below
   ``min_patients`` (default 10 sigma: the count's relative noise exceeds ~10%); its std alone falls back
   when it is not finite, below 1e-3 (high - low), or when the variance's own noise (first-order propagation
   of the three noisy sums' known noise) exceeds half of it.

Sensitivity (sketch). u and u^2 lie in [0, 1], so do their means a and b, and c is 0 or 1; an average of
vectors in [0, 1]^(3V) stays there. Adding or removing one patient changes the sum by that patient's
vector alone (the other patients' vectors do not depend on them: stays are grouped by patient, never
across), so ||Delta S||_2 <= sqrt(3V) = ``sensitivity(V)``; replacing one patient by another changes it by a
difference of two such vectors, coordinates in [-1, 1], hence the same bound. Adding N(0, (z sqrt(3V))^2 I)
is then the Gaussian mechanism (Dwork & Roth 2014, Sec. 3.5 and App. A) with noise multiplier z =
``noise_multiplier``: in an RDP/PLD accountant it composes with DP-SGD as one more Gaussian step with
noise multiplier z, sample rate 1 and 1 step (Ponomareva et al. 2023, Sec. 5, on charging preprocessing to
the budget). Steps 5 and the fallback decision read only S and public inputs: post-processing, free.

What the guarantee does not cover: the bounds ``low``/``high``, the variable list and the fallback values
must be public and chosen without looking at the data (e.g. a spec's valid range and MIMIC-Extract's
published statistics); ``subject_ids`` must map every stay of a patient to one id; the noise comes from
numpy's generator (not a cryptographic source; floating-point attacks on the Gaussian are not addressed).

The estimates weight patients, not cells: each observing patient counts with the share of their stays
that observed the variable, and each stay with its mean over its observed hours, whereas
``HourlyFeaturizer`` weights every observed cell equally; the variance is the population (ddof 0) variance
of hourly values under that weighting (within-stay plus between-stay).

References:
    Dwork, Roth (2014). The Algorithmic Foundations of Differential Privacy. Found. Trends Theor. Comput. Sci.
    Ponomareva, Hazimeh, Kurakin, Xu, Denison, McMahan, Vassilvitskii, Chien, Thakurta (2023). How to DP-fy
        ML: A Practical Guide to Machine Learning with Differential Privacy. JAIR 77.
    Wang, McDermott, Chauhan, Ghassemi, Hughes, Naumann (2020). MIMIC-Extract: A Data Extraction,
        Preprocessing, and Representation Pipeline for MIMIC-III. CHIL 2020 (on MIMIC-III, Johnson, Pollard
        et al. 2016): the source of the public statistics.

>>> mean = np.array([[[1.0]], [[3.0]]])  # 2 stays (of 2 patients) x 1 hour x 1 variable
>>> s = dp_statistics(mean, np.ones_like(mean), np.array([7, 8]), low=np.array([0.0]), high=np.array([10.0]),
...                   noise_multiplier=1e-9, rng=np.random.default_rng(0))
>>> s.source, s.mean.round(6).tolist(), s.std.round(6).tolist(), s.fallback.tolist()
('dp', [2.0], [1.0], [False])
>>> round(sensitivity(104), 3)
17.664
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privehr.models.data.hourly_features import HourlyFeaturizer

__all__ = ["FeaturizerStatistics", "exact_statistics", "public_statistics", "dp_statistics", "sensitivity",
           "fallback_threshold", "can_inform"]

SOURCES = ("public", "dp", "exact")


@dataclass(frozen=True)
class FeaturizerStatistics:
    """Per-variable mean and std (> 0) in the data's units, their source and the DP fallback flags."""

    mean: np.ndarray
    std: np.ndarray
    source: str
    fallback: np.ndarray

    def __post_init__(self):
        mean, std = np.array(self.mean, float), np.array(self.std, float)
        fallback = np.array(self.fallback, bool)
        if mean.ndim != 1 or std.shape != mean.shape or fallback.shape != mean.shape:
            raise ValueError("mean, std and fallback must be 1-D arrays of the same length")
        if not (np.isfinite(mean).all() and np.isfinite(std).all() and (std > 0).all()):
            raise ValueError("mean must be finite and std finite and positive")
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}")
        for name, arr in (("mean", mean), ("std", std), ("fallback", fallback)):
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

    def as_dict(self) -> dict:
        return {"mean": self.mean.tolist(), "std": self.std.tolist(), "source": self.source,
                "fallback": self.fallback.tolist()}


def sensitivity(variables: int) -> float:
    """L2 sensitivity of the per-patient sum of (a, b, c) vectors under add/remove-one-patient: sqrt(3V)."""
    if int(variables) != variables or variables < 1:
        raise ValueError("variables must be a positive integer")
    return float(np.sqrt(3 * int(variables)))


def fallback_threshold(noise_multiplier: float, variables: int) -> float:
    """The smallest noisy count S_c a variable's DP estimate is accepted at: 10 noise stds (its relative noise
    under about 10 %)."""
    return 10 * noise_multiplier * sensitivity(variables)


def can_inform(noise_multiplier: float, variables: int, records: float) -> bool:
    """Whether a DP release at ``noise_multiplier`` could give any variable its own estimate, judged before it is
    made from ``records``, a public or already released DP count of the training stays. A variable's S_c sums at
    most one per patient, and a patient has at least one stay, so its expected value is at most ``records``: below
    :func:`fallback_threshold`, every variable is expected to fall back to the public values and the release would buy
    nothing. Post-processing of the count: deciding costs no privacy."""
    return float(records) >= fallback_threshold(noise_multiplier, variables)


def exact_statistics(mean, count) -> FeaturizerStatistics:
    """The statistics ``HourlyFeaturizer.fit`` computes on these stays (not differentially private)."""
    f = HourlyFeaturizer().fit(np.asarray(mean, float), np.asarray(count))
    return FeaturizerStatistics(f.mean_, f.std_, "exact", np.zeros(len(f.mean_), bool))


def public_statistics(variables: list[str], table: dict[str, tuple[float, float]]) -> FeaturizerStatistics:
    """Published (mean, sd) per variable name (MIMIC-Extract's ``level2``); sd <= 0 (or not finite) -> 1.

    Raises ValueError naming the variables the table lacks (or gives a non-finite mean for).
    """
    missing = [v for v in variables if v not in table or not np.isfinite(float(table[v][0]))]
    if missing:
        raise ValueError(f"no public statistics for variables: {missing}") from KeyError(*missing)
    mean = np.array([float(table[v][0]) for v in variables])
    sd = np.array([float(table[v][1]) for v in variables])
    sd = np.where(np.isfinite(sd) & (sd > 0), sd, 1.0)
    return FeaturizerStatistics(mean, sd, "public", np.zeros(len(variables), bool))


def _check_inputs(mean, count, subject_ids, low, high):
    mean, count = np.asarray(mean, float), np.asarray(count)
    subject_ids, low, high = np.asarray(subject_ids), np.asarray(low, float), np.asarray(high, float)
    if mean.ndim != 3 or count.shape != mean.shape:
        raise ValueError("mean and count must be (stays, hours, variables) arrays of the same shape")
    stays, _, v = mean.shape
    if stays < 1 or v < 1:
        raise ValueError("need at least one stay and one variable")
    if subject_ids.shape != (stays,):
        raise ValueError("subject_ids must have one entry per stay (shape (stays,))")
    if subject_ids.dtype.kind == "f" and not np.isfinite(subject_ids).all():
        raise ValueError("subject_ids must not contain NaN or infinity")
    if low.shape != (v,) or high.shape != (v,):
        raise ValueError("low and high must have one entry per variable (shape (variables,))")
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ValueError("low and high must be finite")
    if not (high > low).all():
        raise ValueError("high must exceed low for every variable")
    return mean, count, subject_ids, low, high


def _patient_vectors(mean, count, subject_ids, low, high) -> np.ndarray:
    """(patients, 3V) per-patient averages of the stays' (a, b, c) vectors, each in [0, 1]^(3V)."""
    mean, count, subject_ids, low, high = _check_inputs(mean, count, subject_ids, low, high)
    mask = (count > 0) & np.isfinite(mean)
    u = np.where(mask, (np.clip(mean, low, high) - low) / (high - low), 0.0)
    n = mask.sum(axis=1)                                          # (stays, V) observed hours
    seen = n > 0
    a = np.divide(u.sum(axis=1), n, out=np.zeros(n.shape), where=seen)
    b = np.divide((u ** 2).sum(axis=1), n, out=np.zeros(n.shape), where=seen)
    per_stay = np.clip(np.concatenate([a, b, seen.astype(float)], axis=1), 0.0, 1.0)
    _, patient = np.unique(subject_ids, return_inverse=True)
    patient = patient.reshape(-1)
    sums = np.zeros((patient.max() + 1, per_stay.shape[1]))
    np.add.at(sums, patient, per_stay)
    return sums / np.bincount(patient)[:, None]


def _released_sums(mean, count, subject_ids, low, high, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """The mechanism's only output: (3V,) sum of the patient vectors (S_a, S_b, S_c) plus N(0, sigma^2 I)."""
    clean = _patient_vectors(mean, count, subject_ids, low, high).sum(axis=0)
    return clean + rng.normal(0.0, sigma, clean.shape)


def dp_statistics(mean, count, subject_ids, low, high, noise_multiplier: float, rng: np.random.Generator,
                  fallback_mean=None, fallback_std=None, min_patients: float | None = None
                  ) -> FeaturizerStatistics:
    """Gaussian-mechanism (mean, std) per variable; the privacy unit is the patient (see the module docstring).

    Args:
        mean, count: (stays, hours, V) hourly means and measurement counts (observed: count > 0, mean finite).
        subject_ids: (stays,) the patient of each stay.
        low, high: (V,) public, data-independent bounds, high > low.
        noise_multiplier: z > 0; the noise std is z * ``sensitivity(V)``.
        rng: the only source of noise.
        fallback_mean, fallback_std: (V,) public values for variables whose estimate is too noisy
            (default: the bounds' midpoint and a quarter of the range).
        min_patients: smallest noisy count S_c accepted (default 10 noise stds).
    """
    mean, count, subject_ids, low, high = _check_inputs(mean, count, subject_ids, low, high)
    v = mean.shape[2]
    if not (np.isfinite(noise_multiplier) and noise_multiplier > 0):
        raise ValueError("noise_multiplier must be finite and positive")
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator")
    width = high - low
    fb_mean = low + width / 2 if fallback_mean is None else np.asarray(fallback_mean, float)
    fb_std = width / 4 if fallback_std is None else np.asarray(fallback_std, float)
    if fb_mean.shape != (v,) or fb_std.shape != (v,):
        raise ValueError("fallback_mean and fallback_std must have one entry per variable")
    if not (np.isfinite(fb_mean).all() and np.isfinite(fb_std).all() and (fb_std > 0).all()):
        raise ValueError("fallback_mean must be finite and fallback_std finite and positive")
    sigma = noise_multiplier * sensitivity(v)
    threshold = fallback_threshold(noise_multiplier, v) if min_patients is None else float(min_patients)
    if not np.isfinite(threshold):
        raise ValueError("min_patients must be finite")

    noisy = _released_sums(mean, count, subject_ids, low, high, sigma, rng)
    s_a, s_b, s_c = noisy[:v], noisy[v:2 * v], noisy[2 * v:]
    with np.errstate(divide="ignore", invalid="ignore"):
        m = s_a / s_c
        var = np.maximum(s_b / s_c - m ** 2, 0.0)
        # the variance's noise, to first order in the three noisy sums (all post-processing of the release)
        var_se = sigma / s_c * np.sqrt(1 + 4 * m ** 2 + (2 * m ** 2 - s_b / s_c) ** 2)
    est_mean = np.clip(low + m * width, low, high)
    est_std = np.sqrt(var) * width
    no_mean = (s_c < threshold) | (s_c <= 0) | ~np.isfinite(est_mean)
    no_std = (no_mean | ~np.isfinite(est_std) | (est_std < 1e-3 * width) | (est_std <= 0)
              | ~(var_se <= 0.5 * var))  # a variance known to within 50 %, else the fallback scale
    return FeaturizerStatistics(np.where(no_mean, fb_mean, est_mean), np.where(no_std, fb_std, est_std),
                                "dp", no_mean | no_std)
