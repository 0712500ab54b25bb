"""``privehr spec draft TABLE.csv``: a starting table spec, guessed from the table itself.

A spec is what a steward writes to bring a new table (``expectations/README.md``). Writing one by hand
for a 30-column table is tedious, so the draft guesses, for each column of a comma-separated file with
a header row (one record per row):

* its kind: numbers that are all 0 or 1 -> ``binary``; other whole numbers -> ``integer``; other
  numbers -> ``numeric``; text with at most ``max_categories`` distinct values -> ``categorical``
  (``binary`` with two), their categories listed in sorted order; the first column with a distinct value
  in every record that is text, or whose name looks like an identifier -> the ``id_column``;
* bounds of numeric and integer columns: the observed minimum and maximum widened outward to two
  significant digits.

What the draft reads is the private table. Its kinds are schema facts, but its **bounds and
categories come from patients' values**: the observed extremes, and every category that occurs (a
rare category can single out a patient). They are private: replace them with public facts (clinical
reference ranges, the code list of the source system) before a DP run. A synthesizer scales and bins
by the bounds, so bounds taken from the data put the extremes into every release, outside the DP
guarantee. The draft says so in the YAML's header and on the console, and marks
``drafted_from_data: true`` in the spec until the steward removes it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from privehr.core.errors import InputError
from privehr.core.specs import EHRTableSpec

__all__ = ["draft_spec", "spec_yaml", "DRAFT_WARNING"]

NA_TOKENS = ["", "NA", "NaN", "nan", "none", "None", "NULL", "null"]
DRAFT_WARNING = ("This spec was drafted from the table's own values: its kinds are guesses to confirm, and its "
                 "bounds and categories were read from private records (the observed extremes, every category "
                 "present). Replace them with public facts (clinical reference ranges, the source system's code "
                 "lists) before a DP run: bounds from the data are not covered by the DP guarantee. Then delete "
                 "drafted_from_data.")


def _outward(value: float, up: bool) -> float:
    """``value`` rounded away from the data to two significant digits (0 stays 0)."""
    if value == 0 or not math.isfinite(value):
        return float(value)
    step = 10 ** (math.floor(math.log10(abs(value))) - 1)
    rounded = (math.ceil if up else math.floor)(value / step) * step
    return float(round(rounded, 12))


def _looks_like_id(name: str) -> bool:
    return bool(re.search(r"(^|[_\s-])(id|identifier|mrn|key)($|[_\s-])", name.strip().lower())) or \
        name.strip().lower().endswith("id")


def _column(name: str, tokens: pd.Series, max_categories: int) -> tuple[dict | None, str | None]:
    """(attribute entry, or None for an id/unusable column; a note for the user)."""
    present = tokens[~tokens.isin(NA_TOKENS)]
    if present.empty:
        return {"name": name, "kind": "numeric"}, f"{name}: no value present; kind and bounds unknown (set them)"
    numbers = pd.to_numeric(present, errors="coerce")
    if numbers.notna().all():
        values = numbers.to_numpy(float)
        if set(np.unique(values)) <= {0.0, 1.0}:
            return {"name": name, "kind": "binary"}, None
        kind = "integer" if np.all(values == np.round(values)) else "numeric"
        return {"name": name, "kind": kind, "valid_low": _outward(values.min(), up=False),
                "valid_high": _outward(values.max(), up=True)}, None
    distinct = sorted(present.unique())
    if len(distinct) <= max_categories:
        kind = "binary" if len(distinct) == 2 else "categorical"
        note = None if numbers.isna().all() else (f"{name}: mixes numbers and text; drafted as {kind} with every "
                                                  "token as a category (check)")
        return {"name": name, "kind": kind, "categories": distinct}, note
    return None, (f"{name}: text with {len(distinct)} distinct values (more than {max_categories}); not a category "
                  "column. Left out of the spec: remove it from the file, or declare it yourself")


def draft_spec(path: str | Path, name: str | None = None, max_categories: int = 20) -> tuple[dict, list[str]]:
    """(spec as a dict, notes) for the CSV at ``path`` (read only). The spec validates as an EHRTableSpec."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"table not found: {path}. Pass the path of a CSV with a header row.")
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    except UnicodeDecodeError:  # its text would quote bytes of a cell
        raise InputError(f"{path} is not UTF-8 text; re-export it as UTF-8 CSV with a header row.") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError):
        raise InputError(f"{path} cannot be parsed as CSV; spec draft reads comma-separated values with a header "
                         "row, one record per row.") from None
    if raw.empty or raw.shape[1] == 0:
        raise InputError(f"{path} holds no records; spec draft needs the table (one record per row).")
    raw.columns = [str(c).strip() for c in raw.columns]
    notes, attributes, id_column, left_out = [], [], None, []
    for column in raw.columns:
        tokens = raw[column].str.strip()
        text = pd.to_numeric(tokens, errors="coerce").isna().any()
        if id_column is None and (text or _looks_like_id(column)) and tokens.is_unique \
                and not tokens.isin(NA_TOKENS).any():
            id_column = column
            notes.append(f"{column}: a distinct value in every record; drafted as the id column")
            continue
        entry, note = _column(column, tokens, max_categories)
        if note:
            notes.append(note)
        if entry is None:
            left_out.append(column)
        else:
            attributes.append(entry)
    if not attributes:
        raise InputError(f"{path}: no column could be drafted as an attribute; write the spec by hand "
                         "(expectations/README.md).")
    spec = {"name": name or re.sub(r"[^A-Za-z0-9_]+", "_", path.stem).strip("_").lower() or "table",
            "description": f"drafted from {path.name}; confirm every kind, replace bounds and categories with "
                           "public facts",
            "drafted_from_data": True,
            "file": {"format": "csv", "orientation": "attributes_as_columns", "header": True,
                     "na_tokens": NA_TOKENS},
            "id_column": id_column, "min_rows": 1, "public_patient_count": False, "attributes": attributes,
            "targets": {"classification": None, "regression": None, "excluded_features": []}}
    if left_out:
        notes.append(f"the file's column(s) {left_out} are not in the spec: the table cannot be read through it "
                     "until they are declared or removed from the file")
    EHRTableSpec.model_validate(spec)  # the draft is a valid spec as written
    return spec, notes


def spec_yaml(spec: dict, notes: list[str]) -> str:
    """The draft as YAML, its warning and notes as a comment header."""
    header = ["# privehr table spec (drafted by `privehr spec draft`)", "#"]
    header += [f"# {line}" for line in _wrap(DRAFT_WARNING)]
    header += ["#"] + [f"# - {line}" for note in notes for line in _wrap(note)] if notes else []
    header += ["# Format: expectations/README.md. Targets: name a binary column under targets.classification for "
               "the utility models."]
    body = yaml.safe_dump(spec, sort_keys=False, allow_unicode=True, width=110)
    return "\n".join(header) + "\n" + body


def _wrap(text: str, width: int = 100) -> list[str]:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return lines + ([line] if line else [])
