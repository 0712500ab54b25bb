import numpy as np
import pandas as pd
import pytest

from privehr.models.mice import gelman_rubin, multiple_imputation


def _table(n=120, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n)
    frame = pd.DataFrame({"a": 10 + 2 * z + 0.3 * rng.standard_normal(n), "b": 5 - z + 0.3 * rng.standard_normal(n),
                          "c": rng.uniform(0, 1, n)})
    holes = frame.copy()
    holes.loc[rng.random(n) < 0.3, "a"] = np.nan
    holes.loc[rng.random(n) < 0.2, "b"] = np.nan
    return frame, holes


def test_m_complete_datasets_within_bounds_and_observed_values_kept():
    truth, holes = _table()
    train, test = holes.iloc[:90], holes.iloc[90:]
    r = multiple_imputation(train, test, m=4, max_iter=5, seed=1, bounds={"a": (9.0, 13.0), "b": (None, 6.0)})
    assert len(r.train) == len(r.other) == 4
    for done, source in [(d, train) for d in r.train] + [(d, test) for d in r.other]:
        assert not done.isna().any().any()
        observed = source.notna()
        assert np.allclose(done[observed].fillna(0), source[observed].fillna(0))
        imputed_a = done.loc[source["a"].isna(), "a"]
        assert imputed_a.between(9.0, 13.0).all()
        assert (done.loc[source["b"].isna(), "b"] <= 6.0).all()
    # posterior draws: the m datasets differ where values were missing
    assert not np.allclose(r.train[0]["a"], r.train[1]["a"])


def test_chained_equations_use_the_other_variables():
    truth, holes = _table(200)
    r = multiple_imputation(holes, m=3, max_iter=5, seed=2)
    missing = holes["a"].isna() & holes["b"].notna()  # a = 20 - 2 b + noise: b predicts a
    err = np.mean([np.abs(d.loc[missing, "a"] - truth.loc[missing, "a"]).mean() for d in r.train])
    assert err < 0.6 * np.abs(truth["a"] - truth["a"].mean()).mean()


def test_held_out_rows_do_not_influence_the_imputation_model():
    _, holes = _table()
    train, test = holes.iloc[:90], holes.iloc[90:]
    shifted = test.copy()
    shifted[["a", "b"]] += 1000.0  # wildly different held-out rows
    r1 = multiple_imputation(train, test, m=2, max_iter=4, seed=3)
    r2 = multiple_imputation(train, shifted, m=2, max_iter=4, seed=3)
    for d1, d2 in zip(r1.train, r2.train):
        pd.testing.assert_frame_equal(d1, d2)  # fitted on training rows only


def test_empty_training_column_is_refused():
    _, holes = _table()
    holes["d"] = np.nan
    with pytest.raises(ValueError, match=r"columns \['d'\] have no observed training value"):
        multiple_imputation(holes, m=2, max_iter=2)


def test_trace_and_rhat():
    _, holes = _table(60)
    r = multiple_imputation(holes, m=3, max_iter=4, seed=0, trace=True)
    assert set(r.trace) == {"a", "b"} and np.array(r.trace["a"]).shape == (3, 4)
    # the last round of the trace is the returned imputation
    assert np.isclose(r.trace["a"][0][-1], r.train[0].loc[holes["a"].isna(), "a"].mean())
    assert all(np.isfinite(v) for v in r.rhat.values())


def test_gelman_rubin_known_values():
    mixed = np.array([[0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]])
    assert gelman_rubin(mixed) < 1.0 + 1e-9
    apart = np.array([[0.0, 0.1, 0.0, 0.1], [5.0, 5.1, 5.0, 5.1]])
    assert gelman_rubin(apart) > 5
