"""Synthesis report: seed-002-style utility tables, fidelity, the releases and what they cost.

Files in the synthesis run directory: ``results.csv`` (one row per synthetic table),
``report.md``, ``utility_vs_budget.png``, ``marginals.png``; the same as Prefect artifacts.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from privehr.specs import load_ehr_spec
from tasks.figures import plot_marginals, plot_synthesis_utility
from tasks.run_directory import INTERMEDIATE
from tasks.run_logging import in_prefect_run, run_logger
from tasks.synthesis import imputed_tables

__all__ = ["write_synthesis_report", "seed002_table", "synthesis_results", "raw_accuracy"]

RELEASE_COLUMNS = ["budget_label", "mechanism", "guarantee", "noise_multiplier", "sample_rate", "steps",
                   "max_grad_norm", "delta", "epsilon_prv", "epsilon_rdp", "epsilon_pld", "mu", "epsilon_gdp",
                   "noise_source"]
FIDELITY = ["ks_mean", "wasserstein_sd_mean", "kendall_tau_rmse", "detection_auroc", "share_closer_to_train",
            "dcr_train_median", "dcr_holdout_median"]


def synthesis_results(record_paths: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per synthetic table with its release's budget, one row per release)."""
    tables, releases = [], []
    for path in record_paths:
        record = json.loads(Path(path).read_text())
        evaluation = json.loads(Path(path).with_suffix(".evaluation.json").read_text())
        release = {k: record.get(k) for k in RELEASE_COLUMNS} | {"job_id": record["job"]["job_id"],
                                                                 "imputation": record["job"]["imputation"],
                                                                 "run": record["job"]["run"],
                                                                 "nonfinite_rows_dropped": record["nonfinite_rows_dropped"],
                                                                 "test_log_likelihood": record["test_log_likelihood"]}
        releases.append(release)
        tables += [release | {k: v for k, v in row.items() if k != "per_column"} for row in evaluation["rows"]]
    return pd.DataFrame(tables), pd.DataFrame(releases)


def _budget_order(labels) -> list[str]:
    """inf first, then mu and epsilon budgets from the loosest to the tightest."""
    def key(label):
        if label == "inf":
            return (0, 0.0)
        return (1 if label.startswith("mu") else 2, -float(label.removeprefix("mu").removeprefix("epsilon")))
    return sorted(set(labels), key=key)


def seed002_table(results: pd.DataFrame, originals: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Rows (truncation, imputation | mean), columns Original and each budget: "mean (sd)" over runs x releases,
    as seed 002 Tables 2-3 (the mean row averages over all imputations' tables)."""
    budgets = _budget_order(results["budget_label"])
    out = []
    for truncated in (False, True):
        part = results[results["truncated"] == truncated]
        for imputation in [*sorted(part["imputation"].unique()), "mean"]:
            rows = part if imputation == "mean" else part[part["imputation"] == imputation]
            original = originals[metric] if imputation == "mean" else \
                originals.loc[originals["imputation"] == imputation, metric]
            line = {"truncation": "yes" if truncated else "no", "imputation": imputation,
                    "original": f"{original.mean():.2f}"}
            for b in budgets:
                values = rows.loc[rows["budget_label"] == b, metric]
                line[b] = f"{values.mean():.2f} ({values.std(ddof=1):.2f})" if len(values) > 1 else \
                    (f"{values.mean():.2f}" if len(values) else "")
            out.append(line)
    return pd.DataFrame(out)


def _markdown(frame: pd.DataFrame) -> str:
    cells = lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v)) else (  # noqa: E731
        f"{v:.4g}" if isinstance(v, float) else str(v))
    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * frame.shape[1]]
    lines += ["| " + " | ".join(cells(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


@task(name="synthesis-report")
def write_synthesis_report(run_dir: str, record_paths: list[str], original_paths: list[str], config) -> dict:
    """Write the report files and artifacts; return a summary of counts and paths (no patient values)."""
    run_dir_path = Path(run_dir)
    results, releases = synthesis_results(record_paths)
    originals = pd.DataFrame([json.loads(Path(p).read_text()) for p in original_paths])
    results.to_csv(run_dir_path / "results.csv", index=False)
    svm = seed002_table(results, originals, "svm_accuracy")
    rf = seed002_table(results, originals, "rf_mse")
    fidelity = results[~results["truncated"]].groupby("budget_label")[FIDELITY].mean().reindex(
        _budget_order(results["budget_label"])).reset_index()
    costs = releases.groupby("budget_label")[RELEASE_COLUMNS[1:]].first().join(
        releases.groupby("budget_label")["test_log_likelihood"].mean()).reindex(
        _budget_order(releases["budget_label"])).reset_index()
    figure = plot_synthesis_utility(results, originals, _budget_order(results["budget_label"]),
                                    run_dir_path / "utility_vs_budget.png")
    train, _, summary = imputed_tables(run_dir, 0)
    dp_tables = results[(results["imputation"] == 0) & (results["mechanism"] == "dp_sgd") & ~results["truncated"]]
    public_count = load_ehr_spec(config.spec).public_patient_count
    marginals = None
    if len(dp_tables):
        loosest = _budget_order(dp_tables["budget_label"])[0]
        job = dp_tables[dp_tables["budget_label"] == loosest].iloc[0]["job_id"]
        table = pd.read_csv(json.loads((run_dir_path / "releases" / f"{job}.json").read_text())["files"][0]["path"])
        # histograms of real patients: patient-level detail, so the figure stays under intermediate/
        marginals = plot_marginals(train[summary["attributes"]], table[summary["attributes"]],
                                   run_dir_path / INTERMEDIATE / "marginals.png",
                                   title=f"real (training) vs synthetic, {loosest}")
    not_dp = sorted(set(releases["guarantee"]) - {"DP"})
    guarantee = ("The DP guarantee covers each flow's training on the imputed training patients (PRV epsilon; RDP "
                 "and PLD alongside, and the GDP mu, whose CLT can underestimate); noise and Poisson sampling come "
                 "from OS entropy and are never stored. "
                 + (f"Releases marked {', '.join(not_dp)} have no guarantee. " if not_dp else "")
                 + ("Table sizes: the spec declares the patient count public. " if public_count else
                    "Table sizes: a patient count released with two-sided geometric noise (in the ledger). ")
                 + "Not covered: validation, MICE (fitted on the private training patients), dropping attributes "
                   "by missingness on the training patients"
                 + ("" if config.scaling == "bounds" else ", the scaling by training means and standard "
                    "deviations (visible in every synthetic table, so those tables stay under intermediate/)")
                 + ", and the evaluation numbers in this report (utility, fidelity, DCR, held-out log-likelihood: "
                   "aggregates computed on real patients without noise). All flows of one table compose: the "
                   "privacy ledger holds the total. The mu = infinity (non-private) tables are comparisons only and "
                   "stay under intermediate/, as does the real-vs-synthetic marginals figure.")
    patients = f"{summary['decisions']['records_read']} patients delivered, " if public_count else ""
    markdown = "\n\n".join([
        f"# DP-NF synthesis: {summary['spec']} ({patients}{len(summary['attributes'])} attributes, m = {summary['m']})",
        f"{len(releases)} flows, {len(results)} synthetic tables (raw and truncated to the spec's bounds).",
        "## SVM accuracy, hypertension (train on synthetic, test on real; mean (SD) over runs x releases)",
        _markdown(svm), "## Random forest MSE, mean PAP", _markdown(rf),
        "## Fidelity (raw tables vs real training patients; detection AUROC 0.5 = indistinguishable; "
        "share closer to train ~0.5 = no copying)", _markdown(fidelity),
        "## Releases and their cost (test_log_likelihood: mean held-out log p(x) per patient, original units)",
        _markdown(costs),
        "## What the guarantee covers", guarantee,
        f"![utility]({figure.name})" + (f"\n\nReal-vs-synthetic marginals: `{marginals}` (not versioned)"
                                        if marginals else ""),
    ])
    (run_dir_path / "report.md").write_text(markdown + "\n")
    if in_prefect_run():
        create_markdown_artifact(markdown, key="privehr-synthesis-report", description="DP-NF synthesis report")
        create_table_artifact(json.loads(costs.to_json(orient="records")), key="privehr-synthesis-releases",
                              description="DP-NF releases: mechanism, sigma, q, T, delta, epsilon, mu")
    run_logger().info("synthesis report: %d flows, %d tables", len(releases), len(results))
    return {"run_dir": run_dir, "report": str(run_dir_path / "report.md"), "results": str(run_dir_path / "results.csv"),
            "flows": int(len(releases)), "tables": int(len(results)),
            "svm_accuracy": json.loads(svm.to_json(orient="records")), "rf_mse": json.loads(rf.to_json(orient="records")),
            "releases": json.loads(costs.to_json(orient="records")), "guarantee": guarantee,
            "mean_svm_accuracy_by_budget": {b: float(v) for b, v in raw_accuracy(results).items()}}


def raw_accuracy(results: pd.DataFrame) -> pd.Series:
    """Mean SVM accuracy of the raw (untruncated) tables per budget, loosest budget first."""
    raw = results[~results["truncated"]].groupby("budget_label")["svm_accuracy"].mean()
    return raw.reindex(_budget_order(raw.index))
