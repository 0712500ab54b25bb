"""Steward-editable table specs (``expectations/specs/``, installed as ``privehr.expectations``), typed.

A spec says what a delivered table must look like: columns, keys, label domains, per-variable units
and bounds. ``privehr expectations build`` turns the specs into Great Expectations suites; the
loaders and the quarantine read the same specs, so a steward edits one place.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
import math
from typing import Annotated, Literal

import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from privehr.core.errors import InputError, settings_error, where_in_text
from privehr.core.expressions import ExpressionError, parse_expression
from privehr.core.yaml_files import DuplicateKeyError, load_yaml

__all__ = ["EXPECTATIONS_DIR", "SPEC_DIR", "VariableBounds", "ColumnKind", "DISCRETE_KINDS", "SynthesisTargets", "MimicExtractSpec", "EHRTableSpec", "DerivedColumn",
           "load_mimic_spec", "load_ehr_spec", "check_targets"]

# The bundled suites and specs are package data (the repository's expectations/), found wherever privehr is installed.
EXPECTATIONS_DIR = Path(str(files("privehr.expectations")))
SPEC_DIR = EXPECTATIONS_DIR / "specs"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# a bound, a step or a count of a spec: NaN passes every order check and an infinite bound keeps no value, so both are
# refused by name at validation, before a record is read or a budget spent
Finite = Annotated[float, Field(allow_inf_nan=False)]

ColumnKind = Literal["numeric", "integer", "binary", "categorical", "ordinal"]
DISCRETE_KINDS = ("binary", "categorical", "ordinal")


class VariableBounds(_Strict):
    """One variable: its kind, unit, valid range [valid_low, valid_high] and outlier bounds beyond it.

    ``kind``: ``numeric`` (continuous), ``integer`` (a count or a whole number: non-integers are
    quarantined), ``binary`` (two categories, by default the tokens 0 and 1), ``categorical`` (unordered
    ``categories``) or ``ordinal`` (``categories`` in their order). A discrete column (binary, categorical,
    ordinal) is held as its category's code 0..k-1 and written back as the category itself.

    ``step`` (``integer`` and ``numeric`` only, with ``valid_low``): the column is recorded in steps, its values
    lie on ``valid_low + k * step`` (a score in tens: ``valid_low: 0, step: 10``). A value off the step is
    quarantined; synthetic values are rounded onto the step, and an integer column with few enough levels is
    modelled level by level (:mod:`privehr.models.synthesis.codec`).
    """

    name: str
    kind: ColumnKind = "numeric"
    categories: list[str | int | float] | None = Field(
        None, description="the column's categories as they appear in the file (categorical and ordinal: required; "
                          "ordinal: in order; binary: two, default [0, 1])")
    unit: str = ""
    description: str = ""
    valid_low: Finite | None = None
    valid_high: Finite | None = None
    outlier_low: Finite | None = None
    outlier_high: Finite | None = None
    step: Finite | None = Field(
        None, description="integer and numeric columns recorded in steps (a score in tens): the values lie on "
                          "valid_low + k * step (k = 0, 1, ...); needs valid_low (integer: a whole step and "
                          "valid_low). Values off the step are quarantined; synthetic values are rounded onto it")
    min_nonnull_fraction: float = Field(0.0, ge=0, le=1)
    source: str = ""

    @model_validator(mode="after")
    def _ordered(self):
        named = [(n, getattr(self, n)) for n in ("outlier_low", "valid_low", "valid_high", "outlier_high")
                 if getattr(self, n) is not None]
        bounds = [b for _, b in named]
        for (low, a), (high, b) in zip(named, named[1:]):  # the message names the bounds, never their values
            if a > b:
                raise ValueError(f"{low} is above {high}; order the bounds outlier_low <= valid_low <= valid_high "
                                 "<= outlier_high")
        if self.kind in ("categorical", "ordinal") and not self.categories:
            raise ValueError(f"{self.name!r} is {self.kind}: list its categories (categories: [a, b, ...])")
        if self.kind == "binary" and self.categories is not None and len(self.categories) != 2:
            raise ValueError(f"{self.name!r} is binary: give exactly two categories (or none for 0 and 1)")
        if self.kind in ("numeric", "integer") and self.categories is not None:
            raise ValueError(f"{self.name!r} is {self.kind}: categories belong to binary, categorical and ordinal "
                             "columns (set kind)")
        if self.categories is not None and len({str(c) for c in self.categories}) != len(self.categories):
            raise ValueError(f"{self.name!r}: its categories repeat")
        if any(isinstance(c, float) and not math.isfinite(c) for c in self.categories or []):
            raise ValueError(f"{self.name!r}: a category is NaN or infinite; list the categories as they appear in "
                             "the file (missing values are not a category)")
        if any(isinstance(c, str) and not c.strip() for c in self.categories or []):
            raise ValueError(f"{self.name!r}: a category is empty text; list the categories as they appear in the "
                             "file (missing values are not a category)")
        if self.kind in DISCRETE_KINDS and any(b is not None for b in bounds):
            raise ValueError(f"{self.name!r} is {self.kind}: its categories are its domain; remove the bounds")
        if self.step is not None:
            if self.kind in DISCRETE_KINDS:
                raise ValueError(f"{self.name!r} is {self.kind}: its categories are its domain; step belongs to "
                                 "integer and numeric columns (remove step, or list the levels as categories)")
            if not (self.step > 0 and self.step < float("inf")):
                raise ValueError(f"{self.name!r}: step must be a positive number")
            if self.valid_low is None:
                raise ValueError(f"{self.name!r} has a step: give valid_low, where the steps start (values lie on "
                                 "valid_low + k * step)")
            if self.kind == "integer" and (self.step % 1 or self.valid_low % 1):
                raise ValueError(f"{self.name!r} is integer with a step: give a whole-number step and valid_low "
                                 "(or declare it numeric)")
        return self

    @property
    def discrete(self) -> bool:
        """Held as a code 0..k-1 of its categories."""
        return self.kind in DISCRETE_KINDS

    @property
    def levels(self) -> list:
        """The categories of a discrete column (binary: [0, 1] unless given); [] otherwise."""
        if self.kind == "binary" and self.categories is None:
            return [0, 1]
        return list(self.categories or [])

    def code_range(self) -> tuple[float | None, float | None]:
        """The column's range as held in a frame: 0..k-1 for a discrete column, the valid bounds otherwise."""
        return (0.0, float(len(self.levels) - 1)) if self.discrete else (self.valid_low, self.valid_high)


class StayHours(_Strict):
    min: Finite = 12
    max: Finite = 240


class PatientsSpec(_Strict):
    id_columns: list[str]
    columns: list[str]
    optional_columns: list[str] = []
    labels: list[str]
    age_min: Finite = 15
    stay_hours: StayHours = StayHours()
    min_rows: int = 1
    max_quarantined_share: float = Field(0.5, ge=0, le=1, description="a delivery with a larger share of its "
                                         "stays quarantined fails validation (the cause is systematic)")


class VitalsLabsSpec(_Strict):
    variables: str
    max_fraction_beyond_outlier: float = Field(0.001, ge=0, le=1)


class InterventionsSpec(_Strict):
    columns: list[str]
    domain: list[int] = [0, 1]


class MimicExtractSpec(_Strict):
    """What an ``all_hourly_data.h5`` delivery must satisfy."""

    name: str = "mimic_extract"
    patients: PatientsSpec
    vitals_labs: VitalsLabsSpec
    interventions: InterventionsSpec
    variables: list[VariableBounds] = []

    def bounds(self) -> dict[str, VariableBounds]:
        return {v.name: v for v in self.variables}


class FileLayout(_Strict):
    format: Literal["csv"] = "csv"
    orientation: Literal["attributes_as_rows", "attributes_as_columns"] = "attributes_as_columns"
    header: bool = True
    na_tokens: list[str] = ["", "NA", "NaN", "nan", "none"]


class DerivedColumn(_Strict):
    """A column computed from attributes and earlier derived columns, e.g. ``2 / 3 * a + 1 / 3 * b``: arithmetic,
    comparisons, and/or/not and a few named functions (:mod:`privehr.core.expressions`), checked by the table spec."""

    name: str
    expression: str
    unit: str = ""
    kind: Literal["numeric", "binary"] = Field("numeric", description="binary: the expression is a 0/1 condition")


class SynthesisTargets(_Strict):
    """What the synthesis report's utility models predict (train on synthetic, test on real)."""

    classification: str | None = Field(None, description="a binary attribute or 0/1 derived column (TSTR "
                                                          "classifier panel, SVM)")
    regression: str | None = Field(None, description="a numeric attribute or derived column (random forest MSE)")
    excluded_features: list[str] = Field([], description="attributes the targets are computed from, left out of "
                                                         "the utility models' inputs")


class EHRTableSpec(_Strict):
    """A small EHR table: layout, ids, attributes with bounds, missingness rule, derived columns."""

    name: str
    description: str = ""
    file: FileLayout = FileLayout()
    id_column: str | None = None
    id_prefix: str = "row-"
    drop_attributes_missing_in_more_than: int | None = None
    min_rows: int = 1
    max_quarantined_share: float = Field(
        0.5, ge=0, le=1, description="stop at validation when a larger share of the records, or of one attribute's "
                                     "non-missing values, is quarantined (the cause is systematic: a unit, a "
                                     "category list, a separator), or when no record is left")
    drafted_from_data: bool = Field(
        False, description="written by `privehr spec draft`: bounds and categories were read from the private "
                           "records, so a scaling or binning by them is outside the DP guarantee (its tables stay "
                           "under intermediate/); remove once they are replaced by public facts")
    public_patient_count: bool = Field(
        False, description="the number of patients is public (e.g. published with the data): release records and "
                           "synthetic tables may carry it exactly; otherwise tables are sized by a noisy count")
    attributes: list[VariableBounds]
    derived: list[DerivedColumn] = []
    targets: SynthesisTargets = SynthesisTargets()
    _source: Path | None = PrivateAttr(None)  # the YAML it was read from

    @model_validator(mode="after")
    def _each_name_once(self):
        names = [a.name for a in self.attributes] + [d.name for d in self.derived]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"{', '.join(map(repr, twice))} named more than once among attributes and derived "
                             "columns; keep one entry per column")
        if self.id_column is not None and self.id_column in names:
            raise ValueError(f"id_column {self.id_column!r} is also listed as an attribute; an id is not an attribute")
        for a in self.attributes:  # the reader takes an NA token for a missing value, whatever the column
            if any(str(c).strip() in self.file.na_tokens for c in a.categories or []):
                raise ValueError(f"attribute {a.name!r}: a category is one of file.na_tokens, so it would be read as "
                                 "missing; rename it in the file and the spec, or remove it from file.na_tokens")
        known = [a.name for a in self.attributes]
        for column in self.derived:  # what an expression computes is checked here, before anything reads a record
            try:
                parse_expression(column.expression, known)
            except ExpressionError as err:
                raise ValueError(f"derived column {column.name!r}: {err}") from None
            known.append(column.name)
        return self

    @property
    def source(self) -> Path | None:
        return self._source

    @property
    def bundled(self) -> bool:
        """Shipped with privehr (its reviewed suite is in expectations/), not a user's spec file."""
        return self._source is not None and self._source.resolve().parent == SPEC_DIR.resolve()

    def bounds(self) -> dict[str, VariableBounds]:
        return {a.name: a for a in self.attributes}

    def kinds(self) -> dict[str, str]:
        """Column -> kind for the attributes and the derived columns."""
        return {a.name: a.kind for a in self.attributes} | {d.name: d.kind for d in self.derived}

    def codes(self) -> dict[str, list[int]]:
        """Discrete column -> its valid codes 0..k-1 (binary derived columns: 0, 1), as a table holds them."""
        return ({a.name: list(range(len(a.levels))) for a in self.attributes if a.discrete}
                | {d.name: [0, 1] for d in self.derived if d.kind == "binary"})


def check_targets(spec: EHRTableSpec, classification: str | None, regression: str | None,
                  excluded: list[str]) -> None:
    """Refuse, in one message, targets the table does not have: before anything is trained or any budget spent."""
    kinds = spec.kinds()
    problems = []
    for role, name, allowed in (("classification", classification, ("binary",)),
                                ("regression", regression, ("numeric", "integer", "ordinal"))):
        if name is None:
            continue
        if name not in kinds:
            problems.append(f"the {role} target {name!r} is not a column of {spec.name} (columns: "
                            f"{', '.join(kinds)})")
        elif kinds[name] not in allowed:
            problems.append(f"the {role} target {name!r} is {kinds[name]}; it must be {' or '.join(allowed)}")
    unknown = [e for e in excluded if e not in kinds]
    if unknown:
        problems.append(f"excluded feature(s) {unknown} are not columns of {spec.name}")
    if problems:
        raise InputError("; ".join(problems) + ". Fix targets: in the spec, or pass --classification-target / "
                         "--regression-target / --exclude.")


def _read_yaml(path: Path) -> dict:
    if not path.exists():
        raise InputError(f"table spec not found: {path}. Pass the path of a spec YAML (bundled specs, by name: "
                         f"{', '.join(sorted(p.stem for p in SPEC_DIR.glob('*.yaml')))}); "
                         "`privehr spec draft TABLE.csv` writes a starting one.")
    try:
        return load_yaml(path.read_text()) or {}
    except DuplicateKeyError as err:
        raise InputError(f"table spec {path}: {err}") from None
    except yaml.YAMLError as err:
        raise InputError(f"table spec {path} is not valid YAML{where_in_text(err)}; fix that line") from None
    except (UnicodeDecodeError, IsADirectoryError) as err:
        raise InputError(f"table spec {path} cannot be read as UTF-8 text ({type(err).__name__}); save it as UTF-8 "
                         "YAML") from None



def _validated(model, raw: dict, path: Path):
    if not isinstance(raw, dict):
        raise InputError(f"table spec {path}: it must hold a mapping (name:, attributes:, ...), not a list or a "
                         "scalar. Fix: start from `privehr spec draft TABLE.csv`")
    try:
        return model.model_validate(raw)
    except ValueError as err:
        raise settings_error(err, f"table spec {path}", raw) from None


def load_mimic_spec(path: str | Path | None = None) -> MimicExtractSpec:
    """The MIMIC-Extract spec, with its per-variable CSV (columns as in ``mimic_vitals_labs.csv``)."""
    path = Path(path) if path else SPEC_DIR / "mimic_extract.yaml"
    raw = _read_yaml(path)
    table = pd.read_csv(path.parent / raw.get("vitals_labs", {}).get("variables", "mimic_vitals_labs.csv"),
                        keep_default_na=False, na_values=[""])
    rows = table.rename(columns={"variable": "name"})
    raw["variables"] = [{k: (None if pd.isna(v) else v) for k, v in r.items()}
                        for r in rows.astype(object).to_dict("records")]
    for r in raw["variables"]:
        r["unit"], r["source"] = r.get("unit") or "", r.get("source") or ""
    return _validated(MimicExtractSpec, raw, path)


def load_ehr_spec(name_or_path: str | Path) -> EHRTableSpec:
    """An EHR table spec by name (``harrod_ehr``) or path."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = SPEC_DIR / f"{name_or_path}.yaml"
    spec = _validated(EHRTableSpec, _read_yaml(path), path)
    spec._source = path
    return spec
