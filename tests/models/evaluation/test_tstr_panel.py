"""Train-on-synthetic, test-on-real panel: a copy of the training rows scores as train-on-real, noise scores as
chance, degenerate synthetic tables give NaN rows with reasons instead of exceptions."""

import numpy as np
import pandas as pd
import pytest

from privehr.models.evaluation.tstr_panel import (PANEL, PanelClassifier, build_panel_classifier, design_matrix,
                                                 register_panel_classifier, tstr, tstr_summary)

KINDS = {**{f"x{i}": "numeric" for i in range(8)}, "age": "integer", "gcs": "integer", "sex": "binary",
         "eth": "categorical", "adm": "categorical", "sev": "ordinal", "y": "binary"}
METRICS = ["macro_f1", "auroc", "average_precision"]


def _table(n, seed, classes=2):
    """15 features of every kind; the label depends on x0, x1, sex and eth."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 10))
    frame = pd.DataFrame({f"x{i}": z[:, i] for i in range(8)})
    frame["age"] = np.round(60 + 10 * z[:, 8]).astype(int)
    frame["gcs"] = np.clip(np.round(12 + 2 * z[:, 9]), 3, 15).astype(int)
    frame["sex"] = (rng.random(n) < 0.5).astype(int)
    frame["eth"] = rng.choice(["a", "b", "c", "d"], n)
    frame["adm"] = rng.integers(0, 3, n)
    frame["sev"] = rng.integers(0, 4, n)
    logit = 1.5 * z[:, 0] + z[:, 1] - 0.5 * frame["sex"] + 1.5 * (frame["eth"] == "b") + 0.5 * rng.normal(size=n)
    frame["y"] = (logit > 0.5).astype(int) if classes == 2 else np.digitize(logit, [-0.5, 1.0])
    return frame


@pytest.fixture(scope="module")
def split():
    return _table(500, 0), _table(400, 1)


@pytest.fixture(scope="module")
def on_real(split):
    train, test = split
    return tstr(train, test, "y", KINDS)


def test_the_panel_has_the_nine_seeded_classifiers():
    assert set(PANEL) == {"logistic_regression", "decision_tree", "random_forest", "gradient_boosting", "mlp",
                                "knn", "gaussian_nb", "svm", "adaboost"}
    assert {n for n, c in PANEL.items() if c.needs_scaling} == {"logistic_regression", "mlp", "knn", "svm"}
    for name in PANEL:
        estimator = build_panel_classifier(name, seed=7)
        params = estimator.get_params()
        seeds = [v for k, v in params.items() if k.endswith("random_state")]
        assert all(s == 7 for s in seeds), name
        assert name in ("knn", "gaussian_nb") or seeds, name
    with pytest.raises(ValueError, match="unknown classifier"):
        build_panel_classifier("xgboost")


def test_train_on_real_is_informative_and_every_classifier_fits(on_real):
    assert on_real.index.tolist() == list(PANEL)
    assert on_real["fitted"].all() and on_real["reason"].isna().all()
    assert (on_real["auroc"] > 0.7).all(), on_real["auroc"]
    summary = tstr_summary(on_real)
    assert summary["n_fitted"] == summary["n_classifiers"] == 9
    assert summary["auroc"] > 0.8 and summary["macro_f1"] > 0.65 and summary["average_precision"] > 0.7
    assert summary["auroc"] == pytest.approx(on_real["auroc"].mean())


def test_a_copy_of_the_training_rows_gives_train_on_real(split, on_real):
    train, test = split
    copied = tstr(train.copy(), test, "y", KINDS)
    pd.testing.assert_frame_equal(copied[METRICS], on_real[METRICS])  # fixed seeds: the same numbers
    shuffled = tstr(train.sample(frac=1, random_state=3).reset_index(drop=True), test, "y", KINDS)
    for metric in METRICS:
        assert tstr_summary(shuffled)[metric] == pytest.approx(tstr_summary(on_real)[metric], abs=0.03)


def test_a_synthetic_table_without_dependence_scores_near_chance(split):
    train, test = split
    noise = train.assign(y=train["y"].sample(frac=1, random_state=0).to_numpy())
    summary = tstr_summary(tstr(noise, test, "y", KINDS, classifiers=["logistic_regression", "random_forest",
                                                                        "gaussian_nb"]))
    assert 0.35 < summary["auroc"] < 0.65


def test_a_single_class_synthetic_target_gives_nan_rows_with_reasons(split):
    train, test = split
    rows = tstr(train.assign(y=0), test, "y", KINDS)
    assert len(rows) == 9 and not rows["fitted"].any()
    assert rows[METRICS].isna().all().all()
    assert rows["reason"].str.contains("1 class").all()
    summary = tstr_summary(rows)
    assert summary == {"macro_f1": None, "auroc": None, "average_precision": None, "n_fitted": 0, "n_classifiers": 9}


def test_missing_values_and_invalid_targets_are_dropped_and_counted(split):
    train, test = split
    train, test = train.copy(), test.copy()
    train["y"] = train["y"].astype(float)
    train.loc[:6, "x0"] = np.nan                 # 7 rows with a missing feature
    train.loc[7:9, "y"] = np.nan                 # 3 rows with a missing target
    train.loc[10:14, "y"] = 0.37                 # 5 rows whose target is not a class
    test.loc[:3, "eth"] = None                   # 4 test rows with a missing feature
    rows = tstr(train, test, "y", KINDS, classifiers=["logistic_regression", "decision_tree"])
    row = rows.loc["logistic_regression"]
    assert (row["train_rows_dropped"], row["train_rows_invalid_target"], row["test_rows_dropped"]) == (10, 5, 4)
    assert (row["n_train"], row["n_test"]) == (500 - 15, 400 - 4)
    assert rows["fitted"].all()


def test_multi_class_targets(split):
    kinds = KINDS | {"y": "categorical"}
    train, test = _table(500, 0, classes=3), _table(400, 1, classes=3)
    assert sorted(test["y"].unique()) == [0, 1, 2]
    rows = tstr(train, test, "y", kinds)
    assert rows["fitted"].all() and (rows["n_classes"] == 3).all()
    assert (rows["auroc"] > 0.7).all() and rows[METRICS].notna().all().all()
    # A synthetic table that lacks class 2: still fitted; class 2 gets score 0, AUROC 0.5 for it.
    partial = tstr(train[train["y"] != 2], test, "y", kinds, classifiers=["logistic_regression", "svm"])
    assert partial["fitted"].all() and partial["auroc"].between(0.5, 0.9).all()
    # String labels with a categories list.
    names = {0: "low", 1: "mid", 2: "high"}
    as_text = tstr(train.assign(y=train["y"].map(names)), test.assign(y=test["y"].map(names)), "y", kinds,
                   classifiers=["logistic_regression"], categories={"y": ["low", "mid", "high"]})
    assert as_text.loc["logistic_regression", "auroc"] == pytest.approx(rows.loc["logistic_regression", "auroc"])


def test_one_hot_encoding_ignores_unseen_categories():
    train = pd.DataFrame({"eth": ["a", "b", "a"], "x": [1.0, 2.0, 3.0]})
    test = pd.DataFrame({"eth": ["b", "z", None], "x": [0.0, 1.0, 2.0]})
    kinds = {"eth": "categorical", "x": "numeric"}
    x_train, x_test, names = design_matrix(train, test, ["eth", "x"], kinds)
    assert names == ["eth=a", "eth=b", "x"]
    np.testing.assert_array_equal(x_test[:2], [[0, 1, 0], [0, 0, 1]])
    assert np.isnan(x_test[2, :2]).all()
    _, x_test, names = design_matrix(train, test, ["eth"], kinds, categories={"eth": ["a", "b", "c"]})
    assert names == ["eth=a", "eth=b", "eth=c"] and x_test[1].tolist() == [0, 0, 0]
    _, x_test, names = design_matrix(train.assign(s=["lo", "hi", "lo"]), test.assign(s=["hi", "mid", "lo"]), ["s"],
                                     {"s": "ordinal"}, categories={"s": ["lo", "mid", "hi"]})
    assert names == ["s"] and x_test[:, 0].tolist() == [2, 1, 0]


def test_a_failing_classifier_reports_its_reason_and_the_others_carry_on(split):
    train, test = split

    class Broken:
        def fit(self, x, y):
            raise RuntimeError("cannot fit")

    @register_panel_classifier
    class _Broken(PanelClassifier):
        name = "broken"

        def build(self, seed):
            return Broken()

    try:
        rows = tstr(train, test, "y", KINDS, classifiers=["broken", "gaussian_nb"])
    finally:
        PANEL._items.pop("broken")
    assert rows.loc["broken", "reason"] == "RuntimeError: cannot fit" and not rows.loc["broken", "fitted"]
    assert rows.loc["gaussian_nb", "fitted"] and tstr_summary(rows)["n_fitted"] == 1


def test_bad_targets_are_refused(split):
    train, test = split
    with pytest.raises(ValueError, match="classification target"):
        tstr(train, test, "x0", KINDS)
    with pytest.raises(ValueError, match="unknown classifier"):
        tstr(train, test, "y", KINDS, classifiers=["xgboost"])
