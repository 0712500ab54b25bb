import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from privehr.models.data.hourly_features import HourlyFeaturizer, flatten_for_linear


def test_statistics_come_from_training_stays_only():
    rng = np.random.default_rng(0)
    train_mean = rng.normal(10, 2, (50, 6, 3))
    train_count = (rng.random((50, 6, 3)) < 0.6).astype(np.float32)
    train_mean[train_count == 0] = np.nan
    dev_mean = rng.normal(100, 30, (20, 6, 3))  # a shifted population: must not move the statistics
    dev_count = np.ones((20, 6, 3), np.float32)
    f = HourlyFeaturizer().fit(train_mean, train_count)
    observed = train_mean[train_count > 0].reshape(-1)
    for v in range(3):
        x = train_mean[..., v][train_count[..., v] > 0]
        assert f.mean_[v] == pytest.approx(x.mean())
        assert f.std_[v] == pytest.approx(x.std(ddof=1))
    assert observed.size > 0
    out = f.transform(dev_mean, dev_count)
    np.testing.assert_allclose(out.values, ((dev_mean - f.mean_) / f.std_).astype(np.float32), rtol=1e-5)


def test_forward_fill_and_delta_stay_within_each_stay():
    mean = np.full((2, 5, 1), np.nan)
    count = np.zeros((2, 5, 1), np.float32)
    mean[0, 1, 0], count[0, 1, 0] = 4.0, 1      # stay 0 observed at hour 1 only
    mean[1, 3, 0], count[1, 3, 0] = 8.0, 2      # stay 1 observed at hour 3 only
    f = HourlyFeaturizer(delta_fill=100.0)
    f.mean_, f.std_ = np.array([0.0]), np.array([1.0])
    out = f.transform(mean, count)
    np.testing.assert_array_equal(out.values[0, :, 0], [4, 4, 4, 4, 4])  # leading hour: stay mean
    np.testing.assert_array_equal(out.values[1, :, 0], [8, 8, 8, 8, 8])  # nothing carried from stay 0
    np.testing.assert_array_equal(out.delta[0, :, 0], [100, 0, 1, 2, 3])
    np.testing.assert_array_equal(out.delta[1, :, 0], [100, 100, 100, 0, 1])
    np.testing.assert_array_equal(out.mask[:, :, 0], [[0, 1, 0, 0, 0], [0, 0, 0, 1, 0]])


def test_never_observed_variable_is_the_training_mean():
    mean = np.full((3, 4, 2), np.nan)
    count = np.zeros((3, 4, 2), np.float32)
    mean[:, :, 0], count[:, :, 0] = 1.0, 1
    f = HourlyFeaturizer().fit(mean, count)
    assert f.mean_[1] == 0 and f.std_[1] == 1 and f.std_[0] == 1  # constant -> std 1
    out = f.transform(mean, count)
    assert np.all(out.values[:, :, 1] == 0) and np.all(np.isfinite(out.values))


def test_flatten_for_linear_shape():
    f = np.zeros((4, 24, 5), np.float32)
    assert flatten_for_linear(f, f, f).shape == (4, 3 * 24 * 5)


def test_transform_before_fit_is_refused():
    with pytest.raises(NotFittedError, match="fitted"):
        HourlyFeaturizer().transform(np.zeros((1, 1, 1)), np.zeros((1, 1, 1)))


def test_transform_leaves_the_fitted_statistics_alone_and_clone_unfits():
    from sklearn.base import clone

    rng = np.random.default_rng(1)
    mean = rng.normal(5, 2, (10, 4, 2))
    count = (rng.random((10, 4, 2)) < 0.7).astype(np.float32)
    f = HourlyFeaturizer(delta_fill=50.0).fit(mean, count)
    state = (f.mean_.copy(), f.std_.copy(), f.observed_fraction_.copy())
    f.transform(mean + 1000, np.ones_like(count))  # other stays' values: the statistics do not move
    for before, after in zip(state, (f.mean_, f.std_, f.observed_fraction_)):
        np.testing.assert_array_equal(before, after)
    twin = clone(f)
    assert twin.get_params() == {"delta_fill": 50.0} and not hasattr(twin, "mean_")
    np.testing.assert_array_equal(twin.fit_transform(mean, count).values, f.transform(mean, count).values)
