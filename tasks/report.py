"""Report: the grid's results as files (CSV, Markdown, PNG, JSON) and as Prefect artifacts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
from prefect import task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

from privehr.models.evaluation.dp_utility_checks import check_dp_sgd_curves
from privehr.models.evaluation.grid_summary import summarise_grid
from privehr.models.methods import epsilon_label, method_display_name
from privehr.models.privacy.ledger import compose_entries
from privehr.core.records import FitRow
from privehr.core.run_layout import RunLayout
from privehr.core.config import Cell, DataConfig, EvaluationConfig, PagesConfig, PrivacyConfig
from privehr.tasks.evaluation import TestEvaluation, calibration_bins, cell_key, evaluate_cells
from privehr.io.spreadsheet import spreadsheet_safe
from privehr.io.figures import plot_auroc_vs_epsilon, plot_expm_boxplots, plot_reliability, plot_subgroup_cost
from privehr.core.strict_json import strict_dumps, strict_json
from privehr.io.mimic_extract import extract_source
from privehr.io.pages import page_url
from privehr.io.ledger import Ledger, short_dataset, source_patients
from privehr.io.release_bundle import needed_text
from privehr.io.report_html import inline_figures, write_report_html
from privehr.tasks.release_bundle import LABEL_DEFINITIONS
from privehr.tasks.run_logging import publishes_artifacts
from privehr.tasks.stage_timing import timing_table
from privehr.tasks.synthesis_report import raw_accuracy

__all__ = ["write_report", "console_table", "results_table", "curve_check_lines", "evaluation_lines"]

COLUMNS = ["label", "model", "method", "loss", "target_epsilon", "auroc_median", "auprc_median", "seeds",
           "epsilon_prv", "epsilon_rdp", "epsilon_pld", "guarantee", "auroc_bayes", "auroc_map", "gap_std"]
PRIVACY_NOTE = ("epsilon of each DP-SGD release at delta = {delta} by three accountants: PRV (claimed), RDP (upper "
                "bound) and PLD (dp-accounting, upper bound); PRV and RDP are below the target. Noise and Poisson "
                "sampling come from OS entropy and are never stored{reproducible}. ExpM+NF rows: target_epsilon is "
                "eps~, a training parameter of the flow; no DP guarantee is proven (auroc_median: median over the "
                "flow's draws, each a candidate release; auroc_bayes: posterior-predictive average; auroc_map: "
                "highest-utility draw; gap_std: spread of log q - eps~ u / 2s, 0 when the flow equals the mechanism; it "
                "cannot come near 0 here: the flow is Gaussian in all but layers x m of its D directions while u's L1 "
                "term gives the target Laplace tails there, which leaves gap_std >= about (0.07 D)^0.5, 23 for 7,489 "
                "weights, however long it trains; its draws score what the mechanism does, near AUROC 0.5 where the "
                "target is wider than the data can narrow). "
                "dp_expm_nf rows (ExpM's target fitted by DP-SGD): target_epsilon is the release's epsilon, by the same "
                "plan and accountants as DP-SGD; eps~ (training.dp_expm_nf.temperature) only shapes the target; "
                "auroc_median is the flow's mean, the classifier a bundle ships; auroc_bayes the posterior-predictive "
                "average of its draws; gap_std as above, at eps~. "
                "Not covered by any guarantee: the fit gaps (gap_std, u on every training record), feature "
                "statistics fitted on the training split, hyperparameters "
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
    """Every ExpM+NF draw's test AUROC, from the files its fits wrote next to their models (this figure is ExpM+NF's:
    its axis says eps~, no proven DP)."""
    parts = []
    for r in runs:
        if r["method"] != "expm_nf":
            continue
        cell = Cell(**{k: r[k] for k in ("label", "model", "method", "loss", "target_epsilon")})
        path = RunLayout(run_dir).expm_draws(cell.cell_id, r["seed"])
        if path.exists():
            parts.append(pd.DataFrame({"label": r["label"], "model": r["model"], "target_epsilon": r["target_epsilon"],
                                       "auroc": json.loads(path.read_text())["auroc"]}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def curve_check_lines(checks: list[dict]) -> str:
    """The DP-SGD curve checks as Markdown bullets: what holds, and what is flagged."""
    if not checks:
        return ""
    intervals = any(c.get("intervals") for c in checks)
    lines = ["DP-SGD curve checks (each epsilon's median below the non-private baseline; no step to a larger "
             "epsilon that lowers the AUROC beyond seed noise, i.e. with every seed below every seed of the smaller "
             "epsilon" + ("; either flag only where the test set's bootstrap interval of the difference excludes 0"
                          if intervals else "") + "):", ""]
    for c in checks:
        curve = ", ".join("nan" if a is None else f"{a:.3f}" for a in c["auroc_medians"])
        baseline = "none" if c["non_private_baseline"] is None else f"{c['non_private_baseline']:.3f}"
        eps = ", ".join(f"{e:g}" for e in c["epsilons"])
        within = c.get("above_baseline_within_intervals") or []
        if c["not_finite"]:
            below = "FLAGGED: AUROC not finite at epsilon " + ", ".join(f"{e:g}" for e in c["not_finite"])
        elif c["at_or_above_baseline"]:
            below = "FLAGGED: at or above the baseline at epsilon " + ", ".join(f"{e:g}" for e in c["at_or_above_baseline"])
        elif within:
            below = "at or above the baseline's median"
        elif c["below_baseline"]:
            below = "below the baseline"
        else:
            below = "FLAGGED: no non-private baseline to compare with"
        if within:
            note = "at epsilon " + ", ".join(f"{e:g}" for e in within) + " within the bootstrap intervals (not flagged)"
            below = f"{below}; at or above the baseline's median {note}" if below.startswith("FLAGGED") else \
                f"{below} {note}"
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


def _ci(interval) -> str:
    lo, hi = interval
    return "" if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)) else f"[{lo:.3f}, {hi:.3f}]"


def _eps_cell(eps) -> str:
    return "inf" if eps is None or not np.isfinite(eps) else f"{eps:g}"


def _group_table(head: list[str], groups: list[tuple[str, str]], rows: list[dict], cell) -> list[str]:
    """A Markdown table with a row per grid cell of ``rows`` and a column per group; ``cell(row)`` is the text
    of one entry, None for "too small"."""
    by = {(cell_key(r), (r["attribute"], r["group"])): r for r in rows}
    lines = ["| " + " | ".join(head + [f"{a}: {g}" for a, g in groups]) + " |", "|" + "---|" * (len(head) + len(groups))]
    for key in sorted({cell_key(r) for r in rows}):
        texts = ["" if (key, g) not in by else (cell(by[key, g]) or "too small") for g in groups]
        lines.append("| " + " | ".join([*key[:4], _eps_cell(key[4]), *texts]) + " |")
    return lines


def evaluation_lines(ev: TestEvaluation, config: EvaluationConfig) -> str:
    """Markdown: intervals and calibration per cell, AUROC by subgroup, privacy cost by subgroup."""
    if not ev.cells:
        return ("Test-set evaluation: no saved test predictions" + (f" (cells {', '.join(ev.missing)})"
                if ev.missing else "") + ".\n\n")
    level = f"{config.confidence:.0%}"
    head = ["label", "model", "method", "loss", "target_epsilon"]
    lines = [f"## Uncertainty and calibration\n\nOn the test split ({ev.test_stays} stays). Intervals: {level} "
             f"stratified bootstrap ({config.bootstrap_resamples} resamples of the test stays) of the median over "
             "seeds, every seed scored on the same resamples; the seed range is the spread over training runs. "
             f"Calibration: Brier score, ECE over {calibration_bins(ev.test_stays, config)} equal-mass bins (at most "
             f"{config.calibration_bins}, each of at least {config.min_group_stays} stays), calibration slope (1 "
             "ideal) and intercept with slope 1 (0 ideal), medians over seeds. ExpM+NF cells are evaluated on their "
             "released draw, so their AUROC here differs from the median over draws above. Seeds: those with finite "
             "test predictions of those fitted. Resamples keep the test set's class counts: the AUPRC and Brier "
             "intervals are conditional on its prevalence. None of these statistics carries a DP guarantee.", "",
             "| " + " | ".join(head + ["seeds", "AUROC", f"AUROC {level} CI", "seed range", f"AUPRC {level} CI", "Brier",
                                       f"Brier {level} CI", "ECE", "slope", "intercept"]) + " |",
             "|" + "---|" * (len(head) + 10)]
    for key, c in sorted(ev.cells.items()):
        lines.append("| " + " | ".join([*key[:4], _eps_cell(key[4]), f"{c['seeds_evaluated']}/{c['seeds']}",
                                        f"{c['auroc_median']:.3f}", _ci(c["auroc_ci"]),
                                        _ci(c["auroc_seed_range"]), _ci(c["auprc_ci"]), f"{c['brier']:.4f}",
                                        _ci(c["brier_ci"]), f"{c['ece']:.3f}", _cell(c["calibration_slope"]),
                                        _cell(c["calibration_intercept"])]) + " |")
    if ev.missing:
        lines += ["", "Not evaluated (no saved test predictions, e.g. a fit reused from an attempt before they "
                      "were kept): " + ", ".join(ev.missing)]
    groups = list(dict.fromkeys((r["attribute"], r["group"]) for r in ev.subgroups))
    if groups:
        lines += ["", f"## Subgroups\n\nMedian test AUROC over seeds by sex, age band and ethnicity (MIMIC-Extract's "
                      f"`patients`), with its {level} interval (the same resamples, restricted to the group). A group "
                      f"with fewer than {config.min_group_stays} test stays, or fewer than {config.min_group_per_class} "
                      "of either class, is too small and gets no number; no group's size is published.", "",
                  *_group_table(head, groups, ev.subgroups, lambda r: None if r["too_small"] else
                                f"{r['auroc']:.3f} {_ci(r['auroc_ci'])}")]
    if ev.privacy_cost:
        lines += ["", "## Privacy cost by subgroup\n\nThe non-private baseline's AUROC (best loss) minus the private "
                      f"cell's, per group, with its paired {level} interval (both scored on the same resamples): "
                      "positive means the group lost utility to privacy (Suriyakumar et al. 2021); * marks a cost "
                      "whose interval excludes 0.", "",
                  *_group_table(head, groups, ev.privacy_cost, lambda r: None if r["cost"] is None else
                                f"{r['cost']:+.3f}{'*' if r['cost_beyond_noise'] else ''} {_ci(r['cost_ci'])}")]
    return "\n".join(lines) + "\n\n"


def _validation_lines(run_dir: Path, pages: PagesConfig) -> str:
    lines = []
    for path in sorted(RunLayout(run_dir).validation_dir.glob("*/validation.json")):
        v = json.loads(path.read_text())
        quarantined = sum(c["rows"] for c in v["quarantine"].values())
        lines.append(f"Validation of `{Path(v['input']).name}`: {'passed' if v['passed'] else 'FAILED'}, "
                     f"{v['expectations']} expectations, {len(v['failed_warning'])} warning(s), {quarantined} "
                     f"quarantined row(s); [Data Docs]({page_url(v['data_docs'], run_dir.parent, pages.base_url)}).")
    return "\n".join(lines) + "\n\n" if lines else ""


def _eps(value) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def ledger_lines(run_dir: Path, privacy: PrivacyConfig) -> tuple[str, dict | None]:
    """The dataset's composed guarantee after this run, from the ledger (Markdown, and the numbers)."""
    path = RunLayout(run_dir).privacy_budget
    if not path.exists():
        return "", None
    b = json.loads(path.read_text())
    ledger = Ledger(privacy.ledger_path)
    state = ledger.state()
    total = compose_entries([e for e in state.entries if e.dataset == b["dataset"]], privacy.delta)
    total.patients = source_patients(ledger, state.entries, b["dataset"], privacy.delta, state.budget,
                                     accountants=False)
    status = (f"DP: epsilon {total.epsilon_dp:.4g} at delta {total.delta:.2g}" if total.dp else
              f"NOT DP ({total.why_not_dp})")
    text = (f"Privacy ledger: dataset {short_dataset(b['dataset'])}, {total.releases} release(s) recorded"
            + (f", {total.pending} reserved and not yet trained" if total.pending else "")
            + f" (this run reserved {b['planned']}). The dataset's guarantee: {status}. DP releases alone: epsilon "
            f"PRV {_eps(total.epsilon_dp_prv)}, RDP {_eps(total.epsilon_dp_rdp)}, PLD {_eps(total.epsilon_dp_pld)} at "
            f"delta {total.delta:.2g} (budget {b['budget_epsilon']}), as if every release had used every patient."
            + _per_patient(total.patients) + " `privehr privacy ledger` shows every release.\n\n")
    return text, strict_json(total.as_dict())


def _per_patient(p: dict | None) -> str:
    """The source's patients' spend, each over every release of the ledger that used them (what a budget binds on),
    where its releases cite membership snapshots."""
    if not p:
        return ""
    reached = "" if p["reached_budget"] is None else f"; {p['reached_budget']} reached the budget"
    how = ("by the Renyi filter at order " + p["accountant"].rsplit("_", 1)[-1] + " (what the budget binds on)"
           if p["accountant"].startswith("renyi") else "by RDP (no budget set)")
    return (f" Per patient, over every source's releases, {how}: median {_eps(p['median'])}, maximum "
            f"{_eps(p['max'])} over {p['patients']} patient(s){reached}.")


def _synthesis_lines(run_dir: Path) -> str:
    synthesis = RunLayout(run_dir).synthesis
    path = synthesis.report_md
    if not path.exists():
        return ""
    results = pd.read_csv(synthesis.results)
    auroc = raw_accuracy(results, "tstr_auroc")
    metric, values = ("mean TSTR AUROC (nine classifiers; train on synthetic, test on real) ", auroc) if len(auroc) \
        else ("mean SVM accuracy (train on synthetic, test on real) ", raw_accuracy(results))
    return (f"Synthesis of the EHR table: {results['job_id'].nunique()} releases, {len(results)} synthetic tables; "
            + metric + ", ".join(f"{b} {v:.2f}" for b, v in values.items()) + f". Report: `{path}`.\n\n")


def _bundle_lines(run: RunLayout, runs: list[dict]) -> str:
    """The first screen: what may leave the hospital (the bundle's card), each model's DP evaluation beside the
    exact one this internal report holds."""
    path = run.release_bundle / "card.json"
    if not path.exists():
        return ""
    card = json.loads(path.read_text())
    p = card["privacy"]
    exact = {row.cell_id: row.auroc for row in map(FitRow.model_validate, runs) if row.seed == 0}
    lines = [f"## Release bundle: what may leave the hospital\n\n**{p['guarantee']}.** Total over its "
             f"{p['releases']} releases: epsilon {p['epsilon_prv']:.3g} (PRV), {p['epsilon_rdp']:.3g} (RDP), "
             f"{p['epsilon_pld']:.3g} (PLD) at delta {p['delta']:.2g}. `privehr release show {run.release_bundle}` "
             "prints its model card.\n\n| model (seed 0) | DP AUROC [interval] | exact AUROC (internal) |\n|---|---|---|"]
    f = lambda v: "n/a" if v is None or v != v else f"{v:.3f}"  # noqa: E731
    for m in card["models"]:
        e, (low, high) = m["evaluation"], m["evaluation"]["intervals"]["auroc"]
        dp = f"{f(e['auroc'])} [{f(low)}, {f(high)}]" if (e.get("informative") or {}).get("auroc", True) else \
            f"not informative [{f(low)}, {f(high)}]" + needed_text(e, "auroc").replace(";", ",", 1)
        lines.append(f"| {m['cell_id']} | {dp} | {f(exact.get(m['cell_id']))} |")
    return "\n".join(lines) + "\n\n"


def _task_and_source(run_dir: Path, runs: list[dict], data: DataConfig, cohort: dict) -> str:
    """The report's first lines: the task (labels, window), where the data came from (a banner: simulated or
    patients' records) and what the run trained. File names and counts only."""
    labels = list(dict.fromkeys(r["label"] for r in runs))
    task_text = " and ".join(f"{LABEL_DEFINITIONS.get(label, label)} ({label})" for label in labels) or "no label"
    try:  # the banner says what it cannot tell; a file gone or unreadable since the run never fails the report
        source = extract_source(data.hdf5_path) if Path(data.hdf5_path).is_file() else None
    except (OSError, RuntimeError, ValueError, KeyError):  # h5py: OSError for a file it cannot open or read
        source = None
    if source is None:
        banner = f"> **Data:** `{data.hdf5_path}` is no longer readable; the report cannot say where it came from."
    elif source["simulated"]:
        banner = (f"> **Simulated data.** `{source['file']}` was written by {source['generator']}: no patient is "
                  "behind these numbers, and they say nothing about real patients' risks.")
    else:
        banner = (f"> **Patients' records.** `{source['file']}` is a MIMIC-Extract file not written by privehr's "
                  "simulator. This report holds exact results and stays inside the hospital; what may leave it is "
                  "the release bundle below.")
    methods = ", ".join(dict.fromkeys(method_display_name(r["method"]) for r in runs))
    models = ", ".join(dict.fromkeys(r["model"].replace("_", " ") for r in runs))
    return (f"# Risk of {task_text} from the first {data.window_hours} hours of an ICU stay\n\n{banner}\n\n"
            f"Run `{run_dir.name}`: {cohort['stays']} stays of `{data.hdf5_path}`; models {models}; trained by "
            f"{methods}; {len(runs)} fits.\n\n")


def console_table(summary: dict) -> str:
    """The console's last screen: what matters of each cell (label, model, method, epsilon, the exact test AUROC
    with its interval, the guarantee), then the commands that come next."""
    # the AUROC and its interval of one evaluation (the saved test predictions): a results row's own AUROC can be
    # another statistic (ExpM+NF's: the median over posterior draws, beside an interval of the one release saved)
    cells = {_key(c): c for c in summary["evaluation"]["cells"]}
    level = round(100 * summary["evaluation"]["confidence"])
    head = ["label", "model", "method", "epsilon", f"AUROC [{level} % interval]", "guarantee"]
    rows = []
    for r in summary["results"]:
        method = method_display_name(r["method"]) + f" ({r['loss']})"
        epsilon = _cell(epsilon_label(r["method"], r["target_epsilon"], r.get("epsilon_prv")))
        cell = cells.get(_key(r), {})
        low_high, median = cell.get("auroc_ci"), cell.get("auroc_median", r.get("auroc_median"))
        auroc = "n/a" if median is None or median != median else f"{median:.3f}" + (
            f" [{low_high[0]:.3f}, {low_high[1]:.3f}]" if low_high else "")
        guarantee = str(r.get("guarantee") or "")
        rows.append([r["label"], r["model"], method, epsilon, auroc,
                     guarantee.split(":")[0] + ")" if ":" in guarantee else guarantee])  # the note says why
    widths = [max(len(x) for x in column) for column in zip(head, *rows)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    text = [line(head), *map(line, rows),
            "AUROC: exact, on the run's test split, median over seeds (internal: it stays in the hospital); epsilon: "
            "each release's alone, by PRV; the ledger composes them. ExpM+NF's eps~ is a training parameter: no DP "
            "guarantee is proven for it."]
    bundle = (summary.get("release") or {}).get("path")
    if bundle:
        text += ["", "next:", f"  privehr release show {bundle}      the model card: what may leave the hospital",
                 f"  privehr predict {bundle} --data FILE.h5 --out risks.csv      risks for new stays",
                 f"  privehr release verify {bundle}      hashes, signature and accounting, before it is sent"]
    return "\n".join(text)


def _key(row: dict) -> tuple:
    """A cell's identity in the results rows and the evaluation's cells alike (no epsilon: None)."""
    eps = row.get("target_epsilon")
    eps = None if eps is None or not np.isfinite(eps) else float(eps)
    return row["label"], row["model"], row["method"], row["loss"], eps


@task(name="report")
def write_report(run_dir: str, runs: list[dict], privacy: PrivacyConfig = PrivacyConfig(),
                 evaluation: EvaluationConfig = EvaluationConfig(), pages: PagesConfig = PagesConfig(),
                 stage_seconds: dict[str, float] | None = None, data: DataConfig = DataConfig()) -> dict:
    """Write results_runs.csv, results.csv, results.md, report.html, the figures and metrics.json.

    ``stage_seconds``: the wall time of the flow's stages so far; the report's own (up to writing
    metrics.json) is added, and the table goes into results.md and metrics.json."""
    start = time.perf_counter()
    run_dir, run = Path(run_dir), RunLayout(run_dir)
    runs = [FitRow.model_validate(r).model_dump(exclude_unset=True) for r in runs]  # typed rows, as written
    frame = pd.DataFrame(runs)
    spreadsheet_safe(frame).to_csv(run.results_runs, index=False)  # for people: formula-like cells escaped
    summary = summarise_grid(frame)
    spreadsheet_safe(summary).to_csv(run.results, index=False)
    figure = plot_auroc_vs_epsilon(summary, run.figure("auroc_vs_epsilon"))
    boxplots = plot_expm_boxplots(_expm_draws(run_dir, runs), run.figure("expm_nf_auroc_boxplots"))
    rows = [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}
            for r in summary.to_dict("records")]
    cohort = json.loads(run.cohort_summary.read_text())
    split = json.loads(run.split_summary.read_text())["counts"]
    note = PRIVACY_NOTE.format(delta=privacy.delta, reproducible=REPRODUCIBLE if privacy.reproducible_noise else "")
    ledger_text, ledger_total = ledger_lines(run_dir, privacy)
    ev = evaluate_cells(run_dir, runs, evaluation)
    checks = check_dp_sgd_curves(frame, ev.auroc_replicates, evaluation.confidence) if len(frame) else []
    evaluated = [{"label": k[0], "model": k[1], "method": k[2], "loss": k[3], "target_epsilon": k[4], **c}
                 for k, c in sorted(ev.cells.items())]
    reliability = plot_reliability(evaluated, run.figure("calibration"))
    subgroup_figure = plot_subgroup_cost(ev.privacy_cost, run.figure("subgroup_privacy_cost"))
    table = results_table(rows)
    markdown = (f"{_task_and_source(run_dir, runs, data, cohort)}{_bundle_lines(run, runs)}![AUROC vs epsilon]({figure.name})\n\n"
                f"## Results\n\nMedian test metrics over seeds.\n\n{table}\n\n{note}\n\n{curve_check_lines(checks)}"
                + (f"![ExpM+NF AUROC of each draw]({boxplots.name})\n\n" if boxplots else "")
                + evaluation_lines(ev, evaluation)
                + (f"![Reliability diagrams]({reliability.name})\n\n" if reliability else "")
                + (f"![Privacy cost by subgroup]({subgroup_figure.name})\n\n" if subgroup_figure else "") +
                f"## Cohort, validation and privacy\n\nCohort: {cohort['stays']} stays; exclusions "
                f"{cohort['exclusions']}. Split (stays): train {split['train']['stays']}, dev "
                f"{split['dev']['stays']}, test {split['test']['stays']}.\n\n{_validation_lines(run_dir, pages)}"
                f"{ledger_text}{_synthesis_lines(run_dir)}Artifacts: `{run_dir}`\n")
    stages = dict(stage_seconds or {})
    stages["report"] = round(time.perf_counter() - start, 3)  # up to here: writing the files below is quick
    fit_seconds = float(frame["fit_seconds"].sum()) if "fit_seconds" in frame else None
    markdown += ("\n## Time per stage\n\nWall seconds of each stage of this run (search: from the first search "
                 "to the last; the fits of early cells overlap it)"
                 + (f"; the fits' own times add up to {fit_seconds:.0f} s over {len(frame)} fits" if fit_seconds
                    else "") + ".\n\n```\n" + timing_table(stages) + "\n```\n")
    run.results_md.write_text(markdown)
    inlined = inline_figures(markdown, run_dir)  # report.html and the Prefect UI cannot reach the run directory
    html_path = write_report_html(run_dir, inlined, f"privehr run {run_dir.name}")
    result = {"run_id": run_dir.name, "run_dir": str(run_dir), "results": rows, "runs": len(runs),
              "figure": str(figure), "expm_boxplots": str(boxplots) if boxplots else None, "privacy_note": note,
              "dp_sgd_checks": checks, "privacy_ledger": ledger_total, "report_html": str(html_path),
              "stage_seconds": stages, "fit_task_seconds": fit_seconds,
              "evaluation": {"test_stays": ev.test_stays, "confidence": evaluation.confidence,
                             "bootstrap_resamples": evaluation.bootstrap_resamples, "cells": evaluated,
                             "subgroups": ev.subgroups, "privacy_cost": ev.privacy_cost, "not_evaluated": ev.missing},
              "cohort": {k: cohort[k] for k in ("stays", "label_rates", "exclusions")}, "split": split}
    run.metrics.write_text(strict_dumps(result, indent=2, default=float))
    if publishes_artifacts():
        create_table_artifact([{c: _cell(r.get(c)) for c in COLUMNS} for r in rows], key="privehr-results",
                              description=f"Median test metrics of run {run_dir.name}. {note}")
        create_markdown_artifact(inlined, key="privehr-run-summary", description=f"Run {run_dir.name}")
        create_link_artifact(page_url(html_path, run_dir.parent, pages.base_url), link_text=f"report of {run_dir.name}",
                             key="privehr-run-report", description="The run's report (tables, figures, privacy, "
                             "validation) as one page" + (f"; served at {pages.base_url} by `privehr serve`"
                                                          if pages.base_url else ""))
    return result
