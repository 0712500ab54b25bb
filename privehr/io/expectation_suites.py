"""Great Expectations suites generated from the steward specs, stored as JSON in ``expectations/``.

Each expectation carries ``meta.severity``: ``critical`` failures stop the pipeline before training,
``warning`` failures are reported (their rows are quarantined where rows can be isolated). The hourly
table is validated through two small frames streamed from it (one row per variable, one per stay),
because GX's pandas engine is slow on frames hundreds of columns wide.
"""

from __future__ import annotations

import json
from pathlib import Path

import great_expectations as gx
import great_expectations.expectations as gxe

from privehr.core.specs import EXPECTATIONS_DIR, EHRTableSpec, MimicExtractSpec

__all__ = ["EXPECTATIONS_DIR", "mimic_suites", "ehr_suite", "write_suites", "read_suite", "suite_names",
           "ehr_suite_for"]

CRITICAL, WARNING = "critical", "warning"


def _meta(severity: str, rule: str, fix: str) -> dict:
    return {"severity": severity, "rule": rule, "fix": fix}


def _patients(spec: MimicExtractSpec) -> gx.ExpectationSuite:
    p = spec.patients
    required = p.id_columns + p.columns
    e = [gxe.ExpectTableColumnsToMatchSet(column_set=required, exact_match=False, meta=_meta(
            CRITICAL, "every required patients column is present", "deliver MIMIC-Extract's patients table")),
         gxe.ExpectTableColumnCountToBeBetween(min_value=len(required), max_value=len(required) +
                                               len(p.optional_columns), meta=_meta(
            CRITICAL, f"no column beyond the spec (optional: {p.optional_columns})",
            "remove unknown columns or add them to expectations/specs/mimic_extract.yaml")),
         gxe.ExpectTableRowCountToBeBetween(min_value=p.min_rows, meta=_meta(
            CRITICAL, f"at least {p.min_rows} stay(s)", "deliver a non-empty patients table"))]
    e += [gxe.ExpectColumnValuesToNotBeNull(column=c, meta=_meta(WARNING, f"{c} present", "stays quarantined"))
          for c in p.id_columns]
    e.append(gxe.ExpectColumnValuesToBeUnique(column="icustay_id", meta=_meta(
        WARNING, "one row per ICU stay", "duplicate stays are quarantined")))
    for label in p.labels:
        e.append(gxe.ExpectColumnValuesToBeInSet(column=label, value_set=[0, 1], meta=_meta(
            WARNING, f"{label} in {{0, 1}}", "stays with other values are quarantined")))
        e.append(gxe.ExpectColumnValuesToNotBeNull(column=label, meta=_meta(
            WARNING, f"{label} present", "stays with a missing label are quarantined")))
    e.append(gxe.ExpectColumnValuesToBeBetween(column="age", min_value=p.age_min, meta=_meta(
        WARNING, f"adults: age >= {p.age_min}", "younger patients are quarantined")))
    e.append(gxe.ExpectColumnValuesToBeBetween(
        column="los_icu", min_value=p.stay_hours.min / 24, max_value=p.stay_hours.max / 24, meta=_meta(
            WARNING, f"stay length {p.stay_hours.min:g}-{p.stay_hours.max:g} h (los_icu in days)",
            "stays outside are quarantined")))
    return gx.ExpectationSuite(name=f"{spec.name}_patients", expectations=e,
                               meta={"table": "patients", "result_format": "BASIC"})


def _vitals_variables(spec: MimicExtractSpec) -> gx.ExpectationSuite:
    limit = spec.vitals_labs.max_fraction_beyond_outlier
    e = [gxe.ExpectTableRowCountToBeBetween(min_value=1, meta=_meta(
            CRITICAL, "at least one LEVEL2 variable", "deliver vitals_labs with its (LEVEL2, Aggregation "
                                                      "Function) columns")),
         gxe.ExpectColumnValuesToBeInSet(column="mean_in_valid_range", value_set=[True], meta=_meta(
             CRITICAL, "each variable's mean lies in its valid range (its unit is the spec's)",
             "convert the variable to the spec's unit (e.g. temperature in degC, not degF)")),
         gxe.ExpectColumnValuesToBeBetween(column="fraction_beyond_outlier", max_value=limit, meta=_meta(
             CRITICAL, f"at most {limit:.1%} of a variable's values beyond its outlier bounds",
             "check the variable's unit and source; MIMIC-Extract removes such values")),
         gxe.ExpectColumnValuesToBeInSet(column="in_spec", value_set=[True], meta=_meta(
             WARNING, "every variable is defined in the spec", "add it to expectations/specs/mimic_vitals_labs.csv")),
         gxe.ExpectColumnPairValuesAToBeGreaterThanB(
             column_A="nonnull_fraction", column_B="min_nonnull_fraction", or_equal=True, meta=_meta(
                 WARNING, "each variable is observed at least as often as the spec expects",
                 "check the delivery for a lost source table"))]
    return gx.ExpectationSuite(name=f"{spec.name}_vitals_labs_variables", expectations=e,
                               meta={"table": "vitals_labs (one row per variable)", "result_format": "COMPLETE",
                                     "index_column": "variable"})


def _vitals_stays(spec: MimicExtractSpec) -> gx.ExpectationSuite:
    e = [gxe.ExpectTableRowCountToBeBetween(min_value=1, meta=_meta(
            CRITICAL, "hourly rows for at least one stay", "deliver a non-empty vitals_labs")),
         gxe.ExpectColumnValuesToBeInSet(column="first_hour", value_set=[0], meta=_meta(
             WARNING, "hours_in starts at 0 for every stay", "such stays are quarantined")),
         gxe.ExpectColumnValuesToBeInSet(column="contiguous", value_set=[True], meta=_meta(
             WARNING, "hours_in runs without gaps", "such stays are quarantined")),
         gxe.ExpectColumnValuesToBeBetween(column="duplicate_rows", max_value=0, meta=_meta(
             WARNING, "one row per (subject_id, hadm_id, icustay_id, hours_in)", "such stays are quarantined")),
         gxe.ExpectColumnValuesToBeInSet(column="in_patients", value_set=[True], meta=_meta(
             WARNING, "every hourly stay has a patients row", "such stays cannot enter the cohort"))]
    return gx.ExpectationSuite(name=f"{spec.name}_vitals_labs_stays", expectations=e,
                               meta={"table": "vitals_labs (one row per stay)", "result_format": "BASIC"})


def _interventions(spec: MimicExtractSpec) -> gx.ExpectationSuite:
    domain = spec.interventions.domain
    e = [gxe.ExpectColumnValuesToBeInSet(column="present", value_set=[True], meta=_meta(
            CRITICAL, "every intervention column of the spec is present", "deliver MIMIC-Extract's interventions")),
         gxe.ExpectColumnValuesToBeInSet(column="in_spec", value_set=[True], meta=_meta(
             WARNING, "no intervention column beyond the spec", "add it to expectations/specs/mimic_extract.yaml")),
         gxe.ExpectColumnValuesToBeBetween(column="fraction_in_domain", min_value=1.0, meta=_meta(
             WARNING, f"interventions are indicators in {domain}", "check the delivery"))]
    return gx.ExpectationSuite(name=f"{spec.name}_interventions", expectations=e,
                               meta={"table": "interventions (one row per column)", "result_format": "COMPLETE",
                                     "index_column": "column"})


def mimic_suites(spec: MimicExtractSpec) -> list[gx.ExpectationSuite]:
    return [_patients(spec), _vitals_variables(spec), _vitals_stays(spec), _interventions(spec)]


def ehr_suite(spec: EHRTableSpec) -> gx.ExpectationSuite:
    """Suite of a small EHR table, validated on the records as read (numbers, before quarantine)."""
    columns = ["patient_id"] + list(spec.bounds())
    e = [gxe.ExpectTableColumnsToMatchSet(column_set=columns, exact_match=True, meta=_meta(
            CRITICAL, "the spec's attributes, no others", f"edit the spec {spec.name} or the file")),
         gxe.ExpectTableRowCountToBeBetween(min_value=spec.min_rows, meta=_meta(
             CRITICAL, f"at least {spec.min_rows} records", "deliver the whole table")),
         gxe.ExpectColumnValuesToNotBeNull(column="patient_id", meta=_meta(
             WARNING, "every record has an id", "records without one are quarantined")),
         gxe.ExpectColumnValuesToBeUnique(column="patient_id", meta=_meta(
             WARNING, "ids are unique", "duplicated records are quarantined"))]
    for a in spec.attributes:
        if a.discrete:  # held as codes 0..k-1; a token that is no category is NaN here and quarantined
            e.append(gxe.ExpectColumnValuesToBeInSet(column=a.name, value_set=list(range(len(a.levels))), meta=_meta(
                WARNING, f"{a.name} is one of its {len(a.levels)} categories ({a.kind})",
                "other tokens are quarantined and treated as missing")))
        elif a.valid_low is not None or a.valid_high is not None:
            shown = lambda b: "-inf" if b is None else f"{b:g}"  # noqa: E731  (an open side)
            e.append(gxe.ExpectColumnValuesToBeBetween(
                column=a.name, min_value=a.valid_low, max_value=a.valid_high,
                meta=_meta(WARNING, f"{a.name} within physiological bounds [{shown(a.valid_low)}, "
                           f"{shown(a.valid_high).replace('-inf', 'inf')}] {a.unit}".rstrip(),
                           "values beyond are quarantined and treated as missing")))
    return gx.ExpectationSuite(name=spec.name, expectations=e, meta={"table": spec.name, "result_format": "BASIC"})


def _json(suite: gx.ExpectationSuite) -> dict:
    """Deterministic JSON (no random ids) so a regenerated suite diffs cleanly in review."""
    d = suite.to_json_dict()
    d.pop("id", None)
    for e in d["expectations"]:
        e.pop("id", None)
    return d


def write_suites(suites: list[gx.ExpectationSuite], out_dir: Path = EXPECTATIONS_DIR) -> list[str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for suite in suites:
        path = out_dir / f"{suite.name}.json"
        path.write_text(json.dumps(_json(suite), indent=2, sort_keys=True) + "\n")
        paths.append(str(path))
    return paths


def read_suite(name: str, directory: Path = EXPECTATIONS_DIR) -> gx.ExpectationSuite:
    path = directory / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"suite {path} not found; run `privehr expectations build`")
    return gx.ExpectationSuite(**json.loads(path.read_text()))


def ehr_suite_for(spec: EHRTableSpec) -> tuple[gx.ExpectationSuite, str]:
    """(suite, where it came from) for validating a table of ``spec``: a bundled spec's reviewed suite in
    expectations/; for a user's spec file the suite written beside it by ``privehr expectations build --spec``,
    else the suite built from the spec now (the same expectations ``build`` would write)."""
    if spec.bundled:
        return read_suite(spec.name), str(EXPECTATIONS_DIR / f"{spec.name}.json")
    beside = spec.source.parent / f"{spec.name}.json" if spec.source is not None else None
    if beside is not None and beside.exists():
        return read_suite(spec.name, beside.parent), str(beside)
    return ehr_suite(spec), "built from the spec at validation time"


def suite_names(spec) -> list[str]:
    return [s.name for s in (mimic_suites(spec) if isinstance(spec, MimicExtractSpec) else [ehr_suite(spec)])]
