"""Derived columns are evaluated from their checked tree with numpy: the same values as the pandas arithmetic they
replace, numpy's inf and nan where it gives them, and no code run whatever the expression says."""

from types import SimpleNamespace as D

import numpy as np
import pandas as pd
import pytest

from privehr.core.specs import load_ehr_spec
from privehr.models.data.derived_columns import add_derived, derived_sources, evaluate


@pytest.fixture()
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"pap_diastolic": rng.normal(15, 6, 40).round(1), "pap_systolic": rng.normal(35, 12, 40),
                          "age": rng.integers(20, 90, 40).astype(float), "sex": rng.integers(0, 2, 40)},
                         index=pd.RangeIndex(100, 140))
    frame.loc[[102, 107], "pap_systolic"] = np.nan
    return frame


def test_the_demo_spec_s_derived_columns_are_su_2023_eq_5(frame):
    out = add_derived(frame, load_ehr_spec("harrod_ehr").derived)
    mean_pap = 2 / 3 * frame["pap_diastolic"] + 1 / 3 * frame["pap_systolic"]
    pd.testing.assert_series_equal(out["mean_pap"], mean_pap, check_names=False)
    pd.testing.assert_series_equal(out["hypertensive"], (mean_pap > 20).astype(int), check_names=False)
    assert out["hypertensive"].dtype == int and out["mean_pap"].dtype == float
    assert out.loc[102, "hypertensive"] == 0  # nan > 20 is false, as in pandas


@pytest.mark.parametrize("expression, expected", [
    ("age * 2 - pap_systolic / 3", lambda f: f["age"] * 2 - f["pap_systolic"] / 3),
    ("age ** 2 // 7 % 5", lambda f: f["age"] ** 2 // 7 % 5),
    ("-age + +sex", lambda f: -f["age"] + f["sex"]),
    ("age > 60 & sex == 1", lambda f: (f["age"] > 60) & (f["sex"] == 1)),
    ("age > 60 | pap_diastolic <= 10", lambda f: (f["age"] > 60) | (f["pap_diastolic"] <= 10)),
    ("age > 60 and not sex != 0", lambda f: (f["age"] > 60) & ~(f["sex"] != 0)),
    ("~(age >= 50)", lambda f: ~(f["age"] >= 50)),
    ("30 < age <= 60", lambda f: (30 < f["age"]) & (f["age"] <= 60)),
    ("where(sex == 1, log(age), sqrt(abs(pap_diastolic)))",
     lambda f: pd.Series(np.where(f["sex"] == 1, np.log(f["age"]), np.sqrt(f["pap_diastolic"].abs())), f.index)),
    ("clip(maximum(pap_diastolic, 10), 12, minimum(age, 40)) + exp(sex)",
     lambda f: np.clip(np.maximum(f["pap_diastolic"], 10), 12, np.minimum(f["age"], 40)) + np.exp(f["sex"])),
    ("2", lambda f: pd.Series(2.0, f.index)),
])
def test_values_equal_the_pandas_computation(frame, expression, expected):
    want = expected(frame)
    want = want.astype(int) if want.dtype == bool else want.astype(float)
    pd.testing.assert_series_equal(evaluate(expression, frame), want, check_names=False)


def test_division_by_zero_gives_numpy_s_inf_and_nan_without_a_warning():
    frame = pd.DataFrame({"a": [1.0, -1.0, 0.0, 2.0], "b": [0.0, 0.0, 0.0, 4.0]})
    with np.errstate(all="raise"):  # evaluated under its own errstate
        out = evaluate("a / b", frame)
        np.testing.assert_array_equal(out, [np.inf, -np.inf, np.nan, 0.5])
        assert evaluate("a % b", frame).isna().sum() == 3 and np.isinf(evaluate("10 ** 400 * a", frame)[0])


def test_sources_come_from_the_expression_s_names_through_earlier_derived_columns():
    derived = [D(name="m", expression="maximum(a, abs(b))"), D(name="h", expression="m > 20 & c2 < 1"),
               D(name="k", expression="h + exp(1)")]
    assert derived_sources(derived, ["a", "b", "c", "c2", "exp"]) == {"m": ["a", "b"], "h": ["c2", "a", "b"],
                                                                      "k": ["c2", "a", "b"]}


def test_an_unchecked_payload_is_refused_by_the_evaluator_too(frame, tmp_path):
    planted = tmp_path / "planted"
    payload = f'age.__class__.__init__.__globals__["sys"].modules["os"].system("id > {planted}") + age'
    with pytest.raises(ValueError, match="derived column 'x': not allowed: attribute access"):
        add_derived(frame, [D(name="x", expression=payload)])
    with pytest.raises(ValueError, match="derived column 'x': 'weight' is not an attribute"):
        add_derived(frame, [D(name="x", expression="weight + 1")])
    assert not planted.exists()


def test_a_text_column_is_named_never_shown():
    frame = pd.DataFrame({"a": ["secret-173", "x"]})
    with pytest.raises(ValueError, match="derived column 'x': column 'a' is not numeric") as err:
        add_derived(frame, [D(name="x", expression="a + 1")])
    assert "secret" not in str(err.value)
