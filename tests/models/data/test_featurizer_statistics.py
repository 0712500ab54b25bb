import json

import numpy as np
import pytest

from privehr.models.data.featurizer_statistics import (
    FeaturizerStatistics, _patient_vectors, _released_sums, dp_statistics, exact_statistics, public_statistics,
    sensitivity)
from privehr.models.data.hourly_features import HourlyFeaturizer


def _hourly(rng, stays=40, hours=6, v=3, p_obs=0.7):
    mean = rng.normal(50, 10, (stays, hours, v))
    count = (rng.random((stays, hours, v)) < p_obs).astype(np.float32)
    mean[count == 0] = np.nan
    return mean, count


def test_exact_statistics_equal_hourly_featurizer():
    mean, count = _hourly(np.random.default_rng(0))
    f = HourlyFeaturizer().fit(mean, count)
    s = exact_statistics(mean, count)
    np.testing.assert_array_equal(s.mean, f.mean_)
    np.testing.assert_array_equal(s.std, f.std_)
    assert s.source == "exact" and not s.fallback.any()
    assert json.loads(json.dumps(s.as_dict()))["source"] == "exact"


def test_public_statistics_reads_table_and_names_missing_variables():
    table = {"heart rate": (86.0, 18.0), "glucose": (140.0, 0.0), "albumin": (2.98, 0.64)}
    s = public_statistics(["glucose", "heart rate"], table)
    assert s.mean.tolist() == [140.0, 86.0] and s.std.tolist() == [1.0, 18.0]
    assert s.source == "public" and s.fallback.tolist() == [False, False]
    with pytest.raises(ValueError, match="lactate") as err:
        public_statistics(["heart rate", "lactate", "ph"], table)
    assert "ph" in str(err.value) and "86" not in str(err.value)
    assert isinstance(err.value.__cause__, KeyError)


def test_dp_statistics_without_noise_match_patient_weighted_statistics():
    rng = np.random.default_rng(1)
    stays, hours, v = 60, 5, 2
    subject_ids = rng.integers(0, 25, stays)                     # several stays per patient
    value = rng.uniform(20, 80, (stays, v))                       # constant within a stay
    observed = rng.random((stays, v)) < 0.8
    count = (rng.random((stays, hours, v)) < 0.6) & observed[:, None, :]
    count[:, 0, :] = observed                                     # an observing stay has >= 1 observed hour
    mean = np.where(count, value[:, None, :], np.nan)
    low, high = np.zeros(v), np.full(v, 100.0)
    s = dp_statistics(mean, count.astype(float), subject_ids, low, high, noise_multiplier=1e-9,
                      rng=np.random.default_rng(2))
    _, inv, n_stays = np.unique(subject_ids, return_inverse=True, return_counts=True)
    weight = observed / n_stays[inv][:, None]                     # 1 / (stays of the patient), if observed
    ref_mean = (weight * value).sum(0) / weight.sum(0)
    ref_std = np.sqrt((weight * (value - ref_mean) ** 2).sum(0) / weight.sum(0))
    np.testing.assert_allclose(s.mean, ref_mean, atol=1e-6)
    np.testing.assert_allclose(s.std, ref_std, atol=1e-6)
    assert s.source == "dp" and not s.fallback.any()


def test_one_patient_moves_the_unnoised_sum_by_at_most_the_sensitivity():
    rng = np.random.default_rng(3)
    mean, count = _hourly(rng, stays=30, v=4)
    subject_ids = rng.integers(0, 12, 30)
    low, high = np.full(4, 20.0), np.full(4, 80.0)
    base = _patient_vectors(mean, count, subject_ids, low, high)
    assert base.shape == (len(np.unique(subject_ids)), 12) and (base >= 0).all() and (base <= 1).all()
    for stays in (1, 3):                                          # extreme values, one or several stays
        extra = np.where(np.arange(stays)[:, None, None] % 2 == 0, 1e6, -1e6) * np.ones((stays, 6, 4))
        extra[0, 0, 0] = np.nan                                  # a missing cell too
        both = _patient_vectors(np.concatenate([mean, extra]), np.concatenate([count, np.ones_like(extra)]),
                                np.concatenate([subject_ids, np.full(stays, 999)]), low, high)
        assert (both >= 0).all() and (both <= 1).all()
        change = np.linalg.norm(both.sum(0) - base.sum(0))
        assert change <= sensitivity(4) + 1e-12
    assert sensitivity(4) == pytest.approx(np.sqrt(12))
    one = np.full((1, 2, 4), 1e6)                                # all at the top: the bound is attained
    assert np.linalg.norm(_patient_vectors(one, np.ones_like(one), [0], low, high).sum(0)) == pytest.approx(
        sensitivity(4))


def test_noise_std_of_released_sums_matches_noise_multiplier_times_sensitivity():
    rng = np.random.default_rng(4)
    mean, count = _hourly(rng, stays=20, v=2)
    ids, low, high = rng.integers(0, 8, 20), np.zeros(2), np.full(2, 100.0)
    clean = _patient_vectors(mean, count, ids, low, high).sum(0)
    z, noise_rng = 0.7, np.random.default_rng(5)
    sigma = z * sensitivity(2)
    noise = np.array([_released_sums(mean, count, ids, low, high, sigma, noise_rng) - clean for _ in range(2000)])
    assert noise.std() == pytest.approx(z * np.sqrt(6), rel=0.05)
    assert np.abs(noise.mean(0)).max() < 0.2 and np.abs(np.corrcoef(noise.T) - np.eye(6)).max() < 0.1
    # dp_statistics draws exactly this noise from the rng it is given
    s = dp_statistics(mean, count, ids, low, high, z, np.random.default_rng(11), min_patients=0.0)
    released = _released_sums(mean, count, ids, low, high, sigma, np.random.default_rng(11))
    m = released[:2] / released[4:]
    expected = np.clip(m * 100, 0, 100)
    np.testing.assert_allclose(s.mean[~s.fallback], expected[~s.fallback])


def test_never_observed_variable_falls_back_to_the_range():
    mean = np.full((5, 2, 1), np.nan)
    count = np.zeros_like(mean)
    assert _patient_vectors(mean, count, np.arange(5), np.zeros(1), np.ones(1)).sum() == 0.0
    s = dp_statistics(mean, count, np.arange(5), np.zeros(1), np.ones(1), 3.0, np.random.default_rng(0))
    assert s.fallback.tolist() == [True] and s.mean.tolist() == [0.5] and s.std.tolist() == [0.25]


def test_rare_variables_fall_back():
    rng = np.random.default_rng(6)
    stays, v = 300, 3
    mean, count = _hourly(rng, stays=stays, v=v, p_obs=0.8)
    count[3:, :, 2] = 0                                           # variable 2: observed in 3 patients only
    mean[3:, :, 2] = np.nan
    low, high = np.zeros(v), np.full(v, 100.0)
    s = dp_statistics(mean, count, np.arange(stays), low, high, noise_multiplier=0.05,
                      rng=np.random.default_rng(7), min_patients=20.0, fallback_mean=[1.0, 2.0, 3.0],
                      fallback_std=[4.0, 5.0, 6.0])
    assert s.fallback.tolist() == [False, False, True]
    assert s.mean[2] == 3.0 and s.std[2] == 6.0
    d = s.as_dict()
    assert d["fallback"] == [False, False, True] and json.loads(json.dumps(d)) == d


def test_outputs_within_bounds_and_std_positive():
    rng = np.random.default_rng(8)
    mean, count = _hourly(rng, stays=50, v=5)
    mean[:, :, 0] = 1e3                                           # far above the bound: clipped
    low, high = np.full(5, 30.0), np.full(5, 70.0)
    for z in (0.1, 5.0, 100.0):
        s = dp_statistics(mean, count, rng.integers(0, 20, 50), low, high, z, np.random.default_rng(9))
        assert (s.mean >= low).all() and (s.mean <= high).all()
        assert (s.std > 0).all() and np.isfinite(s.std).all()
        assert isinstance(s, FeaturizerStatistics)


def test_bad_inputs_raise_without_values():
    rng = np.random.default_rng(10)
    mean, count = _hourly(rng, stays=4, v=2)
    mean[0, 0, 0] = 123.456
    count[0, 0, 0] = 1
    ids, low, high = np.arange(4), np.array([7.25, 0.0]), np.array([9.5, 1.0])
    bad = [
        dict(low=np.array([7.25, 2.0]), high=high),                       # high <= low
        dict(high=np.array([9.5, 0.0])),                                  # high == low
        dict(low=low, high=np.array([9.5])),                              # bounds of the wrong length
        dict(count=count[:, :2]),                                         # count shape mismatch
        dict(subject_ids=np.arange(3)),                                   # one id short
        dict(noise_multiplier=0.0),
        dict(fallback_std=np.array([1.0, -2.5])),
    ]
    for change in bad:
        kwargs = dict(mean=mean, count=count, subject_ids=ids, low=low, high=high, noise_multiplier=1.0,
                      rng=np.random.default_rng(0)) | change
        with pytest.raises(ValueError) as err:
            dp_statistics(**kwargs)
        assert not any(s in str(err.value) for s in ("123.456", "7.25", "9.5", "2.5")), str(err.value)


def test_a_variance_the_noise_swamps_falls_back_while_its_mean_is_kept():
    rng = np.random.default_rng(8)
    mean = rng.normal(50.0, 1.0, (2000, 1, 1))  # sd 1 in a range of 100: (0.01)^2 against noise ~1e-3 / patient
    s = dp_statistics(mean, np.ones_like(mean), np.arange(2000), np.zeros(1), np.full(1, 100.0), 1.0,
                      np.random.default_rng(9), fallback_mean=[10.0], fallback_std=[7.0])
    assert s.fallback.tolist() == [True] and s.std.tolist() == [7.0] and abs(s.mean[0] - 50.0) < 1.0
