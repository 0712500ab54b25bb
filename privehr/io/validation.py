"""Validate a delivery with Great Expectations before anything is trained; quarantine suspect rows.

For an ``all_hourly_data.h5``: ``patients`` is validated as is; ``vitals_labs`` (5.5 GB in full) is
streamed once in row chunks into a per-variable profile and a per-stay key table, which the GX suites
check; ``interventions`` likewise into a per-column profile. For a small EHR table: the records as
read through its spec. Outputs, all under the run directory (raw inputs are only read):

* ``validation/<delivery>/validation.json`` (counts, failed expectations, quarantine counts),
* ``validation/<delivery>/gx/uncommitted/data_docs/local_site/index.html`` (Data Docs of every suite),
* ``quarantine/<delivery>/<table>.csv``: one row per suspect record or value, with its reason,
* ``quarantine/<delivery>/excluded_stays.csv``: stays the cohort must leave out (MIMIC-Extract).

``<delivery>`` is the input file's name without its suffix.

GX runs with result formats that carry counts, not patient values (``partial_unexpected_count: 0``
for record-level suites; profile suites list variable names only).
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
from pathlib import Path

import great_expectations as gx
import h5py
import numpy as np
import pandas as pd

from privehr.models.data import quarantine as q
from privehr.models.data.hourly_profile import VariableProfile, stay_keys
from privehr.core.errors import InputError
from privehr.core.specs import EHRTableSpec, MimicExtractSpec
from privehr.io.ehr_table import EHRTable, read_ehr_table
from privehr.io.data_docs_offline import make_offline
from privehr.io.expectation_suites import ehr_suite_for, read_suite, suite_names
from privehr.io.hdf5_fixed import FixedFrame
from privehr.io.mimic_extract import _vitals_columns, check_extract, read_patients
from privehr.io.spreadsheet import spreadsheet_safe
from privehr.io.pages import SHARED_ASSETS
from privehr.core.run_layout import RunLayout

__all__ = ["ValidationFailed", "validate_extract", "validate_ehr", "run_suites", "output_dirs", "failure_message",
           "EXCLUDED_STAYS"]

EXCLUDED_STAYS = "excluded_stays.csv"
HOURLY_IDS = ["subject_id", "hadm_id", "icustay_id", "hours_in"]


class ValidationFailed(InputError):
    """A critical expectation failed: the delivery is not fit for training."""


def _result_format(suite) -> dict:
    meta = suite.meta or {}
    if meta.get("result_format") == "COMPLETE":
        return {"result_format": "COMPLETE", "unexpected_index_column_names": [meta["index_column"]],
                "partial_unexpected_count": 0}
    return {"result_format": "BASIC", "partial_unexpected_count": 0}


def _observed(result: dict, index_column: str | None) -> str:
    if "observed_value" in result:
        value = result["observed_value"]
        return json.dumps(value) if not isinstance(value, str) else value
    if index_column and result.get("unexpected_index_list"):
        names = [str(r[index_column]) for r in result["unexpected_index_list"]]
        return f"{len(names)} {index_column}(s): " + ", ".join(names[:10]) + (" ..." if len(names) > 10 else "")
    if "unexpected_count" in result:
        return (f"{result['unexpected_count']} of {result.get('element_count', '?')} rows "
                f"({result.get('unexpected_percent') or 0:.3g} %)")
    return ""


def run_suites(frames: dict[str, pd.DataFrame], gx_dir: Path,
               suites: dict[str, gx.ExpectationSuite] | None = None,
               assets_dir: Path | None = None) -> tuple[list[dict], str]:
    """Validate each frame with the suite of the same name (from ``suites``, else the stored one); return one row per
    expectation and the Data Docs index path. With ``assets_dir`` (the artifacts directory), the Data Docs link
    its one shared copy of GX's static assets (:func:`share_static_assets`)."""
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    ctx = gx.get_context(mode="file", project_root_dir=str(gx_dir))
    ctx.variables.progress_bars = {"globally": False}
    source = ctx.data_sources.add_or_update_pandas("privehr")
    rows = []
    for name, frame in frames.items():
        suite = ctx.suites.add_or_update((suites or {}).get(name) or read_suite(name))
        asset = source.add_dataframe_asset(name) if name not in source.get_asset_names() else source.get_asset(name)
        batch = asset.add_batch_definition_whole_dataframe(f"{name}.whole")
        definition = ctx.validation_definitions.add_or_update(
            gx.ValidationDefinition(name=f"{name}.validation", data=batch, suite=suite))
        checkpoint = ctx.checkpoints.add_or_update(gx.Checkpoint(
            name=f"{name}.checkpoint", validation_definitions=[definition],
            actions=[gx.checkpoint.UpdateDataDocsAction(name="data_docs")], result_format=_result_format(suite)))
        outcome = checkpoint.run(batch_parameters={"dataframe": frame})
        index_column = (suite.meta or {}).get("index_column")
        for run in outcome.run_results.values():
            for r in run.results:
                config = r.expectation_config
                meta = config.meta or {}
                rows.append({"suite": name, "table": (suite.meta or {}).get("table", name),
                             "expectation": config.type, "column": config.kwargs.get("column", ""),
                             "severity": meta.get("severity", "critical"), "success": bool(r.success),
                             "observed": _observed(r.result or {}, index_column),
                             "rule": meta.get("rule", ""), "fix": meta.get("fix", "")})
    site = Path(gx_dir) / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"
    make_offline(site.parent)  # no CDN, no logo fetched with the context's id; the index's list drawn as HTML
    if assets_dir is not None:
        share_static_assets(site.parent, Path(assets_dir))
    return rows, str(site)


def artifacts_root(run_dir: str | Path) -> Path | None:
    """The artifacts directory above a run directory (a synthesis subflow's run is inside its pipeline run); None
    where ``run_dir`` is no run directory (no provenance.json)."""
    run = Path(run_dir)
    if not RunLayout(run).provenance.exists():
        return None
    while RunLayout(run.parent).provenance.exists():
        run = run.parent
    return run.parent


_STATIC_LINK = re.compile(r"""(?P<quote>["'(])(?P<up>(?:\.\.?/)*)static/""")


def share_static_assets(site: Path, artifacts: Path) -> Path:
    """Keep one copy of Great Expectations' images, fonts and styles (3.6 MB) per artifacts directory,
    ``<artifacts>/_static/gx-<version>/``, instead of one per validation: the site's ``static/`` is removed and its
    pages link the shared copy (relative links, so they open from disk and under ``privehr serve`` alike)."""
    static = site / "static"
    shared = artifacts / SHARED_ASSETS / f"gx-{gx.__version__}"
    if not static.is_dir():
        return shared
    if not shared.is_dir():  # copied aside, then renamed: two runs at once leave one whole copy
        shared.parent.mkdir(parents=True, exist_ok=True)
        partial = shared.parent / f".{shared.name}-{secrets.token_hex(4)}"
        shutil.copytree(static, partial)
        try:
            os.rename(partial, shared)
        except OSError:
            shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(static)
    for page in site.rglob("*.html"):
        text = page.read_text()

        def relink(match, page=page):
            if (page.parent / match["up"]).resolve() != site.resolve():
                return match[0]  # not the site's static/ folder
            return match["quote"] + os.path.relpath(shared, page.parent) + "/"

        page.write_text(_STATIC_LINK.sub(relink, text))
    return shared


def _quarantine_patients(patients: pd.DataFrame, spec: MimicExtractSpec) -> pd.DataFrame:
    p = spec.patients
    ids = p.id_columns
    parts = [q.missing_ids(patients, ids), q.duplicate_keys(patients, ["icustay_id"], ids)]
    parts += [q.outside_domain(patients, label, [0, 1], ids) for label in p.labels if label in patients]
    parts.append(q.below(patients, "age", p.age_min, ids, f"age below {p.age_min:g}"))
    parts.append(q.outside_range(patients["los_icu"] * 24, p.stay_hours.min, p.stay_hours.max, patients[ids],
                                 "los_icu", f"stay length outside {p.stay_hours.min:g}-{p.stay_hours.max:g} h"))
    return q.combine(parts, ids)


def _profile_vitals(h5: h5py.File, path, spec: MimicExtractSpec, patient_stays, chunk_rows: int):
    frame = FixedFrame(h5, "vitals_labs")
    variables, _, mean_cols = _vitals_columns(frame, path)
    order = np.argsort(mean_cols)
    ids = {name: frame.index_level(name) for name in HOURLY_IDS}
    profile = VariableProfile(variables, spec.bounds())
    beyond_parts = []
    names = np.array(variables, dtype=object)
    for start in range(0, frame.nrows, chunk_rows):
        stop = min(start + chunk_rows, frame.nrows)
        means = np.empty((stop - start, len(variables)))
        means[:, order] = frame.read_rows(start, stop, mean_cols[order])
        beyond = profile.update(means)
        if beyond.any():
            r, c = np.nonzero(beyond)
            part = pd.DataFrame({k: v[start + r] for k, v in ids.items()})
            part["column"], part["value"] = names[c], means[r, c]
            part["reason"] = "beyond outlier bounds (value treated as missing)"
            beyond_parts.append(part)
    keys = stay_keys(ids["icustay_id"], ids["hours_in"], patient_stays)
    bad = keys[(keys["first_hour"] != 0) | ~keys["contiguous"] | (keys["duplicate_rows"] > 0)]
    reasons = np.where(bad["duplicate_rows"] > 0, "duplicate (stay, hours_in) rows",
                       np.where(bad["first_hour"] != 0, "hours_in does not start at 0", "hours_in has gaps"))
    key_part = pd.DataFrame({"icustay_id": bad["icustay_id"].to_numpy(), "column": "hours_in", "value": None,
                             "reason": reasons})
    quarantine = pd.concat([*beyond_parts, key_part], ignore_index=True) if beyond_parts or len(key_part) \
        else pd.DataFrame(columns=HOURLY_IDS + q.QUARANTINE_COLUMNS)
    return profile.frame(), keys, quarantine, int(frame.nrows)


def _profile_interventions(h5: h5py.File, spec: MimicExtractSpec, chunk_rows: int) -> pd.DataFrame:
    wanted = spec.interventions.columns
    if "interventions" not in h5:
        return pd.DataFrame({"column": wanted, "present": False, "in_spec": True, "nonnull_fraction": np.nan,
                             "fraction_in_domain": np.nan})
    frame = FixedFrame(h5, "interventions")
    columns = [str(c) for c in frame.columns]
    nonnull, in_domain = np.zeros(len(columns)), np.zeros(len(columns))
    for start in range(0, frame.nrows, chunk_rows):
        values = frame.read_rows(start, min(start + chunk_rows, frame.nrows))
        nonnull += (~np.isnan(values)).sum(0)
        in_domain += np.isin(values, spec.interventions.domain).sum(0)
    rows = max(frame.nrows, 1)
    found = pd.DataFrame({"column": columns, "present": True, "in_spec": [c in wanted for c in columns],
                          "nonnull_fraction": nonnull / rows, "fraction_in_domain": in_domain / np.maximum(nonnull, 1)})
    absent = pd.DataFrame({"column": [c for c in wanted if c not in columns], "present": False, "in_spec": True,
                           "nonnull_fraction": np.nan, "fraction_in_domain": np.nan})
    return pd.concat([found, absent], ignore_index=True)


def output_dirs(run_dir: str | Path, path: str | Path) -> tuple[Path, Path]:
    """(validation dir, quarantine dir) of one delivery in a run directory."""
    name = Path(path).stem
    return RunLayout(run_dir).validation(name)


def _write_outputs(dirs: tuple[Path, Path], rows: list[dict], docs: str, quarantine: dict[str, pd.DataFrame],
                   summary: dict) -> dict:
    val_dir, q_dir = dirs
    q_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for table, frame in quarantine.items():
        frame = q.tidy(frame)
        spreadsheet_safe(frame).to_csv(q_dir / f"{table}.csv", index=False)  # a steward opens it in a spreadsheet
        counts[table] = {"rows": int(len(frame)),
                         "by_reason": {str(k): int(v) for k, v in frame["reason"].value_counts().items()}}
    failed = [r for r in rows if not r["success"]]
    summary.update({
        "passed": not any(r["severity"] == "critical" for r in failed),
        "expectations": len(rows), "failed_critical": [r for r in failed if r["severity"] == "critical"],
        "failed_warning": [r for r in failed if r["severity"] != "critical"],
        "quarantine": counts, "quarantine_dir": str(q_dir), "data_docs": docs})
    (val_dir / "validation.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


def _quarantined_share(patients: pd.DataFrame, stay_level: pd.DataFrame, excluded: int,
                       spec: MimicExtractSpec) -> list[dict]:
    """A critical row when more than the spec's share of stays is quarantined: one systematic cause (labels
    delivered as text, a cohort rule no stay meets) is named with its fix, instead of an empty cohort later."""
    limit, stays = spec.patients.max_quarantined_share, len(patients)
    if not stays or excluded <= limit * stays:
        return []
    counts = stay_level.drop_duplicates(["icustay_id", "reason"])["reason"].value_counts()  # stays, not rows
    reason, count = counts.index[0], int(counts.iloc[0])
    text_labels = [c for c in spec.patients.labels
                   if c in patients and not pd.api.types.is_numeric_dtype(patients[c])]
    if text_labels and "label" in reason:
        fix = (f"the label column(s) {', '.join(text_labels)} hold text, not numbers; deliver them as integers 0/1 "
               "(MIMIC-Extract stores them as int64)")
    else:
        fix = (f"the most frequent reason, '{reason}', applies to {count} of {stays} stays; correct the delivery "
               "or the spec's rule (see the quarantine files)")
    return [{"suite": "patients", "table": "patients", "expectation": "share_of_stays_quarantined", "column": "",
             "severity": "critical", "success": False, "observed": f"{excluded} of {stays} stays quarantined",
             "rule": f"at most {limit:.0%} of the delivery's stays may be quarantined", "fix": fix}]


def validate_extract(hdf5_path: str | Path, run_dir: str | Path, spec: MimicExtractSpec,
                     chunk_rows: int = 65536) -> dict:
    """Validate an ``all_hourly_data.h5``; write reports and quarantine; return the summary (no rows)."""
    dirs = output_dirs(run_dir, hdf5_path)
    dirs[0].mkdir(parents=True, exist_ok=True)
    keys = check_extract(hdf5_path)
    patients = read_patients(hdf5_path).reset_index()
    with h5py.File(hdf5_path, "r") as h5:
        variables, stays, hourly_q, hourly_rows = _profile_vitals(h5, hdf5_path, spec,
                                                                  patients["icustay_id"].to_numpy(), chunk_rows)
        interventions = _profile_interventions(h5, spec, chunk_rows)
    names = suite_names(spec)
    rows, docs = run_suites(dict(zip(names, [patients, variables, stays, interventions])), dirs[0],
                            assets_dir=artifacts_root(run_dir))
    patients_q = _quarantine_patients(patients, spec)
    stay_level = pd.concat([patients_q[["icustay_id", "reason"]],
                            hourly_q.loc[hourly_q["column"] == "hours_in", ["icustay_id", "reason"]]])
    stay_level = stay_level.dropna(subset=["icustay_id"]).astype({"icustay_id": "int64"})
    excluded = stay_level.groupby("icustay_id")["reason"].agg(q.join_reasons)
    rows.extend(_quarantined_share(patients, stay_level, len(excluded), spec))
    quarantine = {"patients": patients_q, "vitals_labs": hourly_q}
    summary = _write_outputs(dirs, rows, docs, quarantine, {
        "input": str(hdf5_path), "kind": "mimic_extract", "keys": keys, "stays": int(len(patients)),
        "hourly_rows": hourly_rows, "variables": int(len(variables)),
        "values_beyond_outlier": int((hourly_q["column"] != "hours_in").sum()),
        "excluded_stays": int(len(excluded))})
    # data: the cohort task reads it back (stay ids, and reasons this module writes); not escaped for a spreadsheet
    excluded.rename("reason").reset_index().to_csv(dirs[1] / EXCLUDED_STAYS, index=False)
    return summary


def validate_ehr(path: str | Path, run_dir: str | Path, spec: EHRTableSpec) -> tuple[dict, EHRTable]:
    """Validate a small EHR table through its spec; write reports and quarantine; return them and the table."""
    dirs = output_dirs(run_dir, path)
    dirs[0].mkdir(parents=True, exist_ok=True)
    table = read_ehr_table(path, spec)
    suite, suite_source = ehr_suite_for(spec)
    rows, docs = run_suites({spec.name: table.parsed}, dirs[0], {spec.name: suite}, artifacts_root(run_dir))
    summary = _write_outputs(dirs, rows, docs, {spec.name: table.quarantine}, {
        "input": str(path), "kind": "ehr_table", "spec": spec.name, "suite": suite_source, **table.decisions})
    return summary, table


def failure_message(summary: dict) -> str:
    lines = [f"validation of {summary['input']} failed: {len(summary['failed_critical'])} critical expectation(s)"]
    lines += [f"  - {r['table']}: {r['rule']} (observed: {r['observed']}). Fix: {r['fix']}."
              for r in summary["failed_critical"]]
    lines.append(f"Data Docs: {summary['data_docs']}")
    return "\n".join(lines)

