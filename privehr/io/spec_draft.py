"""``privehr spec draft TABLE.csv``: a starting table spec, guessed from the table itself.

A spec is what a steward writes to bring a new table (``expectations/README.md``). Writing one by hand
for a 30-column table is tedious, so the draft guesses, for each column of a comma-separated file with
a header row (one record per row):

* its kind: numbers that are all 0 or 1 -> ``binary``; other whole numbers -> ``integer``; other
  numbers -> ``numeric``; text with at most ``max_categories`` distinct values -> ``categorical``
  (``binary`` with two), their categories listed in sorted order;
* a ``step`` for whole numbers recorded in steps: m >= 3 distinct values whose differences share a
  common divisor step > 1 (their gcd; 60, 70, 80 -> step 10) are drafted ``integer`` with ``step``,
  valid_low on the step, where step ** (m - 1) >= 100: whole numbers that are not recorded in steps
  share a divisor p with a chance of about p ** -(m - 1), so a coincidence (2, 4, 6) stays plain
  ``integer``. One rule, not two: a numeric column with few distinct values is *not* drafted
  ``ordinal``. An integer column (with or without a step) of at most 256 levels (the codec's
  ``MAX_LEVELS``) is already modelled level by level by the synthesizers, so ``ordinal`` would add
  nothing but a category list of every value present (a rare one singles out a patient) and would lose
  the bounds; a steward who wants ordinal labels declares them;
* the ``id_column``: the first column with a distinct value in every record (none missing) that is text
  or whose name looks like an identifier: its last word (words split at ``_``, spaces, ``-``, ``.``, ``#``
  and camelCase) is one of id, identifier, mrn, key, patient, subject, record, number, no, nr, num, or a
  glued form such as ``patientid``, ``subjectno``. It is drafted as ``id_column``, not as an attribute
  (an identifier carries nothing to synthesise and would single out patients). A column named like an
  identifier whose values repeat or are missing (``number`` holding counts) stays data, with a note; a
  second identifier is left out of the spec, with a note;
* bounds of numeric and integer columns: the observed minimum and maximum widened outward to two
  significant digits (with a step: moved onto the step, inward of those).

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


ID_WORDS = ("id", "identifier", "mrn", "key", "patient", "subject", "record", "number", "no", "nr", "num")
MIN_STEP_LEVELS = 3  # distinct values needed before a common step is proposed (two values always have one)
STEP_EVIDENCE = 100  # step ** (distinct values - 1) at least this: a chance of about 1% that the step is a coincidence


def _words(name: str) -> list[str]:
    """``PatientID`` -> [patient, id]; ``patient_no.`` -> [patient, no]; ``Record #`` -> [record]."""
    return [w.lower() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", name)]


def _looks_like_id(name: str) -> bool:
    """Its last word is an identifier word (``patient_id``, ``Patient number``, ``No.``, ``subject``) or a glued
    one (``patientid``, ``subjectno``); ``fluid``, ``lipid`` and ``number_of_visits`` are not."""
    words = _words(name)
    return bool(words) and (words[-1] in ID_WORDS or re.fullmatch(
        r"(patient|subject|record|pat|case|person)(id|identifier|mrn|key|number|no|nr|num)", words[-1]) is not None)


def _common_step(values: np.ndarray) -> int | None:
    """The gcd of the differences of whole numbers with m >= ``MIN_STEP_LEVELS`` distinct values, where
    gcd ** (m - 1) >= ``STEP_EVIDENCE`` (None otherwise: no step, or one that may be a coincidence)."""
    distinct = np.unique(values)
    if len(distinct) < MIN_STEP_LEVELS or np.abs(distinct).max() >= 2 ** 53:
        return None
    step = int(np.gcd.reduce((distinct[1:] - distinct[0]).astype(np.int64)))
    return step if step > 1 and (len(distinct) - 1) * math.log(step) >= math.log(STEP_EVIDENCE) - 1e-9 else None


def _column(name: str, tokens: pd.Series, max_categories: int) -> tuple[dict | None, str | None]:
    """(attribute entry, or None for an id/unusable column; a note for the user)."""
    present = tokens[~tokens.isin(NA_TOKENS)]
    if present.empty:
        return {"name": name, "kind": "numeric"}, f"{name}: no value present; kind and bounds unknown (set them)"
    numbers = pd.to_numeric(present, errors="coerce")
    if numbers.notna().all():
        values = numbers.to_numpy(float)
        infinite = int((~np.isfinite(values)).sum())  # bounds are finite: "inf" is beyond them, quarantined
        values = values[np.isfinite(values)]
        if not values.size:
            return {"name": name, "kind": "numeric"}, f"{name}: no finite value; kind and bounds unknown (set them)"
        if set(np.unique(values)) <= {0.0, 1.0} and not infinite:
            return {"name": name, "kind": "binary"}, None
        kind = "integer" if np.all(values == np.round(values)) else "numeric"
        low, high = _outward(values.min(), up=False), _outward(values.max(), up=True)
        step = _common_step(values) if kind == "integer" else None
        if step is None or infinite:
            return {"name": name, "kind": kind, "valid_low": low, "valid_high": high}, (
                f"{name}: {infinite} infinite value(s), beyond any bounds (quarantined); bounds drafted from the "
                "finite values" if infinite else None)
        first = float(values.min())  # the steps start on the data's grid: the lowest grid point >= low
        low = first - math.floor((first - low) / step) * step
        high = low + math.floor((high - low) / step) * step
        return {"name": name, "kind": "integer", "valid_low": low, "valid_high": high, "step": step}, (
            f"{name}: whole numbers on a common step of {step} ({len(np.unique(values))} distinct values); drafted "
            f"as integer with step: {step} (values lie on valid_low + k * step; synthetic values land on the "
            "steps, not between them). Confirm the step from the instrument or form; delete it if the spacing "
            "is a coincidence")
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
        named, distinct = _looks_like_id(column), tokens.is_unique and not tokens.isin(NA_TOKENS).any()
        if distinct and (text or named) and id_column is None:
            id_column = column
            why = "its name looks like an identifier and it" if named else "its values are text and it"
            notes.append(f"{column}: {why} holds a distinct value in every record; drafted as the id column "
                         "(id_column), not as an attribute: an identifier carries nothing to synthesise and would "
                         "single out patients")
            continue
        if distinct and named:
            left_out.append(column)
            notes.append(f"{column}: its name looks like an identifier and it holds a distinct value in every "
                         f"record, a second one beside the id column {id_column}; left out of the spec (an "
                         "identifier is not data to synthesise)")
            continue
        if named:
            notes.append(f"{column}: named like an identifier, but its values repeat or some are missing; drafted "
                         "as data, not as the id column (check)")
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


KINDS_RULE = ("Kinds: 0/1 -> binary; whole numbers -> integer, with a step where at least 3 distinct values share "
              "a common step > 1 that is unlikely to be a coincidence (60, 70, 80 -> step: 10; values lie on "
              "valid_low + k * step, synthetic values land on the steps); other numbers -> numeric; few texts -> "
              "categorical. Few distinct numbers are not drafted ordinal: an integer column is modelled level by "
              "level already; declare ordinal (with categories) yourself where labels matter. A column named "
              "like an identifier (patient_id, Patient number, No) with a distinct value in every record is the "
              "id_column, not data.")


def spec_yaml(spec: dict, notes: list[str]) -> str:
    """The draft as YAML, its warning and notes as a comment header."""
    header = ["# privehr table spec (drafted by `privehr spec draft`)", "#"]
    header += [f"# {line}" for line in _wrap(DRAFT_WARNING)]
    header += ["#"] + [f"# - {line}" for note in notes for line in _wrap(note)] if notes else []
    header += ["#"] + [f"# {line}" for line in _wrap(KINDS_RULE)]
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
