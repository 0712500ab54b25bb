import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from privehr.models.synthesis.scaling import AffineScaling


def _frames(seed=0):
    rng = np.random.default_rng(seed)
    train = pd.DataFrame({"x": rng.normal(10, 3, 50), "y": rng.uniform(0, 1, 50), "k": np.full(50, 2.0)})
    test = pd.DataFrame({"x": rng.normal(40, 9, 20), "y": rng.uniform(5, 9, 20), "k": rng.normal(size=20)})
    return train, test


def test_fit_learns_the_training_rows_statistics_and_transform_only_applies_them():
    train, test = _frames()
    scaling = AffineScaling().fit(train)
    np.testing.assert_array_equal(scaling.center_, train.mean().to_numpy())
    np.testing.assert_array_equal(scaling.scale_, [train["x"].std(ddof=0), train["y"].std(ddof=0), 1.0])  # k constant
    assert scaling.columns_ == ["x", "y", "k"] and scaling.private_
    center, scale = scaling.center_.copy(), scaling.scale_.copy()
    z = scaling.transform(test)
    scaling.transform(test * 100)  # other held-out values: the fitted state does not move
    np.testing.assert_array_equal(scaling.center_, center)
    np.testing.assert_array_equal(scaling.scale_, scale)
    np.testing.assert_allclose(z, (test.to_numpy() - center) / scale)
    np.testing.assert_allclose(scaling.fit_transform(train), (train.to_numpy() - center) / scale)
    pd.testing.assert_frame_equal(scaling.inverse_transform(z), test.reset_index(drop=True), atol=1e-12, rtol=0)


def test_bounds_scaling_is_data_independent():
    train, test = _frames()
    bounds = {"x": (0.0, 20.0), "y": (0.0, 1.0), "k": (2.0, 2.0)}
    a, b = AffineScaling(bounds=bounds).fit(train), AffineScaling(bounds=bounds).fit(test)
    for fitted in (a, b):
        np.testing.assert_array_equal(fitted.center_, [10.0, 0.5, 2.0])
        np.testing.assert_array_equal(fitted.scale_, [5.0, 0.25, 1.0])  # equal bounds keep scale 1
        assert not fitted.private_
    np.testing.assert_array_equal(a.transform(test), b.transform(test))


def test_transform_selects_the_fitted_columns_and_refuses_before_fit():
    train, test = _frames()
    scaling = AffineScaling().fit(train[["x", "y"]])
    np.testing.assert_array_equal(scaling.transform(test[["y", "k", "x"]]), scaling.transform(test[["x", "y"]]))
    with pytest.raises(NotFittedError):
        AffineScaling().transform(test)


def test_clone_gives_an_unfitted_estimator_with_the_same_parameters():
    train, _ = _frames()
    bounds = {"x": (0.0, 20.0), "y": (0.0, 1.0), "k": (0.0, 4.0)}
    fitted = AffineScaling(bounds=bounds).fit(train)
    twin = clone(fitted)
    assert twin.get_params() == {"bounds": bounds} and not hasattr(twin, "center_")
    np.testing.assert_array_equal(twin.fit(train).transform(train), fitted.transform(train))
