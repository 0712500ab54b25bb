"""Train on synthetic, test on real with a panel of classifiers, as Lee et al. 2022 report it.

References:
    Lee, Kim, Jeong, Ro (2022). Differentially Private Normalizing Flows for Synthetic Tabular Data Generation. AAAI.

Their section "Classification Performance" (Tables 2-3): 9 classifiers are fitted on
the synthetic table and tested on real rows held out from the generator; macro-F1, AUROC and average
precision (APC) are reported averaged over the classifiers and per classifier. Passing the real training
rows instead of the synthetic ones gives the train-on-real reference with the same code.

The panel (``PANEL``, a registry of :class:`PanelClassifier` classes whose ``build(seed)`` is an unfitted
scikit-learn estimator; add one with :func:`register_panel_classifier`): logistic regression, decision tree, random forest (100 trees), gradient
boosting (100 depth-3 trees; the exact, single-threaded kind: on a few hundred rows the histogram kind's
OpenMP threads cost more than they save), MLP (one hidden layer of 64, early stopping, at most 200
epochs), k-nearest neighbours (k = 5), Gaussian naive Bayes, SVM (RBF; its decision values rank the rows
for AUROC and AP, no Platt scaling) and AdaBoost (50 stumps). Every builder takes a fixed
``random_state`` (seed 0 by default) so a panel is reproducible; no privacy claim depends on these seeds.
Models with ``needs_scaling`` (logistic regression, MLP, kNN, SVM) see standardised inputs (mean and SD of
the training rows); the others see raw inputs.

Design matrix, from the feature kinds (those of :mod:`privehr.models.evaluation.mixed_fidelity`): numeric, integer and binary
columns stored as numbers enter as they are (a synthetic 0.37 in a binary column stays 0.37);
categorical columns, and binary or ordinal columns of strings, are one-hot encoded over
``categories[column]`` when given, else over the values of the *training* rows, so a test value the
training rows never took gives all-zero indicators (it is ignored); ordinal columns of strings with a
categories list enter as their position in it. Rows with a missing (or infinite) feature or target are
dropped and counted (test rows whose target is outside ``categories[target]`` too).

Target classes are ``categories[target]`` when given, else the values of the real test target; training
rows whose target is none of them (a synthetic 0.37 for a 0/1 label) are dropped and counted. With two
classes the positive class is the last of them (sorted unless a list is given: 1 for 0/1).

* macro-F1 = mean over classes of F1_c = 2 TP_c / (2 TP_c + FP_c + FN_c), over the classes in the test
  target or the predictions (scikit-learn's default), 0 for a class with no true or predicted rows.
* AUROC = P(score of a random positive > score of a random negative) (ties count 1/2).
* Average precision AP = sum_k (R_k - R_{k-1}) P_k over the score thresholds.
* More than two classes: one-vs-rest for every class present in the test target with both positive and
  negative test rows, the score of class c being its column of ``predict_proba`` (or
  ``decision_function``); a class the training rows lack gets score 0 (AUROC 0.5, AP = its prevalence).
  AUROC and AP are the unweighted (macro) means over those classes.

A training set whose target has fewer than two classes cannot fit a classifier: every classifier reports
NaN with that reason and the panel carries on; so does a classifier whose fit raises.

>>> rng = np.random.default_rng(0)
>>> frame = pd.DataFrame({"x": rng.normal(size=200)})
>>> frame["y"] = (frame["x"] + 0.5 * rng.normal(size=200) > 0).astype(int)
>>> rows = tstr(frame[:150], frame[150:], "y", {"x": "numeric", "y": "binary"}, classifiers=["logistic_regression"])
>>> bool(rows.loc["logistic_regression", "auroc"] > 0.8)
True
"""

from __future__ import annotations

import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
import pandas as pd
from pandas.api.types import is_bool_dtype, is_numeric_dtype
from sklearn.base import BaseEstimator
from sklearn.ensemble import AdaBoostClassifier, GradientBoostingClassifier, RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score, f1_score, roc_auc_score
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsClassifier
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC
from sklearn.tree import DecisionTreeClassifier

from privehr.core.registry import Registry

__all__ = ["PANEL", "PanelClassifier", "register_panel_classifier", "build_panel_classifier", "design_matrix", "tstr",
           "tstr_summary"]

PANEL: Registry["PanelClassifier"] = Registry("classifier")
register_panel_classifier = PANEL.register
METRICS = ("macro_f1", "auroc", "average_precision")


class PanelClassifier(ABC):
    """One classifier of the panel: an unfitted, seeded scikit-learn estimator."""

    name: ClassVar[str]
    #: sees standardised inputs (mean and SD of the training rows)
    needs_scaling: ClassVar[bool] = False

    @abstractmethod
    def build(self, seed: int) -> BaseEstimator:
        """The unfitted estimator, its ``random_state`` set to ``seed`` where it has one."""


@register_panel_classifier
class _LogisticRegression(PanelClassifier):
    name = "logistic_regression"
    needs_scaling = True

    def build(self, seed: int) -> BaseEstimator:
        return LogisticRegression(max_iter=1000, random_state=seed)


@register_panel_classifier
class _DecisionTree(PanelClassifier):
    name = "decision_tree"

    def build(self, seed: int) -> BaseEstimator:
        return DecisionTreeClassifier(random_state=seed)


@register_panel_classifier
class _RandomForest(PanelClassifier):
    name = "random_forest"

    def build(self, seed: int) -> BaseEstimator:
        return RandomForestClassifier(n_estimators=100, n_jobs=1, random_state=seed)


@register_panel_classifier
class _GradientBoosting(PanelClassifier):
    name = "gradient_boosting"

    def build(self, seed: int) -> BaseEstimator:
        return GradientBoostingClassifier(n_estimators=100, max_depth=3, random_state=seed)


@register_panel_classifier
class _Mlp(PanelClassifier):
    name = "mlp"
    needs_scaling = True

    def build(self, seed: int) -> BaseEstimator:
        return MLPClassifier(hidden_layer_sizes=(64,), max_iter=200, early_stopping=True, n_iter_no_change=10,
                             random_state=seed)


@register_panel_classifier
class _Knn(PanelClassifier):
    name = "knn"
    needs_scaling = True

    def build(self, seed: int) -> BaseEstimator:
        return KNeighborsClassifier(n_neighbors=5)


@register_panel_classifier
class _GaussianNb(PanelClassifier):
    name = "gaussian_nb"

    def build(self, seed: int) -> BaseEstimator:
        return GaussianNB()


@register_panel_classifier
class _Svm(PanelClassifier):
    name = "svm"
    needs_scaling = True

    def build(self, seed: int) -> BaseEstimator:
        return SVC(kernel="rbf", random_state=seed)


@register_panel_classifier
class _Adaboost(PanelClassifier):
    name = "adaboost"

    def build(self, seed: int) -> BaseEstimator:
        return AdaBoostClassifier(n_estimators=50, random_state=seed)


def build_panel_classifier(name: str, seed: int = 0) -> BaseEstimator:
    """The unfitted classifier ``name`` of the panel, behind a StandardScaler where it needs one."""
    classifier = PANEL.create(name)
    model = classifier.build(seed)
    return make_pipeline(StandardScaler(), model) if classifier.needs_scaling else model


def _is_number(series: pd.Series) -> bool:
    return is_numeric_dtype(series) or is_bool_dtype(series)


def _sorted(values) -> list:
    values = list(values)
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=str)


def design_matrix(train: pd.DataFrame, test: pd.DataFrame, features: Sequence[str], kinds: Mapping[str, str],
                  categories: Mapping[str, Sequence] | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Float design matrices of training and test rows (encoding rules in the module docstring) and the
    names of their columns; missing values stay NaN."""
    categories = categories or {}
    blocks_train, blocks_test, names = [], [], []
    for column in features:
        kind, r, s = kinds[column], train[column], test[column]
        listed = categories.get(column)
        if kind in ("numeric", "integer") or (kind in ("binary", "ordinal") and _is_number(r) and _is_number(s)):
            blocks_train.append(pd.to_numeric(r, errors="coerce").to_numpy(float, na_value=np.nan)[:, None])
            blocks_test.append(pd.to_numeric(s, errors="coerce").to_numpy(float, na_value=np.nan)[:, None])
            names.append(column)
        elif kind == "ordinal" and listed is not None:
            code = {v: float(i) for i, v in enumerate(listed)}
            blocks_train.append(r.map(code).to_numpy(float, na_value=np.nan)[:, None])
            blocks_test.append(s.map(code).to_numpy(float, na_value=np.nan)[:, None])
            names.append(column)
        else:
            levels = list(listed) if listed is not None else _sorted(r.dropna().unique())
            for frame, blocks in ((r, blocks_train), (s, blocks_test)):
                missing = frame.isna().to_numpy(bool)
                onehot = np.column_stack([(frame == level).to_numpy(bool) for level in levels]).astype(float) \
                    if levels else np.zeros((len(frame), 0))
                onehot[missing] = np.nan
                blocks.append(onehot)
            names.extend(f"{column}={level}" for level in levels)
    empty = lambda n: np.zeros((n, 0))  # noqa: E731
    return (np.hstack(blocks_train) if blocks_train else empty(len(train)),
            np.hstack(blocks_test) if blocks_test else empty(len(test)), names)


def _scores(model, x: np.ndarray) -> np.ndarray:
    """(rows, classes of the model) ranking scores: probabilities, else decision values."""
    if hasattr(model, "predict_proba"):
        return model.predict_proba(x)
    decision = model.decision_function(x)
    return np.column_stack([-decision, decision]) if decision.ndim == 1 else decision


def _ranking_metrics(y: np.ndarray, scores: np.ndarray, model_classes, classes: list, binary: bool) -> tuple:
    """AUROC and AP (macro one-vs-rest beyond two classes); NaN when no class has both test labels."""
    column = {c: i for i, c in enumerate(model_classes)}
    aucs, aps = [], []
    for c in (classes[-1:] if binary else classes):
        truth = y == c
        if truth.all() or not truth.any():
            continue
        score = scores[:, column[c]] if c in column else np.zeros(len(y))
        aucs.append(roc_auc_score(truth, score))
        aps.append(average_precision_score(truth, score))
    return (float(np.mean(aucs)) if aucs else np.nan, float(np.mean(aps)) if aps else np.nan)


def tstr(train: pd.DataFrame, test: pd.DataFrame, target: str, kinds: Mapping[str, str],
         classifiers: Sequence[str] | None = None, categories: Mapping[str, Sequence] | None = None,
         seed: int = 0) -> pd.DataFrame:
    """Fit every classifier of the panel (or those named) on ``train`` and score it on ``test``.

    One row per classifier, indexed by its name: macro_f1, auroc, average_precision (NaN when not
    fitted), fitted, reason (why not fitted, else None), n_classes, n_train, n_test,
    train_rows_dropped (missing values), train_rows_invalid_target, test_rows_dropped, seconds (fit and
    scoring).
    """
    kinds = dict(kinds)
    if kinds.get(target) not in ("binary", "categorical", "ordinal", "integer"):
        raise ValueError(f"target {target!r} has kind {kinds.get(target)!r}; a classification target is "
                         "binary, categorical, ordinal or integer")
    names = list(PANEL if classifiers is None else classifiers)
    unknown = [n for n in names if n not in PANEL]
    if unknown:
        raise ValueError(f"unknown classifier(s) {unknown}; choose from {sorted(PANEL)}")
    categories = dict(categories or {})
    features = [c for c in test.columns if c != target]
    missing = [c for c in features + [target] if c not in train.columns or c not in kinds]
    if missing:
        raise ValueError(f"column(s) {missing} lack from the training rows or from kinds")

    listed = categories.get(target)
    classes = list(listed) if listed is not None else _sorted(test[target].dropna().unique())
    binary = len(classes) == 2
    x_train, x_test, _ = design_matrix(train, test, features, kinds, categories)
    y_train, y_test = train[target].to_numpy(object), test[target].to_numpy(object)
    target_missing = train[target].isna().to_numpy(bool)
    valid_target = train[target].isin(classes).to_numpy(bool) | target_missing
    keep_train = np.isfinite(x_train).all(axis=1) & ~target_missing
    keep_test = np.isfinite(x_test).all(axis=1) & test[target].isin(classes).to_numpy(bool)
    counts = {"n_classes": len(classes),
              "train_rows_dropped": int((~keep_train & valid_target).sum()),
              "train_rows_invalid_target": int((~valid_target).sum()),
              "test_rows_dropped": int((~keep_test).sum())}
    keep_train &= valid_target
    x_train, y_train, x_test, y_test = x_train[keep_train], y_train[keep_train], x_test[keep_test], y_test[keep_test]
    counts |= {"n_train": int(len(y_train)), "n_test": int(len(y_test))}
    # Class labels as one comparable type (codes into ``classes``), whatever dtype each table stored.
    code = {c: i for i, c in enumerate(classes)}
    y_train = np.array([code[v] for v in y_train], dtype=int)
    y_test_codes = np.array([code[v] for v in y_test], dtype=int)
    class_codes = list(range(len(classes)))

    reason = None
    if not len(y_test):
        reason = "no complete test rows"
    elif len(np.unique(y_train)) < 2:
        reason = (f"training target has {len(np.unique(y_train))} class(es) "
                  f"({', '.join(map(str, [classes[i] for i in np.unique(y_train)])) or 'no valid rows'})")
    rows = []
    for name in names:
        row = {"classifier": name, **dict.fromkeys(METRICS, np.nan), "fitted": False, "reason": reason}
        started = time.perf_counter()
        if reason is None:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # convergence notes of small or degenerate synthetic tables
                    model = build_panel_classifier(name, seed).fit(x_train, y_train)
                    predicted = model.predict(x_test)
                    auroc, ap = _ranking_metrics(y_test_codes, _scores(model, x_test), list(model.classes_),
                                                 class_codes, binary)
                row |= {"macro_f1": float(f1_score(y_test_codes, predicted, average="macro", zero_division=0)),
                        "auroc": auroc, "average_precision": ap, "fitted": True}
            except Exception as error:  # noqa: BLE001 - one failing classifier must not end the panel
                row["reason"] = f"{type(error).__name__}: {error}"[:300]
        rows.append(row | counts | {"seconds": round(time.perf_counter() - started, 4)})
    return pd.DataFrame(rows).set_index("classifier")


def tstr_summary(rows: pd.DataFrame) -> dict:
    """Means of macro-F1, AUROC and AP over the fitted classifiers (a NaN metric, e.g. AUROC on a one-class
    test target, is left out of its mean), the number fitted and the number in the panel.

    >>> rows = pd.DataFrame({"macro_f1": [0.6, 0.8, np.nan], "auroc": [0.7, 0.9, np.nan],
    ...                      "average_precision": [0.5, 0.7, np.nan], "fitted": [True, True, False]})
    >>> tstr_summary(rows)["macro_f1"], tstr_summary(rows)["n_fitted"]
    (0.7, 2)
    """
    fitted = rows[rows["fitted"].astype(bool)]
    out = {}
    for metric in METRICS:
        values = fitted[metric].dropna()
        out[metric] = round(float(values.mean()), 12) if len(values) else None
    return out | {"n_fitted": int(len(fitted)), "n_classifiers": int(len(rows))}
