"""Columns computed from others, e.g. eq. 5 of Su et al. 2023: mean PAP = 2/3 diastolic PAP + 1/3 systolic PAP,
hypertensive = 1[mean PAP > 20 mmHg]. Expressions are pandas ``DataFrame.eval`` arithmetic and
comparisons over column names (no function calls, no attribute access); booleans become 0/1.

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.
"""

from __future__ import annotations

import re

import pandas as pd

__all__ = ["add_derived", "derived_sources"]


def derived_sources(derived: list, attributes: list[str]) -> dict[str, list[str]]:
    """The attributes each derived column is computed from (directly, or through an earlier derived column).

    >>> from types import SimpleNamespace as D
    >>> derived_sources([D(name="m", expression="2 / 3 * a + 1 / 3 * b"), D(name="h", expression="m > 20")],
    ...                 ["a", "b", "c"])
    {'m': ['a', 'b'], 'h': ['a', 'b']}
    """
    sources: dict[str, list[str]] = {}
    for column in derived:
        names = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", column.expression)
        found = [n for n in names if n in attributes] + [s for n in names for s in sources.get(n, [])]
        sources[column.name] = list(dict.fromkeys(found))
    return sources


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
