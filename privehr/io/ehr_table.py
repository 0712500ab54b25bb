"""Read a small EHR table through its spec (``expectations/specs/<name>.yaml``), read only.

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.

Layout (either orientation), NA tokens and ids come from the spec. Suspect cells and records are
quarantined with a reason, never dropped silently: non-numeric tokens and values beyond the
physiological bounds are masked (set missing), and so are non-whole values of an integer column and values
off a column's ``step`` (not on valid_low + k * step: a score recorded in tens that reads 87); records
without any kept value and records with a missing or duplicate id, and records identical to another in every
attribute (one patient delivered twice would be two DP units), are removed. Attributes missing in more
patients than the spec allows are dropped as a recorded decision (Su et al. 2023 drop 7 of Harrod's 26
attributes this way): the decision that shapes training is :func:`drop_by_missingness` on the *training*
patients (after the split);
``decisions["dropped_attributes"]`` is the same rule on the whole delivery, for the steward's report.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from privehr.models.data import quarantine as q
from privehr.models.data.derived_columns import derived_sources
from privehr.core.errors import InputError
from privehr.core.specs import EHRTableSpec

__all__ = ["EHRTable", "read_ehr_table", "parse_ehr_table", "drop_by_missingness", "check_derived_sources", "ID",
           "category_codes", "check_quarantined_share"]

ID = "patient_id"


@dataclass
class EHRTable:
    """``frame``: kept records x every spec attribute (float, NaN = missing; a discrete attribute as its category's
    code 0..k-1; a numeric or integer attribute, with a step or not, as its value), indexed by ``patient_id``.
    ``parsed``: every spec attribute as read (numbers, before masking), for validation.
    ``quarantine``: suspect records and cells with reasons. ``decisions``: counts and dropped columns."""

    frame: pd.DataFrame
    parsed: pd.DataFrame
    quarantine: pd.DataFrame
    decisions: dict = field(default_factory=dict)


def _names_for_message(names: list[str], known: list[str]) -> str:
    """What may be said of unknown attribute names: how many, and which spec attributes the close ones resemble.
    The names themselves are never printed: a misread file puts values there (a ';'-separated line read as one
    field, a patient identifier in the first column)."""
    close = {}
    for name in names:
        match = difflib.get_close_matches(name.strip().lower(), known, n=1, cutoff=0.8)
        if match:
            close[match[0]] = close.get(match[0], 0) + 1
    hint = "; ".join(f"{n} resemble(s) {m!r}" for m, n in close.items())
    return f"{len(names)} name(s) (not shown: they may hold values{'; ' + hint if hint else ''})"


def _check_delimiter(path: Path, spec: EHRTableSpec) -> None:
    """Refuse a file that is not comma-separated, saying so, before its fields are misread as names."""
    with open(path, "rb") as fh:
        first = fh.readline(1 << 20).decode("utf-8", errors="replace")
    counts = {sep: first.count(sep) for sep in (",", ";", "\t")}
    found = max(counts, key=counts.get)
    if found != "," and counts[found] > counts[","]:
        name, symbol = {";": ("semicolon", "';'"), "\t": ("tab", "tab")}[found]
        raise InputError(f"{spec.name}: {path} looks {name}-separated ({counts[found]} {symbol} and {counts[',']} "
                         "',' on its first line); privehr reads comma-separated values with '.' as the decimal "
                         "mark. Re-export the table as CSV with ',' between fields and '.' decimals (a ';' file "
                         "usually has decimal commas too).")


def _raw_attributes(path: Path, spec: EHRTableSpec) -> pd.DataFrame:
    """The file as strings, one row per record and one column per attribute (no ids generated yet)."""
    if not path.exists():
        raise InputError(f"{spec.name}: file not found: {path}. Pass the table's path.")
    if path.stat().st_size == 0:
        raise InputError(f"{spec.name}: {path} is empty (0 bytes). Deliver the table again.")
    _check_delimiter(path, spec)
    try:
        raw = pd.read_csv(path, header=0 if spec.file.header else None, dtype=str, keep_default_na=False)
    except UnicodeDecodeError:
        raise InputError(f"{spec.name}: {path} is not UTF-8 text (a UTF-16 or Latin-1 export?). Fix: export the "
                         "table again as UTF-8 CSV.") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        detail = " ".join(str(err).split())  # pandas names line numbers and field counts, never a cell
        raise InputError(f"{spec.name}: {path} cannot be parsed as CSV ({detail}). Fix: give every row the header's "
                         "number of fields (check quoting and separators).") from None
    names = set(spec.bounds()) | ({spec.id_column} if spec.id_column else set())
    first_column = set(raw.iloc[:, 0].str.strip()) if raw.shape[1] else set()
    first_row = set((raw.columns if spec.file.header else raw.iloc[0] if len(raw) else []))
    if spec.file.orientation == "attributes_as_rows":
        if len(names & first_column) < len(names & {str(x).strip() for x in first_row}):
            raise InputError(f"{spec.name}: {path} has attribute names in its first row, but the spec says "
                             "attributes_as_rows (one row per attribute). Transpose the file or set "
                             "file.orientation: attributes_as_columns in the spec.")
        table = raw.set_index(raw.columns[0]).T.reset_index(drop=True)
        table.columns = [str(c).strip() for c in table.columns]
    else:
        if len(names & {str(x).strip() for x in first_row}) < len(names & first_column):
            raise InputError(f"{spec.name}: {path} has attribute names in its first column, but the spec says "
                             "attributes_as_columns. Transpose the file or set file.orientation: "
                             "attributes_as_rows in the spec.")
        table = raw.copy()
        if not spec.file.header:
            table.columns, table = [str(c).strip() for c in table.iloc[0]], table.iloc[1:].reset_index(drop=True)
        table.columns = [str(c).strip() for c in table.columns]
    if table.empty:
        raise InputError(f"{spec.name}: {path} holds no records. Deliver a table with at least "
                         f"{spec.min_rows} record(s).")
    unknown = [c for c in table.columns if c not in names]
    if unknown:
        raise InputError(f"{spec.name}: {path} has {_names_for_message(unknown, sorted(names))} that the spec does "
                         "not define as attributes. Add them to the spec (unit and bounds), remove them from the "
                         "file, or check its separator and orientation.")
    absent = [a for a in spec.bounds() if a not in table.columns]
    if absent:
        raise InputError(f"{spec.name}: {path} lacks the attribute(s) {absent} that the spec requires. Deliver "
                         "them (all values may be missing) or remove them from the spec.")
    if table.columns.duplicated().any():
        raise InputError(f"{spec.name}: {path} repeats attribute(s) "
                         f"{sorted(set(table.columns[table.columns.duplicated()]))}; keep one of each.")
    return table


def parse_ehr_table(table: pd.DataFrame, spec: EHRTableSpec) -> EHRTable:
    """Strings -> numbers, ids, quarantine and the missingness decision (pure, no IO)."""
    table = table.copy()
    if spec.id_column:
        ids = table.pop(spec.id_column).str.strip().replace(dict.fromkeys(spec.file.na_tokens, np.nan))
    else:
        ids = pd.Series([f"{spec.id_prefix}{i + 1:04d}" for i in range(len(table))])
    table.insert(0, ID, ids.to_numpy())
    attributes = list(spec.bounds())
    tokens = table[attributes].apply(lambda s: s.str.strip())
    is_na = tokens.isin(spec.file.na_tokens)
    numbers = tokens.where(~is_na).apply(pd.to_numeric, errors="coerce")
    parts = []
    for a in spec.attributes:
        present = ~is_na[a.name].to_numpy()
        if a.discrete:
            numbers[a.name] = category_codes(tokens[a.name].where(~is_na[a.name]), a.levels)
            reason = "not one of the spec's categories"
        else:
            reason = "non-numeric token (not a number and not an NA token of the spec)"
        bad = numbers[a.name].isna().to_numpy() & present
        if not a.discrete and present.any() and bad[present].all():
            raise InputError(f"{spec.name}: attribute {a.name!r} holds no number in any of its {int(present.sum())} "
                             f"non-missing record(s), but the spec declares it {a.kind}. If it is a category "
                             "column, declare kind: categorical (or binary, ordinal) with its categories in the spec.")
        if bad.any():
            parts.append(q.records(table.loc[bad, [ID]], a.name, tokens.loc[bad, a.name], reason))
        if a.kind == "integer":
            fractional = (numbers[a.name] % 1 != 0).to_numpy() & ~bad & present
            if fractional.any():
                parts.append(q.records(table.loc[fractional, [ID]], a.name, tokens.loc[fractional, a.name],
                                       "not a whole number (the spec declares an integer column)"))
                numbers.loc[fractional, a.name] = np.nan
        if a.step is not None:  # values lie on valid_low + k * step; a value between the steps is suspect
            k = (numbers[a.name] - a.valid_low) / a.step
            off = ((k - k.round()).abs() > 1e-6).to_numpy() & ~bad & present
            if off.any():
                parts.append(q.records(table.loc[off, [ID]], a.name, tokens.loc[off, a.name],
                                       f"not on the spec's step (valid_low + k * {a.step:g})"))
                numbers.loc[off, a.name] = np.nan
    parsed = pd.concat([table[[ID]], numbers], axis=1)
    bounds = {a.name: (a.valid_low, a.valid_high) for a in spec.attributes if not a.discrete}
    parts.append(q.beyond_bounds(parsed, bounds, [ID], "physiological"))
    parts += [q.missing_ids(parsed, [ID]), q.duplicate_keys(parsed.dropna(subset=[ID]), [ID], [ID]),
              q.duplicate_content(parsed, attributes, [ID])]
    quarantine = q.combine(parts, [ID])

    values = numbers.copy()
    masked = quarantine[quarantine["column"] != ""]
    for column, rows in masked.groupby("column").groups.items():
        values.loc[parsed[ID].isin(masked.loc[rows, ID]), column] = np.nan
    bad_records = set(quarantine.loc[quarantine["column"] == "", ID].dropna())
    keep_rows = parsed[ID].notna() & ~parsed[ID].isin(bad_records)
    values, ids = values[keep_rows.to_numpy()], parsed.loc[keep_rows, ID]

    frame = values[attributes].set_axis(pd.Index(ids.to_numpy(), name=ID))
    empty = q.empty_records(frame.reset_index(), attributes, [ID])
    frame = frame[~frame.index.isin(empty[ID])]
    quarantine = q.combine([quarantine, empty], [ID])
    check_quarantined_share(spec, quarantine, (~is_na).sum(), len(table), len(frame))
    _, dropped, rule = drop_by_missingness(frame, spec, len(table))
    decisions = {"records_read": int(len(table)), "records_kept": int(len(frame)),
                 "attributes_read": len(attributes), "attributes_kept": len(attributes) - len(dropped),
                 "dropped_attributes": dropped, "drop_rule": rule,
                 "quarantined": quarantine["reason"].value_counts().to_dict()}
    return EHRTable(frame, parsed, quarantine, decisions)


_FIXES = {  # a quarantine reason -> what usually causes it wholesale, and the fix
    "categories": "list the column's categories as they appear in the file (categories: [...]) and its kind "
                  "(binary, categorical, ordinal) in the spec",
    "non-numeric": "check the file's decimal mark and NA tokens, or declare the column categorical with its "
                   "categories",
    "bounds": "check the column's unit against the spec's (a unit error moves every value), or the spec's bounds",
    "whole number": "declare the column numeric, or deliver whole numbers",
    "step": "check the column's step and valid_low in the spec (values lie on valid_low + k * step), or remove "
            "the step",
}


def _fix_for(reason: str) -> str:
    key = ("categories" if "categories" in reason else "non-numeric" if "non-numeric" in reason
           else "whole number" if "whole number" in reason else "step" if "step" in reason
           else "bounds" if "bound" in reason else None)
    return _FIXES[key] if key else "correct the delivery or the spec's rule (see the quarantine file)"


def check_quarantined_share(spec: EHRTableSpec, quarantine: pd.DataFrame, present: pd.Series, records_read: int,
                            records_kept: int) -> None:
    """Stop, with one line, a delivery the quarantine has emptied or gutted: no record kept, more than the spec's
    ``max_quarantined_share`` of the records removed, or of one attribute's non-missing values masked. The line
    names the column, the reason, and counts (of values and of distinct tokens), never a value."""
    limit = spec.max_quarantined_share
    cells = quarantine[quarantine["column"] != ""]
    worst = None
    for column, rows in cells.groupby("column"):
        n, of = int(rows[ID].nunique()), int(present.get(column, 0))
        if of and (n > limit * of) and (worst is None or n / of > worst[1] / worst[2]):
            worst = (column, n, of, rows["reason"].value_counts().index[0], int(rows["value"].nunique()))
    if worst is not None:
        column, n, of, reason, distinct = worst
        raise InputError(f"{spec.name}: attribute {column!r} had {n} of its {of} non-missing values quarantined "
                         f"({reason}; {distinct} distinct token(s)), more than the spec's max_quarantined_share "
                         f"{limit:.0%}; nothing was trained. Fix: {_fix_for(reason)}.")
    removed = records_read - records_kept
    if records_read and (records_kept == 0 or removed > limit * records_read):
        whole = quarantine[quarantine["column"] == ""]
        reason = whole["reason"].value_counts().index[0] if len(whole) else "no value kept"
        raise InputError(f"{spec.name}: {removed} of {records_read} records were quarantined whole (most often: "
                         f"{reason}), more than the spec's max_quarantined_share {limit:.0%}; nothing was trained. "
                         f"Fix: {_fix_for(reason)}.")


def category_codes(tokens: pd.Series, levels: list) -> pd.Series:
    """Each token's index in ``levels`` (float; NaN for a missing token or one that is no level). A token matches a
    level written the same way, or a numeric level of equal value ("1.0" matches 1)."""
    by_text = {str(level).strip(): i for i, level in enumerate(levels)}
    by_value = {float(level): i for i, level in enumerate(levels) if _number(level) is not None}
    def code(token):
        if not isinstance(token, str):
            return np.nan
        if token in by_text:
            return float(by_text[token])
        value = _number(token)
        return float(by_value[value]) if value is not None and value in by_value else np.nan
    return tokens.map(code).astype(float)


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if np.isfinite(number) else None


def drop_by_missingness(frame: pd.DataFrame, spec: EHRTableSpec, records_read: int) -> tuple[pd.DataFrame, dict, str]:
    """Drop attributes missing in every row of ``frame``, or in more than the spec's share of its rows.

    The spec's limit counts records of the delivery (``records_read`` of them); on a subset (the
    training patients) the same share applies. Returns (kept columns, {dropped: missing count}, rule).
    """
    limit = spec.drop_attributes_missing_in_more_than
    share = None if limit is None else limit / max(records_read, 1)
    missing = frame.isna().sum()
    dropped = {c: int(n) for c, n in missing.items()
               if n == len(frame) or (share is not None and n > share * len(frame))}
    rule = (f"missing in more than {limit} of {records_read} records ({share:.1%} of the rows judged), or in all"
            if limit is not None else "missing in all records")
    return frame[[c for c in frame.columns if c not in dropped]], dropped, rule


def check_derived_sources(spec: EHRTableSpec, dropped: dict, where: str) -> None:
    """Refuse, with one message, a table where an attribute a derived column needs was dropped as missing."""
    lost = {name: [s for s in sources if s in dropped]
            for name, sources in derived_sources(spec.derived, list(spec.bounds())).items()}
    lost = {name: sources for name, sources in lost.items() if sources}
    if lost:
        listed = "; ".join(f"{name} needs {', '.join(sources)}" for name, sources in lost.items())
        raise InputError(f"{spec.name}: derived column(s) cannot be computed: {listed}, missing in too many "
                         f"records {where} (dropped by the rule: {spec.name}'s drop_attributes_missing_in_more_than). "
                         "Deliver those attributes, or remove the derived column(s) from the spec.")


def read_ehr_table(path: str | Path, spec: EHRTableSpec) -> EHRTable:
    """Read ``path`` through ``spec`` (the file is only read)."""
    table = parse_ehr_table(_raw_attributes(Path(path), spec), spec)
    check_derived_sources(spec, table.decisions["dropped_attributes"], "of the delivery")
    return table
