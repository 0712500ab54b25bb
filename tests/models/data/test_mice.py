import pickle

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.experimental import enable_iterative_imputer
from sklearn.impute import IterativeImputer

from privehr.models.data.mice import MICEImputer, gelman_rubin

del enable_iterative_imputer  # imported for its side effect: it registers IterativeImputer


def _table(n=120, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n)
    frame = pd.DataFrame({"a": 10 + 2 * z + 0.3 * rng.standard_normal(n), "b": 5 - z + 0.3 * rng.standard_normal(n),
                          "c": rng.uniform(0, 1, n)})
    holes = frame.copy()
    holes.loc[rng.random(n) < 0.3, "a"] = np.nan
    holes.loc[rng.random(n) < 0.2, "b"] = np.nan
    return frame, holes


def _split():
    _, holes = _table()
    return holes.iloc[:90], holes.iloc[90:]


def _one_call(train, other, m, max_iter, seed, bounds):
    """The former one-call procedure (``multiple_imputation``), verbatim: per seed, one fresh imputer fitted and
    transformed on the training rows, then applied to the other rows."""
    low = np.nan_to_num(np.array([bounds.get(c, (None, None))[0] for c in train.columns], float), nan=-np.inf)
    high = np.nan_to_num(np.array([bounds.get(c, (None, None))[1] for c in train.columns], float), nan=np.inf)
    done_train, done_other = [], []
    for s in [seed * 1000 + i for i in range(m)]:
        imputer = IterativeImputer(sample_posterior=True, max_iter=max_iter, random_state=s, min_value=low,
                                   max_value=high, keep_empty_features=False, skip_complete=True)
        done_train.append(pd.DataFrame(imputer.fit_transform(train.to_numpy(float)), index=train.index,
                                       columns=train.columns))
        done_other.append(pd.DataFrame(imputer.transform(other.to_numpy(float)), index=other.index,
                                       columns=train.columns))
    return done_train, done_other


def test_m_complete_datasets_within_bounds_and_observed_values_kept():
    train, test = _split()
    mice = MICEImputer(m=4, max_iter=5, seed=1, bounds={"a": (9.0, 13.0), "b": (None, 6.0)})
    done_train, done_test = mice.fit_transform(train), mice.transform(test)
    assert len(done_train) == len(done_test) == len(mice.imputers_) == 4
    for done, source in [(d, train) for d in done_train] + [(d, test) for d in done_test]:
        assert not done.isna().any().any()
        observed = source.notna()
        assert np.allclose(done[observed].fillna(0), source[observed].fillna(0))
        imputed_a = done.loc[source["a"].isna(), "a"]
        assert imputed_a.between(9.0, 13.0).all()
        assert (done.loc[source["b"].isna(), "b"] <= 6.0).all()
    # posterior draws: the m datasets differ where values were missing
    assert not np.allclose(done_train[0]["a"], done_train[1]["a"])


def test_chained_equations_use_the_other_variables():
    truth, holes = _table(200)
    done = MICEImputer(m=3, max_iter=5, seed=2).fit_transform(holes)
    missing = holes["a"].isna() & holes["b"].notna()  # a = 20 - 2 b + noise: b predicts a
    err = np.mean([np.abs(d.loc[missing, "a"] - truth.loc[missing, "a"]).mean() for d in done])
    assert err < 0.6 * np.abs(truth["a"] - truth["a"].mean()).mean()


def test_fit_transform_then_transform_equal_the_former_one_call_result():
    train, test = _split()
    bounds = {"a": (9.0, 13.0), "b": (None, 6.0)}
    mice = MICEImputer(m=3, max_iter=4, seed=5, bounds=bounds)
    done_train, done_test = mice.fit_transform(train), mice.transform(test)
    expected_train, expected_test = _one_call(train, test, 3, 4, 5, bounds)
    assert mice.seeds_ == [5000, 5001, 5002]
    for got, expected in zip(done_train + done_test, expected_train + expected_test):
        pd.testing.assert_frame_equal(got, expected, check_exact=True)


def test_transform_leaves_the_fitted_state_alone_and_uses_training_statistics_only():
    train, test = _split()
    mice = MICEImputer(m=2, max_iter=4, seed=3).fit(train)
    imputers, fitted = list(mice.imputers_), pickle.dumps(mice.imputers_)
    first = mice.transform(test)
    shifted = test.copy()
    shifted[["a", "b", "c"]] += 1000.0  # wildly different held-out rows
    shifted.loc[shifted.index[:5], "c"] = np.nan  # c is complete in training: held-out holes get its training mean
    mice.transform(shifted)
    assert all(a is b for a, b in zip(mice.imputers_, imputers))
    assert pickle.dumps(mice.imputers_) == fitted  # no refit, not even the random state moved
    for d in mice.transform(shifted):
        assert np.allclose(d.loc[shifted.index[:5], "c"], train["c"].mean())
    for imputer in mice.imputers_:  # the start of every chain: the training rows' column means
        np.testing.assert_allclose(imputer.initial_imputer_.statistics_, train.mean().to_numpy())
    for a, b in zip(first, mice.transform(test)):  # the same rows give the same draws
        pd.testing.assert_frame_equal(a, b, check_exact=True)


def test_transform_selects_the_fitted_columns_by_name():
    train, test = _split()
    mice = MICEImputer(m=2, max_iter=3, seed=4).fit(train)
    reordered = mice.transform(test[["c", "a", "b"]].assign(extra=1.0))
    for a, b in zip(reordered, mice.transform(test)):
        pd.testing.assert_frame_equal(a, b)
    assert [len(d) for d in mice.transform(test.iloc[:0])] == [0, 0]
    with pytest.raises(ValueError, match=r"columns \['c'\] were fitted"):
        mice.transform(test[["a", "b"]])


def test_clone_gives_an_unfitted_estimator_with_the_same_parameters():
    train, _ = _split()
    bounds = {"a": (9.0, 13.0)}
    mice = MICEImputer(m=2, max_iter=3, seed=6, bounds=bounds, trace=True)
    mice.fit(train)
    twin = clone(mice)
    assert twin.get_params() == mice.get_params() and twin.bounds is not bounds
    assert not hasattr(twin, "imputers_")
    with pytest.raises(NotFittedError):
        twin.transform(train)
    for a, b in zip(twin.fit_transform(train), mice.fit_transform(train)):
        pd.testing.assert_frame_equal(a, b, check_exact=True)


def test_empty_training_column_is_refused():
    _, holes = _table()
    holes["d"] = np.nan
    with pytest.raises(ValueError, match=r"columns \['d'\] have no observed training value"):
        MICEImputer(m=2, max_iter=2).fit(holes)
    with pytest.raises(ValueError, match="m must be at least 1"):
        MICEImputer(m=0).fit(holes[["a"]])


def test_trace_and_rhat():
    _, holes = _table(60)
    mice = MICEImputer(m=3, max_iter=4, seed=0, trace=True)
    done = mice.fit_transform(holes)
    assert set(mice.trace_) == {"a", "b"} and np.array(mice.trace_["a"]).shape == (3, 4)
    # the last round of the trace is the returned imputation
    assert np.isclose(mice.trace_["a"][0][-1], done[0].loc[holes["a"].isna(), "a"].mean())
    assert set(mice.rhat_) == {"a", "b"} and all(np.isfinite(v) for v in mice.rhat_.values())
    untraced = MICEImputer(m=2, max_iter=2).fit(holes)
    assert untraced.trace_ == {} and untraced.rhat_ == {}


def test_gelman_rubin_known_values():
    mixed = np.array([[0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]])
    assert gelman_rubin(mixed) < 1.0 + 1e-9
    apart = np.array([[0.0, 0.1, 0.0, 0.1], [5.0, 5.1, 5.0, 5.1]])
    assert gelman_rubin(apart) > 5
