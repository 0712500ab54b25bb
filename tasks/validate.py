"""The validation gate as Prefect tasks: validate, publish the steward's artifacts, stop on critical.

Artifacts (counts and rules only, never patient values): a markdown summary, a table of failed
expectations (table, expectation, severity, observed, fix) and a link to the Data Docs page.
"""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

from privehr.core.specs import load_ehr_spec, load_mimic_spec
from privehr.io.pages import page_url
from privehr.tasks.run_logging import exact, publishes_artifacts, run_logger
from privehr.io.validation import ValidationFailed, failure_message, output_dirs, validate_ehr, validate_extract

__all__ = ["validate_delivery", "summary_markdown", "is_hdf5"]


def is_hdf5(path: str | Path) -> bool:
    return Path(path).suffix.lower() in (".h5", ".hdf5", ".hdf")


def summary_markdown(summary: dict) -> str:
    verdict = "passed" if summary["passed"] else "FAILED (critical)"
    lines = [f"# Validation of `{Path(summary['input']).name}`: {verdict}", "",
             f"- expectations evaluated: {summary['expectations']}; failed critical: "
             f"{len(summary['failed_critical'])}; failed warnings: {len(summary['failed_warning'])}"]
    for key in ("stays", "hourly_rows", "variables", "excluded_stays", "values_beyond_outlier", "records_read",
                "records_kept", "attributes_read", "attributes_kept"):
        if key in summary:
            lines.append(f"- {key.replace('_', ' ')}: {summary[key]}")
    if summary.get("dropped_attributes"):
        lines.append(f"- attributes the missingness rule drops on the whole delivery ({summary['drop_rule']}; "
                     "training decides it on its own patients): "
                     + ", ".join(f"{k} ({v} missing)" for k, v in summary["dropped_attributes"].items()))
    for table, counts in summary["quarantine"].items():
        reasons = "; ".join(f"{r}: {n}" for r, n in counts["by_reason"].items()) or "none"
        lines.append(f"- {Path(summary['quarantine_dir']) / (table + '.csv')}: {counts['rows']} row(s) ({reasons})")
    failed = summary["failed_critical"] + summary["failed_warning"]
    if failed:
        lines += ["", "| table | severity | rule | observed | fix |", "|---|---|---|---|---|"]
        lines += [f"| {r['table']} | {r['severity']} | {r['rule']} | {r['observed']} | {r['fix']} |" for r in failed]
    lines += ["", f"Data Docs: `{summary['data_docs']}`"]
    return "\n".join(lines)


def _publish(summary: dict, run_dir: str, pages_url: str | None) -> None:
    if not publishes_artifacts():
        return
    create_markdown_artifact(summary_markdown(summary), description="validation summary")
    failed = summary["failed_critical"] + summary["failed_warning"]
    create_table_artifact([{k: r[k] for k in ("table", "expectation", "column", "severity", "observed", "fix")}
                           for r in failed] or [{"table": "", "expectation": "none failed", "column": "",
                                                 "severity": "", "observed": "", "fix": ""}],
                          description="failed expectations")
    create_link_artifact(page_url(summary["data_docs"], Path(run_dir).parent, pages_url), link_text="Data Docs",
                         description="Great Expectations Data Docs of this validation"
                                     + (f" (served at {pages_url} by `privehr serve`)" if pages_url else ""))


@task(name="validate")
def validate_delivery(path: str, run_dir: str, ehr_spec: str = "harrod_ehr", mimic_spec: str | None = None,
                      stop_on_critical: bool = True, chunk_rows: int = 65536, pages_url: str | None = None) -> str:
    """Validate one delivery (HDF5 -> MIMIC-Extract suites, CSV -> its EHR spec); return validation.json's
    path. Raises ``ValidationFailed`` (after writing every report) when a critical expectation fails. The
    Data Docs link points under ``pages_url`` (``PagesConfig.base_url``) when given, else at the file."""
    if is_hdf5(path):
        summary = validate_extract(path, run_dir, load_mimic_spec(mimic_spec), chunk_rows)
    else:
        spec = load_ehr_spec(ehr_spec)
        summary, _ = validate_ehr(path, run_dir, spec)
    _publish(summary, run_dir, pages_url)
    quarantined = sum(c["rows"] for c in summary["quarantine"].values())
    run_logger().info("validate %s: %d expectations, %d critical and %d warning failures, %s quarantined rows",
                      Path(path).name, summary["expectations"], len(summary["failed_critical"]),
                      len(summary["failed_warning"]), exact(quarantined))
    if not summary["passed"] and stop_on_critical:
        raise ValidationFailed(failure_message(summary))
    return str(output_dirs(run_dir, path)[0] / "validation.json")
