"""Fidelity of a synthetic table to the real one (Lee et al. 2022, Table 1; Waites & Cummings 2021, Fig. 3).

References:
    Lee, Kim, Jeong, Ro (2022). Differentially Private Normalizing Flows for Synthetic Tabular Data Generation. AAAI.
    Waites, Cummings (2021). Differentially Private Normalizing Flows for Privacy-Preserving Density Estimation.
    AIES. arXiv:2103.14068.

Per column: the Kolmogorov-Smirnov statistic sup_x |F_real(x) - F_syn(x)| and the 1-Wasserstein
distance, the latter in units of the real column's standard deviation so columns are comparable.
Dependence: RMSE over the pairs i < j of the Kendall tau matrices, sqrt(mean (tau_real - tau_syn)^2).
Detection: a logistic regression on standardised columns telling real from synthetic rows, its
AUROC from 3-fold stratified cross-validated scores (0.5 = indistinguishable); the same classifier as
SDMetrics' LogisticDetection, which privehr does not depend on because it pins pandas < 3 (and pandas 2
cannot read HDF5 files that pandas 3 wrote).
Distance to closest record (DCR): for every synthetic row, the Euclidean distance (standardised
by the training columns) to the nearest training row and to the nearest holdout row, with equally
many training and holdout rows; a share of synthetic rows closer to training than to holdout far
above 0.5 means the generator copies its training records.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy.stats import ks_2samp, wasserstein_distance
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.neighbors import NearestNeighbors
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

__all__ = ["column_distances", "kendall_tau_rmse", "detection_auroc", "distance_to_closest_record",
           "fidelity_summary"]


def column_distances(real: pd.DataFrame, synthetic: pd.DataFrame) -> pd.DataFrame:
    """KS statistic and standardised Wasserstein distance per column."""
    rows = []
    for column in real.columns:
        r, s = real[column].to_numpy(float), synthetic[column].to_numpy(float)
        scale = r.std() or 1.0
        rows.append({"column": column, "ks": float(ks_2samp(r, s).statistic),
                     "wasserstein_sd": float(wasserstein_distance(r / scale, s / scale))})
    return pd.DataFrame(rows).set_index("column")


def kendall_tau_rmse(real: pd.DataFrame, synthetic: pd.DataFrame) -> float:
    """RMSE between the upper triangles of the two Kendall tau matrices (constant columns count as 0)."""
    upper = np.triu_indices(real.shape[1], k=1)
    taus = [frame.corr(method="kendall").fillna(0.0).to_numpy()[upper] for frame in (real, synthetic)]
    return float(np.sqrt(np.mean((taus[0] - taus[1]) ** 2)))


def detection_auroc(real: pd.DataFrame, synthetic: pd.DataFrame, seed: int = 0) -> float:
    """Cross-validated AUROC of a logistic regression separating real (0) from synthetic (1) rows."""
    x = np.r_[real.to_numpy(float), synthetic.to_numpy(float)]
    y = np.r_[np.zeros(len(real)), np.ones(len(synthetic))]
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence notes on near-separable folds
        scores = cross_val_predict(model, x, y, cv=StratifiedKFold(3, shuffle=True, random_state=seed),
                                   method="predict_proba")[:, 1]
    return float(roc_auc_score(y, scores))


def distance_to_closest_record(train: pd.DataFrame, holdout: pd.DataFrame, synthetic: pd.DataFrame,
                               seed: int = 0) -> dict:
    """Median DCR to training and to holdout rows, and the share of synthetic rows closer to training."""
    mean, std = train.mean(), train.std(ddof=0).replace(0, 1.0)
    k = min(len(train), len(holdout))
    rng = np.random.default_rng(seed)
    train_rows = train.iloc[rng.choice(len(train), k, replace=False)]
    holdout_rows = holdout.iloc[rng.choice(len(holdout), k, replace=False)]
    z = lambda frame: ((frame - mean) / std).to_numpy(float)  # noqa: E731
    d_train = NearestNeighbors(n_neighbors=1).fit(z(train_rows)).kneighbors(z(synthetic))[0][:, 0]
    d_holdout = NearestNeighbors(n_neighbors=1).fit(z(holdout_rows)).kneighbors(z(synthetic))[0][:, 0]
    return {"dcr_train_median": float(np.median(d_train)), "dcr_holdout_median": float(np.median(d_holdout)),
            "share_closer_to_train": float(np.mean(d_train < d_holdout)), "rows_compared": int(k)}


def fidelity_summary(train: pd.DataFrame, holdout: pd.DataFrame, synthetic: pd.DataFrame, seed: int = 0) -> dict:
    """All fidelity numbers of one synthetic table against its real training rows (and holdout for DCR)."""
    columns = column_distances(train, synthetic)
    return {"ks_mean": float(columns["ks"].mean()), "ks_max": float(columns["ks"].max()),
            "wasserstein_sd_mean": float(columns["wasserstein_sd"].mean()),
            "kendall_tau_rmse": kendall_tau_rmse(train, synthetic),
            "detection_auroc": detection_auroc(train, synthetic),
            **distance_to_closest_record(train, holdout, synthetic, seed),
            "per_column": columns.round(6).to_dict(orient="index")}
