"""MICE: multiple imputation by chained equations (van Buuren & Groothuis-Oudshoorn 2011), as Su et al. 2023 impute.

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.

:class:`MICEImputer` holds m of scikit-learn's ``IterativeImputer(sample_posterior=True)``, each with its own
seed: every variable with missing values is regressed (Bayesian ridge) on all others in turn, and its
missing entries are *drawn* from the posterior predictive, for ``max_iter`` rounds (a Gibbs-like chain).
``fit`` sees the training rows only and keeps the fitted imputers (``imputers_``); ``fit_transform``
returns the chains' last draws of the training rows; ``transform`` replays the fitted equations on any
rows (held-out or training) without refitting, so no statistic of held-out rows enters the imputation
model. Draws are truncated to each variable's [low, high] bounds.

Convergence: with posterior sampling scikit-learn has no stopping rule, so ``trace`` re-runs the
chains for 1..max_iter rounds (same seeds, hence the same draws) and records the mean of the imputed
entries per round, as R mice's trace plots do; ``rhat`` is the Gelman-Rubin statistic of those means
over the second half of the rounds across the m chains.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.experimental import enable_iterative_imputer
from sklearn.impute import IterativeImputer
from sklearn.utils.validation import check_is_fitted

del enable_iterative_imputer  # imported for its side effect: it registers IterativeImputer

__all__ = ["MICEImputer", "gelman_rubin"]


def _imputer(max_iter: int, seed: int, low, high) -> IterativeImputer:
    return IterativeImputer(sample_posterior=True, max_iter=max_iter, random_state=seed, min_value=low,
                            max_value=high, keep_empty_features=False, skip_complete=True)


def gelman_rubin(chains: np.ndarray) -> float:
    """R-hat of (m chains x n draws); 1 means the chains mix; NaN for fewer than 2 x 2 draws."""
    m, n = chains.shape
    if m < 2 or n < 2:
        return float("nan")
    within = chains.var(axis=1, ddof=1).mean()
    between = n * chains.mean(axis=1).var(ddof=1)
    if within == 0:
        return 1.0 if between == 0 else float("inf")
    return float(np.sqrt(((n - 1) / n * within + between / n) / within))


class MICEImputer(TransformerMixin, BaseEstimator):
    """m chained-equation imputations fitted on training rows, replayed on any rows.

    Args:
        m: number of imputations (completed datasets), at least 1.
        max_iter: rounds of each chain.
        seed: imputation i uses seed ``seed * 1000 + i``.
        bounds: column -> (low, high), None for an open side; draws are truncated to them.
        trace: also record the per-round means of the imputed entries and their R-hat (costs
            ``max_iter`` extra fits per chain).
    Attributes (after ``fit``):
        imputers_: the m fitted ``IterativeImputer`` (never refitted by ``transform``).
        seeds_: their seeds.
        feature_names_in_, n_features_in_: the training columns (``transform`` selects them by name).
        trace_: variable -> chain -> mean of its imputed training entries per round ({} unless ``trace``).
        rhat_: variable -> Gelman-Rubin R-hat over the second half of the rounds ({} unless ``trace``).

    ``fit_transform(train)`` returns the chains' last draws of the training rows (what the fitted equations
    were estimated with); ``transform`` draws anew from the fitted equations, starting each call from the
    random state the chain ended in, so equal inputs give equal outputs. Every column of the training
    rows needs an observed value.

    >>> train = pd.DataFrame({"a": [1.0, 2.0, np.nan, 4.0, 5.0], "b": [2.0, 4.0, 6.0, 8.0, 10.0]})
    >>> mice = MICEImputer(m=2, max_iter=3, seed=0, bounds={"a": (0.0, 6.0)}).fit(train)
    >>> done = mice.transform(pd.DataFrame({"a": [np.nan], "b": [7.0]}))
    >>> len(mice.imputers_), [bool(0 <= d.loc[0, "a"] <= 6) for d in done]
    (2, [True, True])
    """

    def __init__(self, m: int = 5, max_iter: int = 10, seed: int = 0, bounds: dict | None = None,
                 trace: bool = False):
        self.m = m
        self.max_iter = max_iter
        self.seed = seed
        self.bounds = bounds
        self.trace = trace

    def fit(self, X: pd.DataFrame, y=None) -> "MICEImputer":
        """Fit the m imputers on the training rows ``X``."""
        self._fit(X)
        return self

    def fit_transform(self, X: pd.DataFrame, y=None) -> list[pd.DataFrame]:
        """Fit on ``X`` and return its m completed copies (each chain's last draws)."""
        return self._fit(X)

    def transform(self, X: pd.DataFrame) -> list[pd.DataFrame]:
        """m completed copies of ``X`` (any rows holding the training columns), by the fitted imputers."""
        check_is_fitted(self, "imputers_")
        absent = [c for c in self.feature_names_in_ if c not in X.columns]
        if absent:
            raise ValueError(f"columns {absent} were fitted but are missing from the frame to impute")
        part = X[list(self.feature_names_in_)]
        x = part.to_numpy(dtype=float)
        return [pd.DataFrame(_replay(imputer, x) if len(part) else np.empty((0, self.n_features_in_)),
                             index=part.index, columns=part.columns) for imputer in self.imputers_]

    def _fit(self, train: pd.DataFrame) -> list[pd.DataFrame]:
        if self.m < 1:
            raise ValueError("m must be at least 1")
        empty = [c for c in train.columns if train[c].isna().all()]
        if empty:
            raise ValueError(f"columns {empty} have no observed training value and cannot be imputed; drop them")
        bounds = self.bounds or {}
        low = np.array([bounds.get(c, (None, None))[0] for c in train.columns], dtype=float)
        high = np.array([bounds.get(c, (None, None))[1] for c in train.columns], dtype=float)
        low, high = np.nan_to_num(low, nan=-np.inf), np.nan_to_num(high, nan=np.inf)
        x = train.to_numpy(dtype=float)
        seeds = [self.seed * 1000 + i for i in range(self.m)]
        imputers, completed = [], []
        for s in seeds:
            imputer = _imputer(self.max_iter, s, low, high)
            completed.append(pd.DataFrame(imputer.fit_transform(x), index=train.index,  # the chain's draws
                                          columns=train.columns))
            imputers.append(imputer)
        self.imputers_, self.seeds_ = imputers, seeds
        self.feature_names_in_ = np.asarray(train.columns, dtype=object)
        self.n_features_in_ = train.shape[1]
        self.trace_, self.rhat_ = _trace(x, train.columns, seeds, self.max_iter, low, high) if self.trace else ({}, {})
        return completed


def _replay(imputer: IterativeImputer, x: np.ndarray) -> np.ndarray:
    """``imputer.transform(x)`` on a copy holding a copy of its random state: the fitted imputer stays as it is."""
    replay = copy.copy(imputer)  # shares the fitted equations, which transform only reads
    replay.random_state_ = copy.deepcopy(imputer.random_state_)
    return replay.transform(x)


def _trace(x: np.ndarray, columns: pd.Index, seeds: list[int], iterations: int, low, high) -> tuple[dict, dict]:
    """(variable -> chain -> mean of its imputed entries per round, variable -> R-hat of the second half)."""
    missing = np.isnan(x)
    imputed = [j for j in range(x.shape[1]) if missing[:, j].any()]
    means = np.full((len(seeds), iterations, len(imputed)), np.nan)
    for i, s in enumerate(seeds):
        for k in range(1, iterations + 1):
            filled = _imputer(k, s, low, high).fit_transform(x)
            means[i, k - 1] = [filled[missing[:, j], j].mean() for j in imputed]
    half = iterations // 2
    trace, rhat = {}, {}
    for n, j in enumerate(imputed):
        name = str(columns[j])
        trace[name] = means[:, :, n].tolist()
        rhat[name] = gelman_rubin(means[:, half:, n])
    return trace, rhat
