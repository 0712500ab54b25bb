"""Columns computed from others, e.g. seed 002 eq. 5: mean PAP = 2/3 diastolic PAP + 1/3 systolic PAP,
hypertensive = 1[mean PAP > 20 mmHg]. Expressions are pandas ``DataFrame.eval`` arithmetic and
comparisons over column names (no function calls, no attribute access); booleans become 0/1."""

from __future__ import annotations

import pandas as pd

__all__ = ["add_derived"]


def add_derived(frame: pd.DataFrame, derived: list) -> pd.DataFrame:
    """``frame`` with each ``derived`` column (objects with ``name`` and ``expression``) appended in order."""
    out = frame.copy()
    for column in derived:
        try:
            value = out.eval(column.expression, engine="python")
        except Exception as err:  # pandas raises many types for a bad expression
            raise ValueError(f"derived column {column.name!r}: cannot evaluate {column.expression!r}: {err}") from None
        out[column.name] = value.astype(int) if value.dtype == bool else value.astype(float)
    return out
