"""Mixed-type fidelity: zero on identical tables, analytic values on hand-made shifts, exact invalid shares."""

import json

import numpy as np
import pandas as pd
import pytest

from privehr.models.evaluation.fidelity import column_distances, kendall_tau_rmse
from privehr.models.evaluation.mixed_fidelity import (invalid_mask, is_discrete, kendall_tau_distance, kendall_tau_matrix,
                                   mixed_column_distances, mixed_fidelity_summary, total_variation)

KINDS = {"x": "numeric", "age": "integer", "gcs": "integer", "sex": "binary", "eth": "categorical",
         "sev": "ordinal", "const": "numeric"}


def _table(n=300, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 3))
    return pd.DataFrame({"x": z[:, 0], "age": np.round(60 + 12 * z[:, 1]).astype(int),
                         "gcs": np.clip(np.round(12 + 2 * z[:, 0]), 3, 15).astype(int),
                         "sex": (z[:, 2] > 0).astype(int), "eth": rng.choice(["a", "b", "c"], n),
                         "sev": rng.integers(0, 4, n), "const": np.full(n, 2.0)})


def test_identical_tables_score_zero_everywhere_even_with_a_constant_column():
    real = _table()
    rows = mixed_column_distances(real, real.copy(), KINDS)
    assert rows["tv"].dropna().eq(0).all() and rows["ks"].dropna().eq(0).all()
    assert rows["wasserstein_sd"].dropna().eq(0).all() and rows["invalid_share"].eq(0).all()
    summary = mixed_fidelity_summary(real, real.copy(), KINDS)
    assert summary["tv_mean"] == 0 and summary["ks_mean"] == 0 and summary["wasserstein_sd_mean"] == 0
    assert summary["tau_rmse"] == 0 and summary["tau_mae"] == 0 and summary["invalid_share"] == 0
    assert summary["tau_pairs"] == 7 * 6 // 2


def test_which_columns_are_discrete():
    real = _table()
    rows = mixed_column_distances(real, real, KINDS)
    # age has ~60 distinct values: continuous only; gcs (<= 13 values): TV as well as KS/W1.
    assert rows.loc["age", "treated_as"] == "continuous" and np.isnan(rows.loc["age", "tv"])
    assert rows.loc["gcs", "treated_as"] == "discrete+continuous" and rows.loc["gcs", "tv"] == 0
    assert rows.loc["gcs", "ks"] == 0
    for column in ("sex", "eth", "sev"):
        assert rows.loc[column, "treated_as"] == "discrete" and np.isnan(rows.loc[column, "ks"])
    assert not is_discrete("integer", real["gcs"], integer_levels=5)
    assert is_discrete("integer", real["age"], integer_levels=1000)
    assert not is_discrete("numeric", pd.Series([0.0, 1.0]))


def test_total_variation_of_known_shifts():
    real = pd.Series([0] * 50 + [1] * 50)
    synthetic = pd.Series([0] * 70 + [1] * 30)
    assert total_variation(real, synthetic) == pytest.approx(0.2, abs=1e-12)
    real = pd.Series(["a"] * 50 + ["b"] * 30 + ["c"] * 20)
    synthetic = pd.Series(["a"] * 20 + ["b"] * 30 + ["c"] * 40 + ["d"] * 10)
    # 1/2 (|.5-.2| + |.3-.3| + |.2-.4| + |0-.1|) = 0.3
    assert total_variation(real, synthetic) == pytest.approx(0.3, abs=1e-12)
    assert total_variation(real, synthetic, categories=["a", "b", "c", "e"]) == pytest.approx(0.3, abs=1e-12)
    # A binary column emitted as continuous values: all synthetic mass sits on values the real one lacks.
    assert total_variation(pd.Series([0, 1] * 50), pd.Series(np.linspace(0.01, 0.99, 100))) == pytest.approx(1.0)


def test_standardised_wasserstein_of_a_one_sd_shift_is_one():
    real = _table()
    sd = real["x"].std(ddof=0)
    rows = mixed_column_distances(real[["x"]], real[["x"]] + sd, {"x": "numeric"})
    assert rows.loc["x", "wasserstein_sd"] == pytest.approx(1.0, rel=1e-9)
    assert rows.loc["x", "ks"] == pytest.approx(column_distances(real[["x"]], real[["x"]] + sd).loc["x", "ks"])


def test_invalid_share_on_a_hand_made_frame():
    kinds = {"sex": "binary", "n": "integer", "eth": "categorical", "code": "categorical", "x": "numeric",
             "sev": "ordinal"}
    real = pd.DataFrame({"sex": [0, 1, 0, 1], "n": [1, 2, 3, 4], "eth": ["a", "b", "a", "b"],
                         "code": [0, 1, 0, 1], "x": [1.0, 2.0, 3.0, 4.0], "sev": [1, 2, 3, 1]})
    synthetic = pd.DataFrame({
        "sex": [0, 1, 0.37, np.nan],        # 0.37 and NaN: 2/4
        "n": [1, 2.5, np.inf, 4],            # 2.5 and inf: 2/4
        "eth": ["a", "c", None, "b"],        # "c" outside the list and None: 2/4
        "code": [0, 2, 1.5, 1],              # 2 outside the list, 1.5 not an integer: 2/4
        "x": [1.0, np.nan, 3.0, 4.0],        # NaN: 1/4
        "sev": [1, 2, 3.5, 9],               # 3.5 not an integer; 9 is allowed without a list: 1/4
    })
    categories = {"eth": ["a", "b"], "code": [0, 1]}
    rows = mixed_column_distances(real, synthetic, kinds, categories)
    expected = {"sex": 0.5, "n": 0.5, "eth": 0.5, "code": 0.5, "x": 0.25, "sev": 0.25}
    assert rows["invalid_share"].to_dict() == expected
    assert rows["n_invalid"].to_dict() == {"sex": 2, "n": 2, "eth": 2, "code": 2, "x": 1, "sev": 1}
    summary = mixed_fidelity_summary(real, synthetic, kinds, categories)
    assert summary["invalid_share"] == pytest.approx(np.mean(list(expected.values())))
    assert summary["columns_with_invalid"] == 6
    assert invalid_mask(pd.Series([0, 1, 2]), "binary").tolist() == [False, False, True]
    assert invalid_mask(pd.Series([1, 2, 3]), "binary", categories=[1, 2, 3]).tolist() == [False] * 3
    assert invalid_mask(pd.Series(["M", "F", "X"]), "binary").tolist() == [False] * 3  # strings, no list
    assert invalid_mask(pd.Series(["1.5", "x"]), "numeric").tolist() == [False, True]


def test_kendall_tau_distance_of_a_reversed_dependence():
    a = np.arange(20.0)
    real = pd.DataFrame({"a": a, "b": a ** 2, "c": np.full(20, 3.0)})
    synthetic = pd.DataFrame({"a": a, "b": -a, "c": np.full(20, 3.0)})
    # tau(a, b) goes from +1 to -1; pairs with the constant column c are 0 in both: diffs (2, 0, 0).
    out = kendall_tau_distance(real, synthetic)
    assert out == {"tau_rmse": pytest.approx(np.sqrt(4 / 3)), "tau_mae": pytest.approx(2 / 3), "tau_pairs": 3}
    tau = kendall_tau_matrix(real)
    assert not tau.isna().any().any() and tau.loc["a", "c"] == 0 and tau.loc["c", "c"] == 1


def test_kendall_tau_agrees_with_the_numeric_fidelity_module():
    real, other = _table(200, 0), _table(200, 1)
    numeric = [c for c in real.columns if c != "eth"]
    out = kendall_tau_distance(real[numeric], other[numeric])
    assert out["tau_rmse"] == pytest.approx(kendall_tau_rmse(real[numeric], other[numeric]), abs=1e-12)
    assert 0 < out["tau_mae"] <= out["tau_rmse"]


def test_string_columns_enter_tau_by_shared_codes_and_a_constant_synthetic_column_gives_no_nan():
    real = _table(200, 0)
    synthetic = real.assign(x=real["x"].sample(frac=1, random_state=0).to_numpy(), sex=0)
    out = kendall_tau_distance(real, synthetic, categories={"eth": ["c", "b", "a"]})
    assert np.isfinite(out["tau_rmse"]) and out["tau_rmse"] > 0.05
    same = kendall_tau_distance(real, real.copy(), categories={"eth": ["c", "b", "a"]})
    assert same["tau_rmse"] == 0


def test_a_maf_emitting_continuous_values_for_discrete_columns_is_flagged():
    real = _table(300, 0)
    synthetic = real.assign(sex=np.random.default_rng(1).uniform(-0.2, 1.2, 300),
                            sev=real["sev"] + 0.3)
    summary = mixed_fidelity_summary(real, synthetic, KINDS)
    assert summary["per_column"]["sex"]["invalid_share"] == 1.0
    assert summary["per_column"]["sev"]["invalid_share"] == 1.0
    assert summary["per_column"]["sex"]["tv"] == 1.0
    assert summary["columns_with_invalid"] == 2


def test_summary_is_json_ready_and_marks_what_does_not_apply():
    real = _table(100, 0)
    summary = mixed_fidelity_summary(real, _table(100, 1), KINDS)
    json.dumps(summary, allow_nan=False)
    assert summary["per_column"]["sex"]["ks"] is None and summary["per_column"]["x"]["tv"] is None
    assert summary["discrete_columns"] == 4 and summary["continuous_columns"] == 4  # gcs counts in both
    only_numeric = mixed_fidelity_summary(real[["x"]], real[["x"]], {"x": "numeric"})
    assert only_numeric["tv_mean"] is None and only_numeric["tau_pairs"] == 0


def test_bad_input_is_refused():
    real = _table(20, 0)
    with pytest.raises(ValueError, match="no kind"):
        mixed_column_distances(real, real, {"x": "numeric"})
    with pytest.raises(ValueError, match="unknown kind"):
        mixed_column_distances(real[["x"]], real[["x"]], {"x": "float"})
    with pytest.raises(ValueError, match="lacks"):
        mixed_column_distances(real[["x", "age"]], real[["x"]], KINDS)
