"""Fidelity metrics discriminate: identical and same-distribution tables score as such, copies and shifts do not."""

import numpy as np
import pandas as pd
import pytest

from privehr.models.evaluation.fidelity import (column_distances, detection_auroc, distance_to_closest_record, fidelity_summary,
                             kendall_tau_rmse)


def _table(n, seed, shift=0.0):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 3))
    return pd.DataFrame({"a": z[:, 0] + shift, "b": 0.8 * z[:, 0] + 0.6 * z[:, 1], "c": np.exp(z[:, 2])})


def test_identical_tables():
    real = _table(200, 0)
    distances = column_distances(real, real)
    assert distances["ks"].max() == 0 and distances["wasserstein_sd"].max() == 0
    assert kendall_tau_rmse(real, real) == 0


def test_shift_and_broken_dependence_are_seen():
    real, same, shifted = _table(400, 0), _table(400, 1), _table(400, 2, shift=1.5)
    assert column_distances(real, shifted).loc["a", "ks"] > 0.4 > column_distances(real, same).loc["a", "ks"]
    independent = same.assign(b=same["b"].sample(frac=1, random_state=0).to_numpy())
    assert kendall_tau_rmse(real, independent) > 0.3 > 0.1 > kendall_tau_rmse(real, same)
    assert detection_auroc(real, shifted) > 0.8
    assert detection_auroc(real, same) < 0.65


def test_dcr_flags_copied_records():
    train, holdout, fresh = _table(60, 0), _table(60, 1), _table(60, 2)
    copied = distance_to_closest_record(train, holdout, train.sample(60, replace=True, random_state=0))
    assert copied["share_closer_to_train"] == 1.0 and copied["dcr_train_median"] == 0.0
    honest = distance_to_closest_record(train, holdout, fresh)
    assert 0.25 < honest["share_closer_to_train"] < 0.75


def test_summary_has_every_metric():
    out = fidelity_summary(_table(50, 0), _table(50, 1), _table(50, 2))
    for key in ("ks_mean", "ks_max", "wasserstein_sd_mean", "kendall_tau_rmse", "detection_auroc",
                "share_closer_to_train"):
        assert np.isfinite(out[key]), key
    assert set(out["per_column"]) == {"a", "b", "c"}
    assert out["detection_auroc"] == pytest.approx(out["detection_auroc"])
