"""Report: the run's metrics as ``metrics.json``, a Markdown results table, and Prefect artifacts."""

from __future__ import annotations

import json
from pathlib import Path

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.context import get_run_context
from prefect.exceptions import MissingContextError

__all__ = ["write_report", "results_table"]

COLUMNS = ["label", "model", "method", "auroc", "auprc", "n", "positives"]


def results_table(metrics: list[dict]) -> str:
    """Markdown table of test metrics, one row per (label, model, method)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for m in metrics:
        cells = [f"{m[c]:.3f}" if isinstance(m.get(c), float) else str(m.get(c, "")) for c in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _in_prefect_run() -> bool:
    try:
        get_run_context()
        return True
    except MissingContextError:
        return False


@task(name="report")
def write_report(run_dir: str, metrics: list[dict]) -> dict:
    """Write ``metrics.json`` and ``results.md``; publish them as Prefect artifacts inside a run."""
    run_dir = Path(run_dir)
    cohort = json.loads((run_dir / "cohort.json").read_text())
    split = json.loads((run_dir / "split_manifest.json").read_text())["counts"]
    summary = {"run_id": run_dir.name, "run_dir": str(run_dir), "results": metrics,
               "cohort": {"stays": cohort["stays"], "label_rates": cohort["label_rates"],
                          "exclusions": cohort["exclusions"]},
               "split": split}
    (run_dir / "metrics.json").write_text(json.dumps(summary, indent=2))
    table = results_table(metrics)
    markdown = (f"# privehr run {run_dir.name}\n\nTest-split metrics (non-private baselines).\n\n{table}\n\n"
                f"Cohort: {cohort['stays']} stays; exclusions {cohort['exclusions']}. "
                f"Split (stays): train {split['train']['stays']}, dev {split['dev']['stays']}, "
                f"test {split['test']['stays']}.\n\nArtifacts: `{run_dir}`\n")
    (run_dir / "results.md").write_text(markdown)
    if _in_prefect_run():
        key = "privehr-results"
        create_table_artifact([{c: m.get(c) for c in COLUMNS} for m in metrics], key=key,
                              description=f"Test metrics of run {run_dir.name}")
        create_markdown_artifact(markdown, key="privehr-run-summary", description=f"Run {run_dir.name}")
    return summary
