"""CSV files a person opens in a spreadsheet: text that a spreadsheet would run as a formula is written as text.

A spreadsheet reads a cell that starts with ``=``, ``+``, ``-`` or ``@`` (or a tab or carriage return before one)
as a formula, and a formula can call out (``=cmd|' /C calc'!A0``, ``=HYPERLINK(...)``). A quarantine report lists
the cells a delivery got wrong, so it holds whatever the delivery held. Such text cells, and headers, get a
leading ``'`` (OWASP's advice for CSV injection): the spreadsheet shows the text and runs nothing. Numbers are not
text: ``-3.5`` and ``+2e3`` stay numbers. Only files meant for people are escaped; files code reads back are not.

Escaped: the quarantine CSVs (``quarantine/<delivery>/<table>.csv``) and a synthesis run's ``results.csv``. Written
as they are, because code reads them back as data: the synthetic tables (``synthetic/``, the bundle's ``tables/``:
the spec's category labels, which the evaluation and a partner's code map back; the bundle names the columns whose
labels a spreadsheet would run), the split and imputed tables under ``intermediate/`` and ``excluded_stays.csv``.

>>> escape_cell("=cmd|' /C calc'!A0"), escape_cell("-3.5"), escape_cell(-3.5), escape_cell("-inf")
("'=cmd|' /C calc'!A0", '-3.5', -3.5, "'-inf")
"""

from __future__ import annotations

import re

import pandas as pd

__all__ = ["FORMULA_START", "escape_cell", "spreadsheet_safe"]

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def escape_cell(value):
    """``value`` with a leading ``'`` if it is text that starts like a formula and is not a plain number."""
    if isinstance(value, str) and value.startswith(FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def spreadsheet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` whose text cells and column names are escaped (:func:`escape_cell`); numbers untouched."""
    out = frame.rename(columns=lambda c: escape_cell(c) if isinstance(c, str) else c)
    for column in out.columns:
        if out[column].dtype == object or pd.api.types.is_string_dtype(out[column]):
            out[column] = out[column].map(escape_cell)
    return out
