import numpy as np
import pandas as pd

from privehr.models.data import quarantine as q
from privehr.models.data.derived_columns import add_derived
from privehr.simulate.ehr_simulator import HARROD_TABLE1, simulate_ehr_table
from privehr.models.data.hourly_profile import VariableProfile, stay_keys
from privehr.core.specs import DerivedColumn, VariableBounds


def test_row_checks_list_ids_values_and_reasons():
    frame = pd.DataFrame({"id": [1, 2, 2, None], "label": [0, 1, 2, np.nan], "x": [5.0, -1.0, 50.0, np.nan]})
    out = q.combine([q.missing_ids(frame, ["id"]), q.duplicate_keys(frame, ["id"], ["id"]),
                     q.outside_domain(frame, "label", [0, 1], ["id"]),
                     q.beyond_bounds(frame, {"x": (0.0, 10.0)}, ["id"])], ["id"])
    assert list(out.columns) == ["id", "column", "value", "reason"]
    reasons = sorted(zip(out["id"].map(str), out["reason"]))
    assert reasons == sorted([("nan", "missing id"), ("2.0", "duplicate key (id)"), ("2.0", "duplicate key (id)"),
                              ("2.0", "label not in [0, 1]"), ("nan", "missing label"),
                              ("2.0", "below bounds low 0.0"), ("2.0", "above bounds high 10.0")])


def test_mask_beyond_bounds_sets_missing_and_zero_counts():
    mean = np.array([[[1.0, 50.0], [99.0, np.nan]]])
    count = np.ones_like(mean)
    bounds = {"t": VariableBounds(name="t", outlier_low=14.2, valid_low=26, valid_high=45, outlier_high=47)}
    assert q.mask_beyond_bounds(mean, count, ["u", "t"], bounds) == 1  # 50 > 47; u has no bounds
    assert np.isnan(mean[0, 0, 1]) and count[0, 0, 1] == 0 and mean[0, 1, 0] == 99.0


def test_variable_profile_over_chunks_equals_one_pass():
    rng = np.random.default_rng(0)
    x = rng.normal(37, 1, (1000, 2))
    x[rng.random((1000, 2)) < 0.4] = np.nan
    x[3, 0] = 98.6
    bounds = {"temperature": VariableBounds(name="temperature", outlier_low=14.2, valid_low=26, valid_high=45,
                                            outlier_high=47)}
    whole, parts = VariableProfile(["temperature", "other"], bounds), VariableProfile(["temperature", "other"], bounds)
    whole.update(x)
    for chunk in np.array_split(x, 7):
        parts.update(chunk)
    pd.testing.assert_frame_equal(whole.frame(), parts.frame())
    f = whole.frame().set_index("variable")
    assert f.loc["temperature", "fraction_beyond_outlier"] == 1 / np.sum(~np.isnan(x[:, 0]))
    assert f.loc["temperature", "mean_in_valid_range"] and not f.loc["other", "in_spec"]
    fahrenheit = VariableProfile(["temperature"], bounds)
    fahrenheit.update(x[:, :1] * 9 / 5 + 32)
    assert not fahrenheit.frame()["mean_in_valid_range"].iloc[0]


def test_stay_keys_find_gaps_duplicates_and_late_starts():
    icu = np.array([1, 1, 1, 2, 2, 2, 3, 3])
    hours = np.array([0, 1, 2, 0, 2, 3, 1, 1])
    k = stay_keys(icu, hours, np.array([1, 2])).set_index("icustay_id")
    assert k.loc[1, "contiguous"] and k.loc[1, "duplicate_rows"] == 0 and k.loc[1, "first_hour"] == 0
    assert not k.loc[2, "contiguous"]
    assert k.loc[3, "duplicate_rows"] == 1 and k.loc[3, "first_hour"] == 1 and not k.loc[3, "in_patients"]


def test_derived_columns_follow_su_2023():
    frame = pd.DataFrame({"pap_diastolic": [12.0, 30.0], "pap_systolic": [30.0, 50.0]})
    out = add_derived(frame, [DerivedColumn(name="mean_pap", expression="2 / 3 * pap_diastolic + 1 / 3 * pap_systolic"),
                              DerivedColumn(name="hypertensive", expression="mean_pap > 20")])
    assert np.allclose(out["mean_pap"], [18.0, 110 / 3]) and list(out["hypertensive"]) == [0, 1]


def test_ehr_simulator_matches_table_1_missingness():
    t = simulate_ehr_table(seed=1)
    assert t.shape == (84, 26) and list(t.columns) == list(HARROD_TABLE1)
    observed = t.notna().sum()
    assert all(observed[n] == spec[2] for n, spec in HARROD_TABLE1.items())
    assert t.isna().all(axis=1).sum() == 2
    for name, (lo, hi, *_rest) in HARROD_TABLE1.items():
        assert t[name].dropna().between(lo - 0.05, hi + 0.05).all()


def test_tidy_writes_float_ids_as_integers_and_never_rewrites_text_ids():
    import pandas as pd

    from privehr.models.data.quarantine import tidy

    floats = pd.DataFrame({"reason": ["r", "r", "s"], "icustay_id": [10005.0, 10005.0, None],
                           "column": ["", "", ""], "value": [None, None, None]})
    assert tidy(floats)["icustay_id"].tolist() == [10005, pd.NA] and list(tidy(floats).columns)[0] == "icustay_id"
    text = pd.DataFrame({"patient_id": ["000123", "1e3", "1000"], "column": "", "value": None, "reason": "r"})
    assert tidy(text)["patient_id"].tolist() == ["000123", "1e3", "1000"]
