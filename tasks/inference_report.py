"""Report of ``privehr-private-inference``: Tables 6 and 7 of Su et al. 2023 in shape, the privacy each column
cost, and figures of the marginal and pairwise posteriors.

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.

Files in the run directory: ``inference.json`` (every column: mean and SD over runs of the posterior mean, SD and
correlation matrix, with the plan's sigma and epsilon by PRV and RDP), ``report.md``, ``posterior_marginals.png``
and ``posterior_pairs.png``; the report also as a Prefect artifact.
"""

from __future__ import annotations

import base64
import json
from itertools import combinations
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from prefect import task  # noqa: E402
from prefect.artifacts import create_markdown_artifact  # noqa: E402

from privehr.models.inference.run_summary import summarise_posteriors  # noqa: E402
from privehr.core.run_layout import RunLayout  # noqa: E402
from privehr.core.inference_config import InferenceConfig  # noqa: E402
from privehr.core.strict_json import strict_dumps  # noqa: E402
from privehr.tasks.private_inference import EXACT_KEY, inference_likelihood  # noqa: E402
from privehr.tasks.run_logging import publishes_artifacts  # noqa: E402

__all__ = ["write_inference_report", "inference_columns", "route_table", "format_cell", "versus_exact"]

ROUTE_TITLES = {"dp_nf_vi/free_energy": "DP-NF-VI, free-energy loss (Algorithm 2; Su et al. 2023, Table 6)",
                "dp_nf_vi/tempered": "DP-NF-VI, tempered free energy (the alternative loss)",
                "synthetic_vi/free_energy": "NF-VI on DP-NF synthetic data (Su et al. 2023, Table 7)"}


def _column_key(result: dict) -> str:
    if result["route"] in ("exact", "nf_vi"):
        return result["route"]
    return f"{result['route']}/{result['loss']}/mu{result['mu']:g}"


def inference_columns(paths: list[str]) -> dict[str, dict]:
    """Column key -> {runs: summarise_posteriors(...), privacy, guarantee, seconds, results}; the exact one as is."""
    grouped: dict[str, list[dict]] = {}
    for path in paths:
        result = json.loads(Path(path).read_text())
        grouped.setdefault(_column_key(result), []).append(result)
    columns = {}
    for key, results in grouped.items():
        results.sort(key=lambda r: r.get("run", 0))
        first = results[0]
        column = {"route": first["route"], "loss": first.get("loss"), "mu": first.get("mu"),
                  "guarantee": sorted({r["guarantee"] for r in results}),
                  "seconds": sum(r["seconds"] for r in results), "keys": [r["key"] for r in results],
                  "runs": summarise_posteriors([r["summary"] for r in results])}
        if first.get("plan"):
            plan = first["plan"]
            column["privacy"] = {k: plan[k] for k in ("mu", "noise_multiplier", "sample_rate", "steps",
                                                      "max_grad_norm", "delta", "epsilon", "epsilon_prv",
                                                      "epsilon_rdp", "epsilon_pld", "epsilon_gdp")}
        if key == EXACT_KEY:
            column["effective_sample_size"] = first["effective_sample_size"]
            column["reliable"] = first["reliable"]
        columns[key] = column
    exact = columns.get(EXACT_KEY)
    if exact is not None:
        truth = exact["runs"]
        for column in columns.values():
            column["vs_exact"] = versus_exact(column["runs"], truth)
    return columns


def versus_exact(runs: dict, exact: dict) -> dict:
    """How far a column's (run-averaged) posterior is from the exact one: correlation RMSE and SD ratio."""
    corr, ref = np.array(runs["correlation"]["mean"]), np.array(exact["correlation"]["mean"])
    upper = np.triu_indices(len(corr), 1)
    sd_ratio = np.array(runs["sd"]["mean"]) / np.array(exact["sd"]["mean"])
    mean_error = np.abs(np.array(runs["mean"]["mean"]) - np.array(exact["mean"]["mean"])) / np.array(exact["sd"]["mean"])
    return {"correlation_rmse": float(np.sqrt(np.mean((corr[upper] - ref[upper]) ** 2))),
            "sd_ratio": sd_ratio.tolist(), "mean_error_in_exact_sds": mean_error.tolist()}


def format_cell(runs: dict, key: str, index, digits: int = 4) -> str:
    mean, sd = runs[key]["mean"], runs[key]["sd"]
    for i in (index if isinstance(index, tuple) else (index,)):
        mean, sd = mean[i], sd[i]
    return f"{mean:.{digits}f}" if runs["runs"] == 1 else f"{mean:.{digits}f} ({sd:.{digits}f})"


def _dp_head(column: dict) -> str:
    privacy, not_dp = column["privacy"], [g for g in column["guarantee"] if g != "DP"]
    return (f"mu = {column['mu']:g} (sigma {privacy['noise_multiplier']:.2f}, eps {privacy['epsilon_prv']:.2f}"
            + (f"; {', '.join(not_dp)}" if not_dp else "") + ")")


def route_table(columns: dict, route: str, names: tuple[str, ...], mus: list[float]) -> str:
    """The table shape of Su et al. 2023: rows posterior mean / SD / correlation of each parameter, columns exact,
    NF-VI and each mu; cells "mean (SD over runs)"."""
    keys = [k for k in ("exact", "nf_vi") if k in columns] + [f"{route}/mu{mu:g}" for mu in mus
                                                              if f"{route}/mu{mu:g}" in columns]
    if not any(k.startswith(route) for k in keys):
        return ""
    heads = {"exact": "exact posterior" if columns.get("exact", {}).get("reliable", True)
             else "exact posterior (UNRELIABLE: small effective sample)", "nf_vi": "NF-VI (non-private)"}
    header = ["parameter"] + [heads.get(k) or _dp_head(columns[k]) for k in keys]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    runs = {k: (columns[k]["runs"]) for k in keys}
    for block, key in (("Posterior mean", "mean"), ("Posterior SD", "sd")):
        lines.append(f"| **{block}** |" + " |" * len(keys))
        for i, name in enumerate(names):
            lines.append(f"| {name} | " + " | ".join(format_cell(runs[k], key, i) for k in keys) + " |")
    lines.append("| **Posterior correlation** |" + " |" * len(keys))
    for i, j in combinations(range(len(names)), 2):
        lines.append(f"| {names[i]}, {names[j]} | " + " | ".join(format_cell(runs[k], "correlation", (i, j)) for k in keys)
                     + " |")
    if "exact" in columns:
        lines.append("| correlation RMSE vs exact | " + " | ".join(
            f"{columns[k]['vs_exact']['correlation_rmse']:.3f}" for k in keys) + " |")
    return "\n".join(lines)


def _draws(run_dir: Path, key: str) -> np.ndarray | None:
    path = RunLayout(run_dir).posterior_draws(key)
    return np.load(path) if path.exists() else None


def _figures(run_dir: Path, columns: dict, names: tuple[str, ...], mus: list[float]) -> list[Path]:
    routes = [r for r in ROUTE_TITLES if any(k.startswith(r) for k in columns)]
    exact = _draws(run_dir, EXACT_KEY)
    colours = plt.cm.viridis(np.linspace(0, 0.9, max(len(mus), 1)))
    fig, axes = plt.subplots(len(routes), len(names), figsize=(3.0 * len(names), 2.6 * len(routes)), squeeze=False)
    for row, route in zip(axes, routes):
        for d, ax in enumerate(row):
            if exact is not None:
                ax.hist(exact[:, d], bins=40, density=True, histtype="step", color="black", label="exact")
            for colour, mu in zip(colours, mus):
                key = columns.get(f"{route}/mu{mu:g}", {}).get("keys", [None])[0]
                draws = _draws(run_dir, key) if key else None
                if draws is not None:
                    ax.hist(draws[:, d], bins=40, density=True, histtype="step", color=colour, label=f"mu {mu:g}")
            ax.set_xlabel(names[d])
            ax.set_yticks([])
        row[0].set_ylabel(route.replace("/", "\n"), fontsize=8)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Marginal posteriors (first run of each column)")
    fig.tight_layout()
    marginals = RunLayout(run_dir).figure("posterior_marginals")
    fig.savefig(marginals, dpi=90)
    plt.close(fig)

    pairs = list(combinations(range(len(names)), 2))
    fig, axes = plt.subplots(len(routes), len(pairs), figsize=(2.4 * len(pairs), 2.4 * len(routes)), squeeze=False)
    for row, route in zip(axes, routes):
        key = columns.get(f"{route}/mu{max(mus):g}", {}).get("keys", [None])[0] if mus else None
        draws = _draws(run_dir, key) if key else None
        for (i, j), ax in zip(pairs, row):
            if draws is not None:
                ax.scatter(draws[:, i], draws[:, j], s=1, alpha=0.3, color="tab:orange", label=f"mu {max(mus):g}")
            if exact is not None:
                ax.scatter(exact[:, i], exact[:, j], s=1, alpha=0.3, color="black", label="exact")
            ax.set_xlabel(names[i], fontsize=7)
            ax.set_ylabel(names[j], fontsize=7)
            ax.tick_params(labelsize=6)
        row[0].set_title(route, fontsize=7, loc="left")
    fig.suptitle(f"Pairwise posteriors at the largest budget, mu {max(mus):g} (orange), and exact (black)")
    fig.tight_layout()
    pairwise = RunLayout(run_dir).figure("posterior_pairs")
    fig.savefig(pairwise, dpi=80)
    plt.close(fig)
    return [marginals, pairwise]


@task(name="write-inference-report")
def write_inference_report(run_dir: str, paths: list[str], config: InferenceConfig) -> dict:
    """Tables 6 and 7 in shape, the privacy of each column, figures; return the summary."""
    run_path = Path(run_dir)
    names = inference_likelihood(config).parameter_names
    columns = inference_columns(paths)
    sections = []
    for route, title in ROUTE_TITLES.items():
        table = route_table(columns, route, names, config.mus)
        if table:
            sections.append(f"## {title}\n\n{table}\n")
    figures = _figures(run_path, columns, names, config.mus)
    delta = config.privacy.delta
    comparison = [f"| {k} | {c['vs_exact']['correlation_rmse']:.3f} | "
                  f"{np.mean(c['vs_exact']['sd_ratio']):.2f} | {max(c['vs_exact']['mean_error_in_exact_sds']):.2f} |"
                  for k, c in columns.items() if "vs_exact" in c and k != EXACT_KEY]
    markdown = (
        f"# privehr private inference {run_path.name}\n\n"
        f"Model `{config.model}`; every cell is the mean (SD) over {config.runs} run(s). Each DP column is one "
        f"mu-GDP budget per release: sigma from mu, q and T, epsilon at delta {delta:g} by the PRV accountant "
        "(RDP and PLD in inference.json). The exact posterior and the non-private NF-VI are not private: they are "
        "recorded in the ledger as releases without a guarantee."
        + (" **Releases made with reproducible noise (privacy.reproducible_noise) are not DP**, whatever their "
           "epsilon says." if config.privacy.reproducible_noise else "") + "\n\n" + "\n".join(sections) +
        "\n## Distance to the exact posterior\n\n| column | correlation RMSE | mean SD ratio | worst mean error "
        "(exact SDs) |\n|---|---|---|---|\n" + "\n".join(comparison) + "\n\n"
        + "".join(f"![{p.stem}]({p.name})\n\n" for p in figures) + f"Artifacts: `{run_path}`\n")
    RunLayout(run_path).report_md.write_text(markdown)
    summary = {"run_id": run_path.name, "run_dir": str(run_path), "report": str(RunLayout(run_path).report_md),
               "figures": [str(p) for p in figures], "parameters": list(names), "columns": columns,
               "releases": len(paths)}
    RunLayout(run_path).inference_summary.write_text(strict_dumps(summary, indent=2))
    if publishes_artifacts():
        inline = markdown
        for p in figures:
            inline = inline.replace(f"({p.name})", f"(data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()})")
        create_markdown_artifact(inline, key="privehr-private-inference", description=f"Run {run_path.name}")
    return summary
