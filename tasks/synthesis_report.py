"""Synthesis report: utility tables in the style of Su et al. 2023, the TSTR panel and mixed-type fidelity of
Lee et al. 2022, membership inference against each decoded table (DOMIAS, van Breugel et al. 2023), the releases
and what they cost, one column per (synthesizer, budget).

References:
    Lee, Kim, Jeong, Ro (2022). Differentially Private Normalizing Flows for Synthetic Tabular Data Generation. AAAI.
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.

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

from privehr.core.run_layout import RunLayout
from privehr.core.specs import load_ehr_spec
from privehr.core.records import ImputationSummary
from privehr.models.synthesis import synthesizer_display_name, synthesizer_rank
from privehr.models.synthesis.codec import TableCodec
from privehr.io.figures import marginal_histograms, plot_synthesis_utility
from privehr.io.spreadsheet import spreadsheet_safe
from privehr.tasks.run_logging import publishes_artifacts, run_logger
from privehr.tasks.synthesis import imputed_tables

__all__ = ["write_synthesis_report", "write_results_csv", "su2023_table", "synthesis_results", "raw_accuracy",
           "membership_table"]

RELEASE_COLUMNS = ["budget_label", "mechanism", "guarantee", "noise_multiplier", "sample_rate", "steps",
                   "max_grad_norm", "delta", "epsilon_prv", "epsilon_rdp", "epsilon_pld", "mu", "epsilon_gdp",
                   "noise_source"]
FIDELITY = ["ks_mean", "wasserstein_sd_mean", "kendall_tau_rmse", "detection_auroc", "share_closer_to_train",
            "dcr_train_median", "dcr_holdout_median"]
MIXED = ["tv_mean", "tau_rmse", "tau_mae", "invalid_share"]
TSTR = ["tstr_auroc", "tstr_macro_f1", "tstr_average_precision"]
MIA = ["mia_auroc", "mia_tpr_at_10pct", "mia_tpr_at_1pct", "mia_tpr_at_0p1pct", "mia_syn_only_auroc",
       "mia_syn_only_tpr_at_1pct", "mia_n_members", "mia_n_nonmembers", "mia_min_resolvable_fpr"]


def synthesis_results(record_paths: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per synthetic table with its release's budget, one row per release)."""
    tables, releases = [], []
    for path in record_paths:
        record = json.loads(Path(path).read_text())
        evaluation = json.loads(Path(path).with_suffix(".evaluation.json").read_text())
        release = {k: record.get(k) for k in RELEASE_COLUMNS} | {"synthesizer": record.get("synthesizer", "maf"),
                                                                 "job_id": record["job"]["job_id"],
                                                                 "imputation": record["job"]["imputation"],
                                                                 "run": record["job"]["run"],
                                                                 "nonfinite_rows_dropped": record["nonfinite_rows_dropped"],
                                                                 "test_log_likelihood": record["test_log_likelihood"]}
        # tables that ended with no rows were never written nor scored: they have no row here, the release does
        releases.append(release | {"empty_tables": len(record.get("empty_tables", []))})
        tables += [release | {k: v for k, v in row.items() if not k.startswith("per_column")
                              and k not in ("tstr_per_classifier", "mia_unresolvable_fprs")}
                   for row in evaluation["rows"]]
    tables, releases = pd.DataFrame(tables), pd.DataFrame(releases)
    # a table whose every sampled row was non-finite has no fidelity: its columns are empty, never absent (and a raw
    # table, or an evaluation from before the attack, has no membership inference); a run whose every table ended
    # with no rows has a table of results with its columns and no row
    base = [*RELEASE_COLUMNS, "synthesizer", "job_id", "imputation", "run", "nonfinite_rows_dropped",
            "test_log_likelihood", "release", "truncated", "rows"]
    tables = tables.reindex(columns=list(dict.fromkeys([*tables.columns, *base, *FIDELITY, *MIXED, *MIA])))
    tables["truncated"] = tables["truncated"].eq(True)
    if releases["synthesizer"].nunique() > 1:  # one column per (synthesizer, budget)
        for frame in (tables, releases):
            frame["budget_label"] = frame["synthesizer"] + " " + frame["budget_label"]
    return tables, releases


def _budget_order(labels) -> list[str]:
    """By synthesizer (a "<synthesizer> <budget>" label), then inf first, then mu and epsilon budgets from the loosest
    to the tightest."""
    def key(label):
        synthesizer, _, budget = label.rpartition(" ")
        rank = synthesizer_rank(synthesizer)
        if budget == "inf":
            return (rank, 0, 0.0)
        return (rank, 1 if budget.startswith("mu") else 2, -float(budget.removeprefix("mu").removeprefix("epsilon")))
    return sorted(set(labels), key=key)


def su2023_table(results: pd.DataFrame, originals: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Rows (truncation, imputation | mean), columns Original and each budget: "mean (sd)" over runs x releases,
    as Su et al. 2023, Tables 2-3 (the mean row averages over all imputations' tables)."""
    budgets = _budget_order(results["budget_label"])
    if metric not in results:  # no table was scored (every one ended with too few rows): blank cells, not KeyError
        results = results.assign(**{metric: float("nan")})
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


def membership_table(results: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """DOMIAS on the decoded tables, one row per (synthesizer, budget): mean over its tables of the AUROC and the
    TPR at each FPR ("not resolvable" where 1 / non-members exceeds the FPR; blank where no table was attacked)."""
    attacked = results[results["truncated"].astype(bool) & results["mia_auroc"].notna()]
    rows = []
    for label in order:
        part = attacked[attacked["budget_label"] == label]
        if part.empty:
            continue
        row = {"budget_label": label, "tables": int(len(part)),
               "non-members": int(part["mia_n_nonmembers"].min()), "AUROC": part["mia_auroc"].mean()}
        for column, name in (("mia_tpr_at_10pct", "TPR @ FPR 10 %"), ("mia_tpr_at_1pct", "TPR @ FPR 1 %"),
                             ("mia_tpr_at_0p1pct", "TPR @ FPR 0.1 %")):
            values = pd.to_numeric(part[column], errors="coerce")
            row[name] = values.mean() if values.notna().any() else "not resolvable"
        row["AUROC, p_syn only"] = part["mia_syn_only_auroc"].mean()
        rows.append(row)
    return pd.DataFrame(rows)


def _membership_section(results: pd.DataFrame, order: list[str]) -> list[str]:
    table = membership_table(results, order)
    if table.empty:
        return ["## Membership inference (DOMIAS)", "No decoded table was attacked."]
    counts = sorted(set(table["non-members"]))
    resolvable = [f"{f:g} %" for f in (10, 1, 0.1) if f / 100 * min(counts) >= 1 - 1e-9]
    return ["## Membership inference (DOMIAS: van Breugel et al. 2023, density ratio p_syn / p_ref by Gaussian KDE "
            "on reference-standardised columns)",
            "Each decoded table attacked with the real training patients as members and the real test patients "
            "split in two by position (even: the attacker's reference sample; odd: the non-member candidates); "
            "mean over the tables of each synthesizer and budget. Non-members per table: "
            f"{', '.join(map(str, counts))}, so the smallest resolvable FPR is 1/{min(counts)} = "
            f"{1 / min(counts):.2g}: "
            + (f"TPR is resolvable at FPR {', '.join(resolvable)}" if resolvable else "no listed FPR is resolvable")
            + " (an FPR below it is marked not resolvable, not reported as a number). AUROC 0.5 and TPR = FPR are "
            "chance; the non-private tables are attacked alike. These are exact statistics of real patients, no "
            "noise added: internal to the hospital, like the rest of this report. A KDE attacker is weak in few "
            "columns: a low number is a lower bound on leakage, not a proof of privacy.",
            _markdown(table)]


CHANCE_SDS = 2  # a TSTR AUROC must exceed the shuffled-label baseline's mean by this many of its SDs


def chance_threshold(originals: pd.DataFrame) -> dict | None:
    """The shuffled-label TSTR AUROCs of every imputation pooled: their mean, SD, count and the threshold a table's
    TSTR AUROC must exceed (mean + CHANCE_SDS SD); None where no baseline was fitted."""
    if "tstr_auroc_shuffled" not in originals:
        return None
    values = [v for vs in originals["tstr_auroc_shuffled"] if isinstance(vs, list) for v in vs]
    if len(values) < 2:
        return None
    mean, sd = float(pd.Series(values).mean()), float(pd.Series(values).std(ddof=1))
    return {"mean": mean, "sd": sd, "fits": len(values), "threshold": mean + CHANCE_SDS * sd}


def flag_chance(results: pd.DataFrame, chance: dict | None) -> pd.DataFrame:
    """``results`` with ``tstr_no_better_than_chance``: True where a table's TSTR AUROC is at or below the chance
    threshold (an unscored table stays empty)."""
    if chance is None or "tstr_auroc" not in results:
        return results
    auroc = results["tstr_auroc"].astype(float)
    return results.assign(tstr_no_better_than_chance=(auroc <= chance["threshold"]).where(auroc.notna()))


def _chance_lines(results: pd.DataFrame, originals: pd.DataFrame, chance: dict | None, label: str,
                  order: list[str]) -> list[str]:
    """The report's warnings on TSTR: tables no better than chance, per budget, and labels MICE imputed."""
    lines = []
    if chance is not None and "tstr_no_better_than_chance" in results:
        flagged = results.dropna(subset=["tstr_no_better_than_chance"]).groupby("budget_label")[
            "tstr_no_better_than_chance"].agg(["sum", "count"]).reindex(order).dropna()
        named = [f"{b} {int(r['sum'])} of {int(r['count'])}" for b, r in flagged.iterrows() if r["sum"]]
        baseline = (f"the same panel trained on the real training patients with {label} shuffled ({chance['fits']} "
                    f"fits): AUROC {chance['mean']:.2f} (SD {chance['sd']:.2f}), so a table must exceed "
                    f"{chance['threshold']:.2f} (mean + {CHANCE_SDS} SD)")
        lines.append(f"**No better than chance**: tables whose TSTR AUROC does not beat {baseline}: "
                     + ("; ".join(named) + " tables (`tstr_no_better_than_chance` in results.csv). Their "
                        "AUROC above cannot be told from that of a label unrelated to the features (few test "
                        "patients widen the baseline)" if named else "none") + ".")
    imputed = [o for o in originals.get("test_labels_imputed", pd.Series(dtype=object)) if isinstance(o, dict)]
    if imputed and imputed[0]["imputed"]:
        count = imputed[0]
        lines.append(f"**Warning: TSTR scored on imputed labels**: MICE imputed {label} for {count['imputed']} of "
                     f"{count['of']} test patients; for them TSTR measures agreement with the imputation model's "
                     "guess, not an observed outcome"
                     + (" (so most of every TSTR number above)" if count["imputed"] * 2 > count["of"] else "")
                     + ". Deliver the outcome for the held-out patients to score against it.")
    return lines


def _markdown(frame: pd.DataFrame) -> str:
    cells = lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v)) else (  # noqa: E731
        f"{v:.4g}" if isinstance(v, float) else str(v))
    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * frame.shape[1]]
    lines += ["| " + " | ".join(cells(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def write_results_csv(results: pd.DataFrame, path: Path) -> None:
    """``results.csv``: for people, who open it in a spreadsheet, so formula-looking text is written as text
    (:func:`privehr.io.spreadsheet.spreadsheet_safe`); numbers, booleans and blanks are written as they are."""
    spreadsheet_safe(results).to_csv(path, index=False)


@task(name="synthesis-report")
def write_synthesis_report(run_dir: str, record_paths: list[str], original_paths: list[str], config) -> dict:
    """Write the report files and artifacts; return a summary of counts and paths (no patient values)."""
    run = RunLayout(run_dir)
    results, releases = synthesis_results(record_paths)
    originals = pd.DataFrame([json.loads(Path(p).read_text()) for p in original_paths])
    chance = chance_threshold(originals)
    results = flag_chance(results, chance)
    write_results_csv(results, run.results)
    spec = load_ehr_spec(config.spec)
    label, target, excluded = config.targets(spec)
    order = _budget_order(results["budget_label"])
    utility_sections, tables = [], {}
    if label is not None:
        for metric, title in (("tstr_auroc", "TSTR AUROC"), ("tstr_macro_f1", "TSTR macro-F1"),
                              ("tstr_average_precision", "TSTR average precision")):
            tables[metric] = su2023_table(results, originals, metric)
        tables["svm_accuracy"] = su2023_table(results, originals, "svm_accuracy")
        utility_sections += [
            f"## TSTR panel, {label}: AUROC (mean over the classifiers of the panel of Lee et al. 2022 "
            "fitted on each table, tested on real patients; mean (SD) over runs x releases)",
            _markdown(tables["tstr_auroc"]),
            *_chance_lines(results, originals, chance, label, order),
            f"## TSTR panel, {label}: macro-F1", _markdown(tables["tstr_macro_f1"]),
            f"## TSTR panel, {label}: average precision", _markdown(tables["tstr_average_precision"]),
            f"## SVM accuracy, {label} (Su et al. 2023; train on synthetic, test on real)",
            _markdown(tables["svm_accuracy"])]
    if target is not None:
        tables["rf_mse"] = su2023_table(results, originals, "rf_mse")
        utility_sections += [f"## Random forest MSE, {target} (Su et al. 2023)", _markdown(tables["rf_mse"])]
    # releases whose every table ended with no rows, or some of them: spent, not scored, not bundled; one line each
    empty = [n for n in (json.loads(Path(p).read_text()).get("empty_note") for p in record_paths) if n]
    if not utility_sections:
        utility_sections = ["## Utility", "No target: name a binary column under the spec's targets.classification "
                            "(or pass --classification-target) for the train-on-synthetic, test-on-real models."]
    raw_tables = results[~results["truncated"]]
    fidelity = raw_tables.groupby("budget_label")[FIDELITY].mean().reindex(order).reset_index()
    mixed = results[results["truncated"]].groupby("budget_label")[MIXED].mean().reindex(order).reset_index()
    costs = releases.groupby("budget_label")[["synthesizer", *RELEASE_COLUMNS[1:]]].first().join(
        releases.groupby("budget_label")["test_log_likelihood"].mean()).reindex(
        _budget_order(releases["budget_label"])).reset_index()
    plotted = ([("tstr_auroc", f"TSTR AUROC ({label})"), ("svm_accuracy", f"SVM accuracy ({label})")]
               if label is not None else []) + ([("rf_mse", f"RF MSE ({target})")] if target is not None else [])
    figure = None if results.empty else plot_synthesis_utility(  # no table scored: no figure
        results, originals, order, run.figure("utility_vs_budget"), plotted)
    train, _, summary = imputed_tables(run_dir, 0)
    public_count = spec.public_patient_count
    marginals = _marginal_figures(run.root, results, train, summary, spec)
    not_dp = sorted(g for g in set(releases["guarantee"]) if not g.startswith("DP"))
    synthesizers = sorted(set(releases["synthesizer"]), key=synthesizer_rank)
    in_release = config.missing == "in_release"
    guarantee = (("The DP guarantee covers each release's use of the training patients as delivered (each "
                  "attribute's missingness learned inside the release, a public placeholder for missing values, the "
                  "synthetic tables imputed afterwards by MICE fitted on themselves), and the split (a hash of each "
                  "patient alone): " if in_release else
                  "The DP guarantee covers each release's use of the imputed training patients: ")
                 + "a flow's DP-SGD "
                 "training (PRV epsilon; RDP and PLD alongside, and the GDP mu, whose CLT can underestimate), and AIM's "
                 "or MST's noisy marginals (with aim_dyadic also the noisy dyadic histograms of values within bins; "
                 "zCDP converted to (epsilon, delta)); noise and sampling come "
                 "from OS entropy and are never stored. "
                 + (f"Releases marked {', '.join(not_dp)} have no guarantee. " if not_dp else "")
                 + ("Releases marked weak have an epsilon above privacy.epsilon_ceiling (allowed by "
                    "privacy.allow_above_ceiling): DP in name, little protection in fact. "
                    if any("weak" in g for g in releases["guarantee"]) else "")
                 + ("Table sizes: the spec declares the patient count public. " if public_count else
                    "Table sizes: a patient count released with two-sided geometric noise (in the ledger). ")
                 + ("The spec was drafted from the data (drafted_from_data): its bounds and categories were read "
                    "from the patients, so every table's scaling and decoding is outside the guarantee and the "
                    "tables stay under intermediate/. " if spec.drafted_from_data else "")
                 + ("Not covered: validation" if in_release else
                    "Not covered (synthesis.missing: mice_first, the papers' order): validation, MICE (fitted on the "
                    "private training patients before DP training, so no release is DP end to end), dropping "
                    "attributes by missingness on the training patients")
                 + ("" if config.scaling == "bounds" or "maf" not in synthesizers else
                    ", the MAF's scaling by training means and standard deviations (visible in every synthetic table, "
                    "so those tables stay under intermediate/)")
                 + ", and the evaluation numbers in this report (utility, fidelity, DCR, membership inference, "
                   "held-out log-likelihood: aggregates computed on real patients without noise). All releases of "
                   "one table compose: the privacy ledger holds the total. The non-private (inf) tables are "
                   "comparisons only and stay under intermediate/, as do the real-vs-synthetic marginal figures.")
    patients = f"{summary.decisions['records_read']} patients delivered, " if public_count else ""
    markdown = "\n\n".join([
        f"# Synthesis: {summary.spec} ({patients}{len(summary.attributes)} attributes, m = {summary.m}; "
        f"{', '.join(synthesizer_display_name(s) for s in synthesizers)})",
        f"{len(releases)} releases, {len(results)} synthetic tables (raw, and decoded to the spec: categories, "
        "integers, bounds). Utility inputs leave out " + (", ".join(excluded) if excluded else "no column") + ".",
        *([f"**Warning: tables with no rows**: {'; '.join(empty)}."] if empty else []),
        *utility_sections,
        "## Mixed-type fidelity (decoded tables vs real training patients, as Lee et al. 2022: TV of discrete "
        "columns, Kendall-tau matrix RMSE / MAE, share of values that are no valid value of their column)",
        _markdown(mixed),
        "## Fidelity (raw tables vs real training patients; detection AUROC 0.5 = indistinguishable; "
        "share closer to train ~0.5 = no copying)", _markdown(fidelity),
        *_membership_section(results, order),
        "## Releases and their cost (test_log_likelihood: mean held-out log p(x) per patient in original units, "
        "a lower bound for DP-HFlow's dequantized columns)",
        _markdown(costs),
        "## What the guarantee covers", guarantee,
        (f"![utility]({figure.name})" if figure else "")
        + (f"\n\nReal-vs-synthetic marginals: {', '.join(f'`{m}`' for m in marginals)} (not versioned)"
           if marginals else ""),
    ])
    run.report_md.write_text(markdown + "\n")
    if publishes_artifacts():
        create_markdown_artifact(markdown, key="privehr-synthesis-report", description="synthesis report")
        create_table_artifact(json.loads(costs.to_json(orient="records")), key="privehr-synthesis-releases",
                              description="synthesis releases: synthesizer, mechanism, sigma, q, T, delta, epsilon, mu")
    run_logger().info("synthesis report: %d releases, %d tables%s", len(releases), len(results),
                      f" ({len(empty)} release(s) with tables that ended with no rows)" if empty else "")
    return {"run_dir": run_dir, "report": str(run.report_md), "results": str(run.results),
            "flows": int(len(releases)), "tables": int(len(results)), "synthesizers": synthesizers,
            "targets": {"classification": label, "regression": target, "excluded_features": excluded},
            **{k: json.loads(v.to_json(orient="records")) for k, v in tables.items()},
            "releases": json.loads(costs.to_json(orient="records")), "guarantee": guarantee,
            "membership_inference": json.loads(membership_table(results, order).to_json(orient="records")),
            "mean_svm_accuracy_by_budget": {b: float(v) for b, v in raw_accuracy(results, "svm_accuracy").items()},
            "mean_tstr_auroc_by_budget": {b: float(v) for b, v in raw_accuracy(results, "tstr_auroc").items()},
            "tstr_chance": chance, "empty_releases": empty,
            "tstr_no_better_than_chance": int(results.get("tstr_no_better_than_chance",
                                                          pd.Series(dtype=object)).fillna(False).astype(bool).sum())}


def _marginal_figures(run_dir: Path, results: pd.DataFrame, train: pd.DataFrame, summary: ImputationSummary,
                      spec) -> list[Path]:
    """Real (training) vs each synthesizer's first decoded table at its loosest DP budget, under intermediate/ (the
    real histograms are patient-level detail)."""
    dp_tables = results[(results["imputation"] == 0) & results["truncated"] & results["mechanism"].ne("non_private")]
    if dp_tables.empty:
        return []
    attributes = summary.attributes
    codec = TableCodec.from_spec(spec, attributes, require_bounds=False)
    synthetic, shown = {}, set()
    for label in _budget_order(dp_tables["budget_label"]):  # each synthesizer's loosest DP budget
        synthesizer = dp_tables.loc[dp_tables["budget_label"] == label, "synthesizer"].iloc[0]
        if synthesizer in shown:
            continue
        shown.add(synthesizer)
        job = dp_tables[dp_tables["budget_label"] == label].iloc[0]["job_id"]
        path = [f for f in json.loads(RunLayout(run_dir).release(job).read_text())["files"] if f["truncated"]][0]
        table = pd.read_csv(path["path"])
        table[attributes] = codec.encode_labels(table[attributes])
        synthetic[f"{synthesizer_display_name(synthesizer)} ({label.rpartition(' ')[2]})"] = table[attributes]
    kinds = {c: spec.kinds()[c] for c in attributes}
    categories = {c: v for c, v in spec.codes().items() if c in attributes}
    return [marginal_histograms(train[attributes], synthetic, kinds, RunLayout(run_dir).marginals_figure,
                                categories=categories)]


def raw_accuracy(results: pd.DataFrame, metric: str = "svm_accuracy") -> pd.Series:
    """Mean ``metric`` of the raw (untruncated) tables per budget, loosest budget first (empty without it)."""
    if metric not in results:
        return pd.Series(dtype=float)
    raw = results[~results["truncated"].astype(bool)].groupby("budget_label")[metric].mean()  # read back empty: object
    return raw.reindex(_budget_order(raw.index))
