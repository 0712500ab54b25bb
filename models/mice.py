"""MICE: multiple imputation by chained equations (van Buuren & Groothuis-Oudshoorn 2011; seed 002).

Each of the m imputations runs scikit-learn's ``IterativeImputer(sample_posterior=True)`` with its
own seed: every variable with missing values is regressed (Bayesian ridge) on all others in turn, and
its missing entries are *drawn* from the posterior predictive, for ``max_iter`` rounds (a Gibbs-like
chain). The training rows get the chain's last draws; the imputer is fitted on training rows only and
its fitted equations are replayed on the other rows (``transform``), so no
statistic of held-out rows enters the imputation model. Draws are truncated to each variable's
[low, high] bounds.

Convergence: with posterior sampling scikit-learn has no stopping rule, so ``trace`` re-runs the
chains for 1..max_iter rounds (same seeds, hence the same draws) and records the mean of the imputed
entries per round, as R mice's trace plots do; ``rhat`` is the Gelman-Rubin statistic of those means
over the second half of the rounds across the m chains.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sklearn.experimental import enable_iterative_imputer  # noqa: F401  (registers the estimator)
from sklearn.impute import IterativeImputer

__all__ = ["MICEResult", "multiple_imputation", "gelman_rubin"]


@dataclass
class MICEResult:
    """``train`` / ``other``: m completed copies of the training rows and of the other rows."""

    train: list[pd.DataFrame]
    other: list[pd.DataFrame]
    iterations: int
    seeds: list[int]
    trace: dict[str, list[list[float]]] = field(default_factory=dict)  # variable -> chain -> mean per round
    rhat: dict[str, float] = field(default_factory=dict)


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


def multiple_imputation(train: pd.DataFrame, other: pd.DataFrame | None = None, *, m: int = 5,
                        max_iter: int = 10, seed: int = 0, bounds: dict | None = None,
                        trace: bool = False) -> MICEResult:
    """m completed copies of ``train`` (and of ``other``), imputed by a model fitted on ``train`` only.

    ``bounds`` maps a column to (low, high), None for open; every column of ``train`` must hold at
    least one observed value (drop empty columns first: they cannot be imputed).
    """
    if m < 1:
        raise ValueError("m must be at least 1")
    empty = [c for c in train.columns if train[c].isna().all()]
    if empty:
        raise ValueError(f"columns {empty} have no observed training value and cannot be imputed; drop them")
    bounds = bounds or {}
    low = np.array([bounds.get(c, (None, None))[0] for c in train.columns], dtype=float)
    high = np.array([bounds.get(c, (None, None))[1] for c in train.columns], dtype=float)
    low, high = np.nan_to_num(low, nan=-np.inf), np.nan_to_num(high, nan=np.inf)
    other = other if other is not None else train.iloc[:0]
    seeds = [seed * 1000 + i for i in range(m)]
    completed_train, completed_other = [], []
    for s in seeds:
        imputer = _imputer(max_iter, s, low, high)
        completed_train.append(pd.DataFrame(imputer.fit_transform(train.to_numpy(dtype=float)),  # the chain's draws
                                            index=train.index, columns=train.columns))
        completed_other.append(pd.DataFrame(imputer.transform(other.to_numpy(dtype=float)) if len(other)
                                            else np.empty((0, train.shape[1])),
                                            index=other.index, columns=train.columns))
    result = MICEResult(completed_train, completed_other, max_iter, seeds)
    if trace:
        _trace(result, train, low, high)
    return result


def _trace(result: MICEResult, train: pd.DataFrame, low, high) -> None:
    x = train.to_numpy(dtype=float)
    missing = np.isnan(x)
    columns = [j for j in range(x.shape[1]) if missing[:, j].any()]
    means = np.full((len(result.seeds), result.iterations, len(columns)), np.nan)
    for i, s in enumerate(result.seeds):
        for k in range(1, result.iterations + 1):
            filled = _imputer(k, s, low, high).fit_transform(x)
            means[i, k - 1] = [filled[missing[:, j], j].mean() for j in columns]
    half = result.iterations // 2
    for n, j in enumerate(columns):
        name = str(train.columns[j])
        result.trace[name] = means[:, :, n].tolist()
        result.rhat[name] = gelman_rubin(means[:, half:, n])
