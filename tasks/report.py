"""Report: the grid's results as files (CSV, Markdown, PNG, JSON) and as Prefect artifacts."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pandas as pd
from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from models.dp_utility_checks import check_dp_sgd_curves
from models.result_summary import summarise_runs
from models.privacy_ledger import compose_entries
from privehr.config import Cell, PrivacyConfig
from tasks.figures import plot_auroc_vs_epsilon, plot_expm_boxplots
from privehr.strict_json import strict_dumps, strict_json
from tasks.privacy_ledger import read_ledger, short_dataset
from tasks.run_logging import in_prefect_run
from tasks.synthesis_report import raw_accuracy

__all__ = ["write_report", "results_table", "curve_check_lines"]

COLUMNS = ["label", "model", "method", "loss", "target_epsilon", "auroc_median", "auprc_median", "seeds",
           "epsilon_prv", "epsilon_rdp", "epsilon_pld", "guarantee", "auroc_bayes", "auroc_map", "gap_std"]
PRIVACY_NOTE = ("epsilon of each DP-SGD release at delta = {delta} by three accountants: PRV (claimed), RDP (upper "
                "bound) and PLD (dp-accounting, upper bound); PRV and RDP are below the target. Noise and Poisson "
                "sampling come from OS entropy and are never stored{reproducible}. ExpM+NF rows: target_epsilon is "
                "eps~, a training parameter of the flow; no DP guarantee is proven (auroc_median: median over the "
                "flow's draws, each a candidate release; auroc_bayes: posterior-predictive average; auroc_map: "
                "highest-utility draw; gap_std: spread of log q - eps~ u / 2s, 0 when the flow equals the mechanism). "
                "Not covered by any guarantee: feature statistics fitted on the training split, hyperparameters "
                "tuned on dev, and the cohort and split counts in this report. Non-private rows have no guarantee.")
REPRODUCIBLE = ("; EXCEPT in this run: privacy.reproducible_noise seeded them from the configuration, so its DP-SGD "
                "releases are NOT DP (an attacker with the configuration can replay them)")


def _cell(value) -> str:
    if isinstance(value, float):
        return "inf" if np.isinf(value) else ("" if np.isnan(value) else f"{value:.3g}")
    return "" if value is None else str(value)


def results_table(rows: list[dict]) -> str:
    """Markdown table of the summary rows."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def _expm_draws(run_dir: Path, runs: list[dict]) -> pd.DataFrame:
    """Every ExpM+NF draw's test AUROC, from the files its fits wrote next to their models."""
    parts = []
    for r in runs:
        if r["method"] != "expm_nf":
            continue
        cell = Cell(**{k: r[k] for k in ("label", "model", "method", "loss", "target_epsilon")})
        path = run_dir / "models" / f"{cell.cell_id}-seed{r['seed']}.draws.json"
        if path.exists():
            parts.append(pd.DataFrame({"label": r["label"], "model": r["model"], "target_epsilon": r["target_epsilon"],
                                       "auroc": json.loads(path.read_text())["auroc"]}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def curve_check_lines(checks: list[dict]) -> str:
    """The DP-SGD curve checks as Markdown bullets: what holds, and what is flagged."""
    if not checks:
        return ""
    lines = ["DP-SGD curve checks (each epsilon's median below the non-private baseline; no step to a larger "
             "epsilon that lowers the AUROC beyond seed noise, i.e. with every seed below every seed of the smaller "
             "epsilon):", ""]
    for c in checks:
        curve = ", ".join("nan" if a is None else f"{a:.3f}" for a in c["auroc_medians"])
        baseline = "none" if c["non_private_baseline"] is None else f"{c['non_private_baseline']:.3f}"
        eps = ", ".join(f"{e:g}" for e in c["epsilons"])
        if c["not_finite"]:
            below = "FLAGGED: AUROC not finite at epsilon " + ", ".join(f"{e:g}" for e in c["not_finite"])
        elif c["below_baseline"]:
            below = "below the baseline"
        elif c["at_or_above_baseline"]:
            below = "FLAGGED: at or above the baseline at epsilon " + ", ".join(f"{e:g}" for e in c["at_or_above_baseline"])
        else:
            below = "FLAGGED: no non-private baseline to compare with"
        if c["decreases"]:
            drops = "FLAGGED: decrease beyond seed noise " + ", ".join(
                f"{d['from']:g} -> {d['to']:g} ({d['auroc_from']:.3f} -> {d['auroc_to']:.3f})" for d in c["decreases"])
        elif c["not_finite"]:
            drops = "no decrease beyond seed noise among the finite epsilons"
        else:
            drops = "no decrease beyond seed noise"
        lines.append(f"- {c['label']} / {c['model']} / {c['loss']}: AUROC {curve} at epsilon {eps}, non-private "
                     f"{baseline}: {below}; {drops}.")
    return "\n".join(lines) + "\n\n"


def _validation_lines(run_dir: Path) -> str:
    lines = []
    for path in sorted((run_dir / "validation").glob("*/validation.json")):
        v = json.loads(path.read_text())
        quarantined = sum(c["rows"] for c in v["quarantine"].values())
        lines.append(f"Validation of `{Path(v['input']).name}`: {'passed' if v['passed'] else 'FAILED'}, "
                     f"{v['expectations']} expectations, {len(v['failed_warning'])} warning(s), {quarantined} "
                     f"quarantined row(s); Data Docs `{v['data_docs']}`.")
    return "\n".join(lines) + "\n\n" if lines else ""


def _eps(value) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def ledger_lines(run_dir: Path, privacy: PrivacyConfig) -> tuple[str, dict | None]:
    """The dataset's composed guarantee after this run, from the ledger (Markdown, and the numbers)."""
    path = run_dir / "privacy_budget.json"
    if not path.exists():
        return "", None
    b = json.loads(path.read_text())
    entries = [e for e in read_ledger(privacy.ledger_path) if e.dataset == b["dataset"]]
    total = compose_entries(entries, privacy.delta)
    status = (f"DP: epsilon {total.epsilon_dp:.4g} at delta {total.delta:.2g}" if total.dp else
              f"NOT DP ({total.why_not_dp})")
    text = (f"Privacy ledger: dataset {short_dataset(b['dataset'])}, {total.releases} release(s) recorded"
            + (f", {total.pending} reserved and not yet trained" if total.pending else "")
            + f" (this run reserved {b['planned']}). The dataset's guarantee: {status}. DP releases alone: epsilon "
            f"PRV {_eps(total.epsilon_dp_prv)}, RDP {_eps(total.epsilon_dp_rdp)}, PLD {_eps(total.epsilon_dp_pld)} at "
            f"delta {total.delta:.2g} (budget {b['budget_epsilon']}). `privehr privacy ledger` shows every release.\n\n")
    return text, strict_json(total.as_dict())


def _synthesis_lines(run_dir: Path) -> str:
    path = run_dir / "synthesis" / "report.md"
    if not path.exists():
        return ""
    results = pd.read_csv(run_dir / "synthesis" / "results.csv")
    accuracy = raw_accuracy(results)
    return (f"DP-NF synthesis of the EHR table: {results['job_id'].nunique()} flows, {len(results)} synthetic tables; "
            "mean SVM accuracy (train on synthetic, test on real) " +
            ", ".join(f"{b} {v:.2f}" for b, v in accuracy.items()) + f". Report: `{path}`.\n\n")


@task(name="report")
def write_report(run_dir: str, runs: list[dict], privacy: PrivacyConfig = PrivacyConfig()) -> dict:
    """Write results_runs.csv, results.csv, results.md, auroc_vs_epsilon.png and metrics.json."""
    run_dir = Path(run_dir)
    frame = pd.DataFrame(runs)
    frame.to_csv(run_dir / "results_runs.csv", index=False)
    summary = summarise_runs(frame)
    summary.to_csv(run_dir / "results.csv", index=False)
    figure = plot_auroc_vs_epsilon(summary, run_dir / "auroc_vs_epsilon.png")
    boxplots = plot_expm_boxplots(_expm_draws(run_dir, runs), run_dir / "expm_nf_auroc_boxplots.png")
    rows = [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}
            for r in summary.to_dict("records")]
    cohort = json.loads((run_dir / "cohort.json").read_text())
    split = json.loads((run_dir / "split_summary.json").read_text())["counts"]
    note = PRIVACY_NOTE.format(delta=privacy.delta, reproducible=REPRODUCIBLE if privacy.reproducible_noise else "")
    ledger_text, ledger_total = ledger_lines(run_dir, privacy)
    checks = check_dp_sgd_curves(frame) if len(frame) else []
    table = results_table(rows)
    markdown = (f"# privehr run {run_dir.name}\n\nMedian test metrics over seeds.\n\n{table}\n\n{note}\n\n"
                f"{curve_check_lines(checks)}![AUROC vs epsilon]({figure.name})\n\n"
                + (f"![ExpM+NF AUROC of each draw]({boxplots.name})\n\n" if boxplots else "") +
                f"Cohort: {cohort['stays']} stays; exclusions "
                f"{cohort['exclusions']}. Split (stays): train {split['train']['stays']}, dev "
                f"{split['dev']['stays']}, test {split['test']['stays']}.\n\n{_validation_lines(run_dir)}"
                f"{ledger_text}{_synthesis_lines(run_dir)}Artifacts: `{run_dir}`\n")
    (run_dir / "results.md").write_text(markdown)
    result = {"run_id": run_dir.name, "run_dir": str(run_dir), "results": rows, "runs": len(runs),
              "figure": str(figure), "expm_boxplots": str(boxplots) if boxplots else None, "privacy_note": note,
              "dp_sgd_checks": checks, "privacy_ledger": ledger_total,
              "cohort": {k: cohort[k] for k in ("stays", "label_rates", "exclusions")}, "split": split}
    (run_dir / "metrics.json").write_text(strict_dumps(result, indent=2, default=float))
    if in_prefect_run():
        create_table_artifact([{c: _cell(r.get(c)) for c in COLUMNS} for r in rows], key="privehr-results",
                              description=f"Median test metrics of run {run_dir.name}. {note}")
        inline = base64.b64encode(figure.read_bytes()).decode()  # the UI cannot reach the run directory
        create_markdown_artifact(markdown.replace(f"![AUROC vs epsilon]({figure.name})",
                                                  f"![AUROC vs epsilon](data:image/png;base64,{inline})\n\n"
                                                  f"Figure file: `{figure}`"),
                                 key="privehr-run-summary", description=f"Run {run_dir.name}")
    return result
