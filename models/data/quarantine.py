"""Row-level checks that isolate suspect records instead of dropping them silently.

Each check returns a *quarantine frame*: one row per suspect record (or value) with the record's ids,
the ``column`` concerned (empty for whole-record reasons), the ``value`` and a ``reason``. Callers
write the frames to ``artifacts/<run-id>/quarantine/`` and exclude or mask what they list.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from privehr.models.data.hourly_profile import outlier_bounds

__all__ = ["QUARANTINE_COLUMNS", "records", "mask_beyond_bounds", "beyond_bounds", "missing_ids", "duplicate_keys",
           "duplicate_content", "outside_domain", "below", "outside_range", "empty_records", "combine", "tidy", "join_reasons"]

QUARANTINE_COLUMNS = ["column", "value", "reason"]


def records(ids: pd.DataFrame, column: str, values, reason) -> pd.DataFrame:
    """A quarantine frame: the records' ids with the column concerned, each value and its reason."""
    out = ids.reset_index(drop=True).copy()
    out["column"] = column
    out["value"] = np.asarray(values, dtype=object) if len(ids) else []
    out["reason"] = reason if isinstance(reason, str) else list(reason)
    return out


def beyond_bounds(frame: pd.DataFrame, bounds: dict[str, tuple[float | None, float | None]],
                  id_columns: list[str], what: str = "bounds") -> pd.DataFrame:
    """Values of each bounded column below its low or above its high bound (NaN is not suspect)."""
    parts = []
    for column, (low, high) in bounds.items():
        if column not in frame:
            continue
        v = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
        lo = v < low if low is not None else np.zeros(v.shape, bool)
        hi = v > high if high is not None else np.zeros(v.shape, bool)
        bad = lo | hi
        if bad.any():
            reasons = np.where(lo[bad], f"below {what} low {low}", f"above {what} high {high}")
            parts.append(records(frame.loc[bad, id_columns], column, v[bad], reasons))
    return combine(parts, id_columns)


def missing_ids(frame: pd.DataFrame, id_columns: list[str]) -> pd.DataFrame:
    bad = frame[id_columns].isna().any(axis=1).to_numpy()
    return records(frame.loc[bad, id_columns], "", [None] * int(bad.sum()), "missing id")


def duplicate_keys(frame: pd.DataFrame, key_columns: list[str], id_columns: list[str]) -> pd.DataFrame:
    """Every record whose key occurs more than once (all copies: none is trusted over another)."""
    bad = frame.duplicated(key_columns, keep=False).to_numpy()
    return records(frame.loc[bad, id_columns], "", [None] * int(bad.sum()),
                  f"duplicate key ({', '.join(key_columns)})")


def duplicate_content(frame: pd.DataFrame, columns: list[str], id_columns: list[str],
                      min_values: int = 2) -> pd.DataFrame:
    """Every record identical to another in all ``columns`` (missing where the other is missing), with at least
    ``min_values`` values: one patient delivered twice would count as two DP units. All copies are listed.

    >>> f = pd.DataFrame({"id": [1, 2, 3], "a": [1.0, 1.0, 2.0], "b": [5.0, 5.0, 5.0]})
    >>> duplicate_content(f, ["a", "b"], ["id"])["id"].tolist()
    [1, 2]
    """
    filled = frame[columns].astype(object).where(frame[columns].notna(), "<missing>")
    bad = (filled.duplicated(keep=False) & (frame[columns].notna().sum(axis=1) >= min_values)).to_numpy()
    return records(frame.loc[bad, id_columns], "", [None] * int(bad.sum()),
                   "identical to another record in every attribute (one patient delivered twice?)")


def outside_domain(frame: pd.DataFrame, column: str, domain: list, id_columns: list[str]) -> pd.DataFrame:
    """Values of ``column`` that are missing or not in ``domain``."""
    v = frame[column]
    bad = (v.isna() | ~v.isin(domain)).to_numpy()
    reasons = np.where(v.isna().to_numpy()[bad], "missing label", f"label not in {domain}")
    return records(frame.loc[bad, id_columns], column, v.to_numpy()[bad], reasons)


def below(frame: pd.DataFrame, column: str, minimum: float, id_columns: list[str], reason: str) -> pd.DataFrame:
    v = pd.to_numeric(frame[column], errors="coerce")
    bad = (v < minimum).to_numpy()
    return records(frame.loc[bad, id_columns], column, v.to_numpy()[bad], reason)


def outside_range(values: pd.Series, low: float, high: float, ids: pd.DataFrame, column: str,
                  reason: str) -> pd.DataFrame:
    v = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
    bad = (v < low) | (v > high)
    return records(ids.loc[bad], column, v[bad], reason)


def empty_records(frame: pd.DataFrame, columns: list[str], id_columns: list[str]) -> pd.DataFrame:
    """Records with no value in any of ``columns``."""
    bad = frame[columns].isna().all(axis=1).to_numpy()
    return records(frame.loc[bad, id_columns], "", [None] * int(bad.sum()), "no value in any kept attribute")


def combine(parts: list[pd.DataFrame], id_columns: list[str]) -> pd.DataFrame:
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=id_columns + QUARANTINE_COLUMNS)
    return pd.concat(parts, ignore_index=True)


def _integral(column: pd.Series) -> pd.Series:
    """Float ids (10005.0, a column with a missing id) back to integers when every value is integral; ids held as
    text ('000123') are never converted."""
    if pd.api.types.is_float_dtype(column) and (column.dropna() % 1 == 0).all():
        return column.astype("Int64")
    return column


def tidy(frame: pd.DataFrame) -> pd.DataFrame:
    """A quarantine frame as written: id columns first (in their order), then column, value, reason; integral ids
    as integers; each (record, column, value, reason) once.

    >>> f = pd.DataFrame({"reason": ["r", "r"], "icustay_id": [10005.0, 10005.0], "column": ["", ""],
    ...                   "value": [None, None]})
    >>> tidy(f).to_dict("records")
    [{'icustay_id': 10005, 'column': '', 'value': None, 'reason': 'r'}]
    """
    ids = [c for c in frame.columns if c not in QUARANTINE_COLUMNS]
    out = frame[ids + QUARANTINE_COLUMNS]
    out = out[~out.astype(str).duplicated()].reset_index(drop=True)
    for c in ids:
        out[c] = _integral(out[c])
    return out


def join_reasons(reasons: pd.Series) -> str:
    """Distinct reasons of one record, in order of appearance, one per cause.

    >>> join_reasons(pd.Series(["duplicate key (icustay_id)", "duplicate key (icustay_id)", "no hours"]))
    'duplicate key (icustay_id); no hours'
    """
    return "; ".join(dict.fromkeys(reasons))


def mask_beyond_bounds(mean: np.ndarray, count: np.ndarray, variables: list[str], bounds: dict) -> int:
    """In place: hourly means beyond each variable's outlier bounds become missing (count 0), the same
    rule as the validation's quarantine. ``mean``/``count`` are (..., variables). Returns how many."""
    return mask_outside(mean, count, *outlier_bounds(variables, bounds))


def mask_outside(mean: np.ndarray, count: np.ndarray, low: np.ndarray, high: np.ndarray) -> int:
    """In place: hourly means below ``low`` or above ``high`` (per variable; NaN: no bound) become missing (count
    0). Returns how many."""
    with np.errstate(invalid="ignore"):
        bad = (mean < low) | (mean > high)
    mean[bad] = np.nan
    count[bad] = 0
    return int(bad.sum())
