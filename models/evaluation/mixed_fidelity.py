"""Fidelity of a mixed-type synthetic table to the real one, as Lee et al. 2022 report it.

References:
    Lee, Kim, Jeong, Ro (2022). Differentially Private Normalizing Flows for Synthetic Tabular Data Generation. AAAI.

See their sections "Marginal Distribution Comparison" (Fig. 3) and "Dependency Structure
Comparison" (Table 1). :mod:`privehr.models.evaluation.fidelity` holds the all-numeric metrics; this module adds what a
table of numeric, integer, binary, categorical and ordinal columns needs, and reuses
:func:`privehr.models.evaluation.fidelity.column_distances` for the KS statistic and the standardised 1-Wasserstein distance.

Every column has a *kind* (``KINDS``); a column is compared either as *discrete* or as *continuous*:

* binary, categorical, ordinal: discrete.
* numeric: continuous.
* integer: continuous always (KS and W1, integers are ordered numbers), and *also* discrete (TV) when the
  real column takes at most ``integer_levels`` (default 20) distinct values, e.g. a 3-15 coma score;
  an integer age with 60 distinct values is continuous only. The rule reads the real column alone.

Per column (missing values, NaN, are left out of both tables' distributions and counted as invalid):

* Total variation distance of the category frequencies (discrete columns):
  TV = 1/2 sum_c |p_real(c) - p_syn(c)| over the union of the values either table takes, in [0, 1].
  Values are compared as given, not rounded: a synthetic 0.37 in a binary column is a category of its
  own with real frequency 0, so it adds its whole mass to TV. ``categories[column]`` adds categories of
  frequency 0 in both tables, which changes nothing.
* Kolmogorov-Smirnov statistic sup_x |F_real(x) - F_syn(x)| and 1-Wasserstein distance
  W1 = int |F_real(x) - F_syn(x)| dx / sd_real (population SD of the real column; 1 when it is 0),
  for numeric and integer columns, on their finite values.
* Invalid share: the share of synthetic values (rows) that the column's kind cannot hold: NaN
  (every kind); +-inf or non-numbers (numeric, integer); non-integer numbers (integer, binary,
  categorical, ordinal stored as numbers); values outside ``categories[column]`` when a list is passed
  (any kind but numeric); for a numeric binary column without a list, values other than 0 and 1.
  Without a list, a categorical code never seen in the real table is not flagged (it may be a rare
  category). Columns of strings skip the integrality test.

Dependence: the Kendall tau-b matrices of the two tables (pandas, pairwise-complete rows), over all
column pairs i < j; RMSE = sqrt(mean (tau_real - tau_syn)^2) and MAE = mean |tau_real - tau_syn|, the two
rows of Table 1 of Lee et al. 2022. A pair with a column that is constant (or has fewer than two shared rows)
in one table has no defined tau there; it counts as tau = 0 (no measurable association), as
:func:`privehr.models.evaluation.fidelity.kendall_tau_rmse` does, so a constant column never produces NaN. Columns of
strings enter by their category codes (order of ``categories[column]``, then any other values sorted
as text); for a nominal column with more than two categories that tau depends on the code order, but
the same codes serve both tables, so the distance still compares like with like.

>>> real = pd.DataFrame({"sex": [0, 0, 1, 1], "age": [30.0, 40.0, 50.0, 60.0]})
>>> syn = pd.DataFrame({"sex": [0, 0.37, 1, 1], "age": [30.0, 40.0, 50.0, 60.0]})
>>> rows = mixed_column_distances(real, syn, {"sex": "binary", "age": "numeric"})
>>> float(rows.loc["sex", "tv"]), float(rows.loc["sex", "invalid_share"]), float(rows.loc["age", "ks"])
(0.25, 0.25, 0.0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from pandas.api.types import is_bool_dtype, is_numeric_dtype

from privehr.models.evaluation.fidelity import column_distances

__all__ = ["KINDS", "DISCRETE_KINDS", "INTEGER_LEVELS", "is_discrete", "invalid_mask", "total_variation",
           "mixed_column_distances", "kendall_tau_matrix", "kendall_tau_distance", "mixed_fidelity_summary"]

KINDS = ("numeric", "integer", "binary", "categorical", "ordinal")
DISCRETE_KINDS = frozenset({"binary", "categorical", "ordinal"})
INTEGER_LEVELS = 20


def _check_kinds(columns, kinds: Mapping[str, str]) -> None:
    missing = [c for c in columns if c not in kinds]
    if missing:
        raise ValueError(f"no kind given for column(s) {missing}")
    unknown = {c: kinds[c] for c in columns if kinds[c] not in KINDS}
    if unknown:
        raise ValueError(f"unknown kind(s) {unknown}; choose from {KINDS}")


def is_discrete(kind: str, real_column: pd.Series, integer_levels: int = INTEGER_LEVELS) -> bool:
    """Whether a column is compared by category frequencies: binary, categorical and ordinal columns, and
    integer columns whose real values take at most ``integer_levels`` distinct values."""
    if kind in DISCRETE_KINDS:
        return True
    return kind == "integer" and pd.Series(real_column).dropna().nunique() <= integer_levels


def _as_float(values: pd.Series) -> np.ndarray:
    """Numbers as floats; anything that is not a number becomes NaN."""
    return pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(float, na_value=np.nan)


def invalid_mask(values: pd.Series, kind: str, categories: Sequence | None = None) -> np.ndarray:
    """True for every value the column's ``kind`` cannot hold (the rules are in the module docstring).

    >>> invalid_mask(pd.Series([0, 1, 0.37, np.nan, 2]), "binary").tolist()
    [False, False, True, True, True]
    >>> invalid_mask(pd.Series(["a", "b", "z"]), "categorical", ["a", "b"]).tolist()
    [False, False, True]
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose from {KINDS}")
    series = pd.Series(values).reset_index(drop=True)
    bad = series.isna().to_numpy(bool)
    present = ~bad
    numeric = is_numeric_dtype(series) or is_bool_dtype(series)
    if kind in ("numeric", "integer"):
        x = _as_float(series)
        bad = bad | (present & ~np.isfinite(x))
        if kind == "integer":
            bad = bad | (present & np.isfinite(x) & (x != np.round(x)))
    elif numeric:
        x = _as_float(series)
        bad = bad | (present & (~np.isfinite(x) | (x != np.round(x))))
        if categories is None and kind == "binary":
            categories = [0, 1]
    if categories is not None and kind != "numeric":
        bad = bad | (present & ~series.isin(list(categories)).to_numpy(bool))
    return bad


def total_variation(real: pd.Series, synthetic: pd.Series, categories: Sequence | None = None) -> float:
    """1/2 sum_c |p_real(c) - p_syn(c)| over the values either non-missing column takes (NaN if one is empty).

    >>> total_variation(pd.Series([0, 0, 1, 1]), pd.Series([0, 1, 1, 1]))
    0.25
    """
    p_real = pd.Series(real).dropna().value_counts(normalize=True)
    p_syn = pd.Series(synthetic).dropna().value_counts(normalize=True)
    if p_real.empty or p_syn.empty:
        return float("nan")
    levels = list(dict.fromkeys([*(categories or []), *p_real.index, *p_syn.index]))
    p_real, p_syn = (p.reindex(levels, fill_value=0.0).to_numpy(float) for p in (p_real, p_syn))
    return float(0.5 * np.abs(p_real - p_syn).sum())


def mixed_column_distances(real: pd.DataFrame, synthetic: pd.DataFrame, kinds: Mapping[str, str],
                           categories: Mapping[str, Sequence] | None = None,
                           integer_levels: int = INTEGER_LEVELS) -> pd.DataFrame:
    """One row per column of ``real``: kind, treated_as, tv, ks, wasserstein_sd, invalid_share, n_invalid,
    real_levels (distinct real values); NaN where a distance does not apply to the column."""
    _check_kinds(real.columns, kinds)
    missing = [c for c in real.columns if c not in synthetic.columns]
    if missing:
        raise ValueError(f"synthetic table lacks column(s) {missing}")
    categories = categories or {}
    rows = []
    for column in real.columns:
        kind, r, s = kinds[column], real[column], synthetic[column]
        discrete = is_discrete(kind, r, integer_levels)
        row = {"column": column, "kind": kind,
               "treated_as": "discrete+continuous" if discrete and kind == "integer"
               else "discrete" if discrete else "continuous",
               "tv": np.nan, "ks": np.nan, "wasserstein_sd": np.nan}
        if discrete:
            row["tv"] = total_variation(r, s, categories.get(column))
        if kind in ("numeric", "integer"):
            x_real, x_syn = _as_float(r), _as_float(s)
            x_real, x_syn = x_real[np.isfinite(x_real)], x_syn[np.isfinite(x_syn)]
            if len(x_real) and len(x_syn):
                both = column_distances(pd.DataFrame({column: x_real}), pd.DataFrame({column: x_syn}))
                row["ks"], row["wasserstein_sd"] = both.loc[column, "ks"], both.loc[column, "wasserstein_sd"]
        bad = invalid_mask(s, kind, categories.get(column))
        row |= {"invalid_share": float(bad.mean()) if len(bad) else np.nan, "n_invalid": int(bad.sum()),
                "real_levels": int(r.dropna().nunique())}
        rows.append(row)
    return pd.DataFrame(rows).set_index("column")


def _codes(real: pd.Series, synthetic: pd.Series, order: Sequence | None) -> tuple[np.ndarray, np.ndarray]:
    """Shared category codes (float, NaN for missing) of a non-numeric column in both tables."""
    seen = pd.concat([real, synthetic]).dropna().unique()
    listed = list(order or [])
    levels = listed + sorted((v for v in seen if v not in listed), key=str)
    code = {v: i for i, v in enumerate(levels)}
    return tuple(pd.Series(c).map(code).to_numpy(float, na_value=np.nan) for c in (real, synthetic))


def _encoded(real: pd.DataFrame, synthetic: pd.DataFrame, columns, categories) -> tuple[pd.DataFrame, pd.DataFrame]:
    out_real, out_syn = {}, {}
    for column in columns:
        r, s = real[column].reset_index(drop=True), synthetic[column].reset_index(drop=True)
        if (is_numeric_dtype(r) or is_bool_dtype(r)) and (is_numeric_dtype(s) or is_bool_dtype(s)):
            out_real[column], out_syn[column] = _as_float(r), _as_float(s)
        else:
            out_real[column], out_syn[column] = _codes(r, s, categories.get(column))
    return pd.DataFrame(out_real), pd.DataFrame(out_syn)


def kendall_tau_matrix(frame: pd.DataFrame) -> pd.DataFrame:
    """Kendall tau-b of every column pair (pairwise-complete rows); undefined pairs (a constant column,
    fewer than two shared rows) are 0 off the diagonal, and the diagonal is 1."""
    numbers = frame.apply(lambda c: pd.Series(_as_float(c), index=frame.index)).replace([np.inf, -np.inf], np.nan)
    tau = numbers.corr(method="kendall", min_periods=2).fillna(0.0).to_numpy(copy=True)
    np.fill_diagonal(tau, 1.0)
    return pd.DataFrame(tau, index=frame.columns, columns=frame.columns)


def kendall_tau_distance(real: pd.DataFrame, synthetic: pd.DataFrame, columns: Sequence[str] | None = None,
                         categories: Mapping[str, Sequence] | None = None) -> dict:
    """RMSE and MAE between the upper triangles (i < j) of the two Kendall tau-b matrices (Lee et al. 2022, Table 1).

    >>> t = pd.DataFrame({"a": [1, 2, 3, 4], "b": [1, 2, 4, 3], "c": [5, 5, 5, 5]})
    >>> kendall_tau_distance(t, t)
    {'tau_rmse': 0.0, 'tau_mae': 0.0, 'tau_pairs': 3}
    """
    columns = list(real.columns if columns is None else columns)
    upper = np.triu_indices(len(columns), k=1)
    if not len(upper[0]):
        return {"tau_rmse": float("nan"), "tau_mae": float("nan"), "tau_pairs": 0}
    encoded = _encoded(real, synthetic, columns, categories or {})
    diff = kendall_tau_matrix(encoded[0]).to_numpy()[upper] - kendall_tau_matrix(encoded[1]).to_numpy()[upper]
    return {"tau_rmse": float(np.sqrt(np.mean(diff ** 2))), "tau_mae": float(np.mean(np.abs(diff))),
            "tau_pairs": int(len(diff))}


def _mean(values: pd.Series) -> float | None:
    values = values.dropna()
    return float(values.mean()) if len(values) else None


def mixed_fidelity_summary(real: pd.DataFrame, synthetic: pd.DataFrame, kinds: Mapping[str, str],
                           categories: Mapping[str, Sequence] | None = None,
                           integer_levels: int = INTEGER_LEVELS) -> dict:
    """Mean TV (discrete columns), mean KS and W1 (numeric and integer columns), tau RMSE and MAE (all
    columns), the invalid share of all synthetic cells (the mean of the per-column shares: every column has
    the same rows), and the per-column rows keyed by column (None where a number does not apply).
    A mean over no columns is None."""
    rows = mixed_column_distances(real, synthetic, kinds, categories, integer_levels)
    tau = kendall_tau_distance(real, synthetic, list(real.columns), categories)
    per_column = {column: {k: (None if isinstance(v, float) and np.isnan(v) else
                               round(float(v), 6) if isinstance(v, (float, np.floating)) else v)
                           for k, v in row.items()}
                  for column, row in rows.to_dict(orient="index").items()}
    return {"tv_mean": _mean(rows["tv"]), "tv_max": None if rows["tv"].isna().all() else float(rows["tv"].max()),
            "ks_mean": _mean(rows["ks"]), "wasserstein_sd_mean": _mean(rows["wasserstein_sd"]),
            **tau, "invalid_share": _mean(rows["invalid_share"]),
            "columns_with_invalid": int((rows["n_invalid"] > 0).sum()),
            "discrete_columns": int(rows["tv"].notna().sum()), "continuous_columns": int(rows["ks"].notna().sum()),
            "per_column": per_column}
