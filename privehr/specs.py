"""Steward-editable table specs (``expectations/specs/``), typed.

A spec says what a delivered table must look like: columns, keys, label domains, per-variable units
and bounds. ``privehr expectations build`` turns the specs into Great Expectations suites; the
loaders and the quarantine read the same specs, so a steward edits one place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from privehr.errors import InputError

__all__ = ["SPEC_DIR", "VariableBounds", "MimicExtractSpec", "EHRTableSpec", "DerivedColumn",
           "load_mimic_spec", "load_ehr_spec"]

SPEC_DIR = Path(__file__).resolve().parent.parent / "expectations" / "specs"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VariableBounds(_Strict):
    """One variable: unit, valid range [valid_low, valid_high] and outlier bounds beyond it."""

    name: str
    unit: str = ""
    description: str = ""
    valid_low: float | None = None
    valid_high: float | None = None
    outlier_low: float | None = None
    outlier_high: float | None = None
    min_nonnull_fraction: float = Field(0.0, ge=0, le=1)
    source: str = ""

    @model_validator(mode="after")
    def _ordered(self):
        bounds = [b for b in (self.outlier_low, self.valid_low, self.valid_high, self.outlier_high) if b is not None]
        if bounds != sorted(bounds):
            raise ValueError(f"bounds of {self.name!r} must satisfy outlier_low <= valid_low <= valid_high "
                             f"<= outlier_high")
        return self


class StayHours(_Strict):
    min: float = 12
    max: float = 240


class PatientsSpec(_Strict):
    id_columns: list[str]
    columns: list[str]
    optional_columns: list[str] = []
    labels: list[str]
    age_min: float = 15
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
    """A column computed from others by a pandas expression, e.g. ``2 / 3 * a + 1 / 3 * b``."""

    name: str
    expression: str
    unit: str = ""


class EHRTableSpec(_Strict):
    """A small EHR table: layout, ids, attributes with bounds, missingness rule, derived columns."""

    name: str
    description: str = ""
    file: FileLayout = FileLayout()
    id_column: str | None = None
    id_prefix: str = "row-"
    drop_attributes_missing_in_more_than: int | None = None
    min_rows: int = 1
    public_patient_count: bool = Field(
        False, description="the number of patients is public (e.g. published with the data): release records and "
                           "synthetic tables may carry it exactly; otherwise tables are sized by a noisy count")
    attributes: list[VariableBounds]
    derived: list[DerivedColumn] = []

    def bounds(self) -> dict[str, VariableBounds]:
        return {a.name: a for a in self.attributes}


def _read_yaml(path: Path) -> dict:
    if not path.exists():
        raise InputError(f"table spec not found: {path}. Specs live in {SPEC_DIR}; pass --spec PATH.")
    try:
        return yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise InputError(f"table spec {path} is not valid YAML: {err}") from None


def _validated(model, raw: dict, path: Path):
    try:
        return model.model_validate(raw)
    except ValueError as err:
        raise InputError(f"table spec {path} is invalid:\n{err}") from None


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
    return _validated(EHRTableSpec, _read_yaml(path), path)
