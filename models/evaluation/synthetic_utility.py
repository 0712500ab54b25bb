"""Utility of synthetic data: train on synthetic, test on real (Su et al. 2023, Tables 2-3;
Waites & Cummings 2021, Fig. 2).

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.
    Waites, Cummings (2021). Differentially Private Normalizing Flows for Privacy-Preserving Density Estimation.
    AIES. arXiv:2103.14068.

* Classification (Su et al. 2023): an SVM (RBF; probabilities by Platt scaling, cross-validated) predicts the
  hypertension label; the cutoff on its probability maximises the Fowlkes-Mallows index
  FM = sqrt(TP / (TP + FP) * TP / (TP + FN)). privehr picks the cutoff on the *training* (synthetic)
  rows, so nothing about the real test rows tunes the classifier; accuracy is measured on real test rows.
* Regression (Su et al. 2023): a random forest predicts mean pulmonary arterial pressure; test MSE.
* Regression (Waites & Cummings 2021): k-nearest neighbours (k = 3) predicts the last column from the others; test MSE.

Each is also fitted on the real training rows: the train-on-real baseline ("Original" in Su et al. 2023).
"""

from __future__ import annotations

import numpy as np
from sklearn.calibration import CalibratedClassifierCV
from sklearn.ensemble import RandomForestRegressor
from sklearn.metrics import mean_squared_error
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

__all__ = ["fowlkes_mallows_cutoff", "svm_accuracy", "random_forest_mse", "knn_mse"]


def fowlkes_mallows_cutoff(y: np.ndarray, p: np.ndarray) -> float:
    """The probability cutoff (predict 1 where p >= cutoff) with the largest Fowlkes-Mallows index."""
    y = np.asarray(y).astype(bool)
    best, best_fm = 0.5, -1.0
    for cutoff in np.unique(p):
        predicted = p >= cutoff
        tp = np.sum(predicted & y)
        if tp == 0:
            continue
        fm = np.sqrt(tp / predicted.sum() * tp / y.sum())
        if fm > best_fm:
            best, best_fm = float(cutoff), fm
    return best


def svm_accuracy(x_train, y_train, x_test, y_test, seed: int = 0) -> dict:
    """Test accuracy of an SVM fitted on (x_train, y_train) with the FM-optimal cutoff from the training rows.

    A training set with one class only (possible for small synthetic releases) predicts that class.
    """
    y_train = np.asarray(y_train).astype(int)
    if len(np.unique(y_train)) < 2:
        predicted = np.full(len(y_test), y_train[0])
        return {"accuracy": float(np.mean(predicted == np.asarray(y_test))), "cutoff": None, "single_class": True}
    folds = int(min(5, np.bincount(y_train).min()))
    if folds < 2:  # too few of one class to calibrate by cross-validation: SVM decision values, cutoff at 0
        model = make_pipeline(StandardScaler(), SVC()).fit(x_train, y_train)
        predicted = model.decision_function(x_test) >= 0
        return {"accuracy": float(np.mean(predicted == np.asarray(y_test).astype(bool))), "cutoff": None,
                "single_class": False}
    model = make_pipeline(StandardScaler(), CalibratedClassifierCV(SVC(random_state=seed), cv=folds, ensemble=False))
    model.fit(x_train, y_train)
    cutoff = fowlkes_mallows_cutoff(y_train, model.predict_proba(x_train)[:, 1])
    predicted = model.predict_proba(x_test)[:, 1] >= cutoff
    return {"accuracy": float(np.mean(predicted == np.asarray(y_test).astype(bool))), "cutoff": cutoff,
            "single_class": False}


def random_forest_mse(x_train, y_train, x_test, y_test, seed: int = 0) -> float:
    model = RandomForestRegressor(n_estimators=100, random_state=seed, n_jobs=1).fit(x_train, y_train)
    return float(mean_squared_error(y_test, model.predict(x_test)))


def knn_mse(x_train, y_train, x_test, y_test, k: int = 3) -> float:
    model = KNeighborsRegressor(n_neighbors=k).fit(x_train, y_train)
    return float(mean_squared_error(y_test, model.predict(x_test)))
