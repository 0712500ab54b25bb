"""Figures of a run, written as PNG files.

References: Bridges et al. 2023 (arXiv:2311.09200); Lee et al. 2022 (AAAI); Su et al. 2023 (arXiv:2302.05787).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from privehr.models.evaluation.mixed_fidelity import is_discrete  # noqa: E402

__all__ = ["plot_auroc_vs_epsilon", "auroc_vs_epsilon_figure", "plot_expm_boxplots", "plot_synthesis_utility", "plot_reliability",
           "plot_subgroup_cost", "marginal_histograms"]


def _label(method: str) -> str:
    """A method's figure label, from its class (imported here: the training methods load torch, which reading the
    figures module need not)."""
    from privehr.models.methods import method_display_name

    return method_display_name(method, figure=True)


def _save(fig, path: Path, dpi: int = 120) -> None:
    """Lay out, write (creating the directory) and close a figure."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def _dress(ax, xlabel: str, ylabel: str, label: str, model: str, legend_size: int) -> None:
    """Axis labels, the (label, model) title, a light grid and the legend of one panel."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{label}, {model.replace('_', ' ')}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size)


def plot_auroc_vs_epsilon(summary: pd.DataFrame, path: Path) -> Path:
    """Median test AUROC against epsilon, one panel per (label, model), as in Figures 2-3 of Bridges et al. 2023.

    Private methods are lines over epsilon (log axis), one per loss; the non-private baseline (best
    median over losses) is a dashed horizontal line.
    """
    _save(auroc_vs_epsilon_figure(summary), path)
    return path


def auroc_vs_epsilon_figure(summary: pd.DataFrame):
    """The figure of :func:`plot_auroc_vs_epsilon`, its panels on one y-range (a reader compares them by eye)."""
    panels = list(summary[["label", "model"]].drop_duplicates().itertuples(index=False))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False, sharey=True)
    for ax, (label, model) in zip(axes[0], panels):
        part = summary[(summary["label"] == label) & (summary["model"] == model)]
        private = part[np.isfinite(part["target_epsilon"])]
        for (method, loss), line in private.groupby(["method", "loss"]):
            line = line.sort_values("target_epsilon")
            ax.plot(line["target_epsilon"], line["auroc_median"], marker="o",
                    label=f"{_label(method)} ({loss})")
        baseline = part[part["method"] == "non_private"]
        if len(baseline):
            ax.axhline(baseline["auroc_median"].max(), linestyle="--", color="black", label="non-private")
        ax.set_xscale("log")
        _dress(ax, "target epsilon (eps~ for ExpM+NF)", "median test AUROC", label, model, legend_size=7)
    return fig


def plot_expm_boxplots(draws: pd.DataFrame, path: Path) -> Path | None:
    """Box plots of the test AUROC of every ExpM+NF draw (all flows of a cell pooled) per eps~, one panel
    per (label, model), as the box plots of Bridges et al. 2023. ``draws``: label, model, target_epsilon, auroc."""
    if draws.empty:
        return None
    panels = list(draws[["label", "model"]].drop_duplicates().itertuples(index=False))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False, sharey=True)
    for ax, (label, model) in zip(axes[0], panels):
        part = draws[(draws["label"] == label) & (draws["model"] == model)]
        epsilons = sorted(part["target_epsilon"].unique())
        ax.boxplot([part.loc[part["target_epsilon"] == e, "auroc"].dropna() for e in epsilons],
                   tick_labels=[f"{e:g}" for e in epsilons], showfliers=False)
        ax.set_xlabel("eps~ (no proven DP)")
        ax.set_ylabel("test AUROC of each draw")
        ax.set_title(f"ExpM+NF: {label}, {model.replace('_', ' ')}")
        ax.grid(alpha=0.3)
    _save(fig, path)
    return path


def plot_synthesis_utility(results: pd.DataFrame, originals: pd.DataFrame, budgets: list[str], path: Path,
                           metrics: list[tuple[str, str]] | None = None) -> Path | None:
    """Each (metric, title) per budget (mean +- SD over tables), raw and decoded/truncated, with the train-on-real
    baseline dashed (default: the SVM accuracy and RF MSE of Su et al. 2023). None when there is no metric to plot."""
    metrics = [(m, t) for m, t in (metrics if metrics is not None else
                                   [("svm_accuracy", "SVM accuracy"), ("rf_mse", "RF MSE")]) if m in results]
    if not metrics:
        return None
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.5 * len(metrics), 3.6), squeeze=False)
    for ax, (metric, name) in zip(axes.ravel(), metrics):
        for truncated, marker in ((False, "o"), (True, "s")):
            part = results[results["truncated"] == truncated].groupby("budget_label")[metric]
            mean, sd = part.mean().reindex(budgets), part.std(ddof=1).reindex(budgets).fillna(0)
            ax.errorbar(range(len(budgets)), mean, yerr=sd, marker=marker, capsize=3,
                        label="decoded" if truncated else "raw")
        if metric in originals:
            ax.axhline(originals[metric].mean(), ls="--", color="k", label="train on real")
        ax.set_xticks(range(len(budgets)), budgets, rotation=30, ha="right", fontsize=7)
        ax.set_title(name, fontsize=9)
        ax.legend(fontsize=7)
    _save(fig, path)
    return path


def _discrete_panel(ax, real: pd.Series, synthetic: dict[str, pd.DataFrame], column: str, levels) -> None:
    """Grouped bars of the share of rows at each real category; values outside them (invalid, unseen, NaN)
    pooled into one last bar "other"."""
    levels = list(levels) if levels is not None else sorted(real.dropna().unique(), key=lambda v: (str(type(v)), v))
    series = {"real": real, **{name: frame[column] for name, frame in synthetic.items()}}
    shares = {}
    for name, values in series.items():
        counts = pd.Series(values).value_counts(dropna=True)
        share = np.array([counts.get(level, 0) for level in levels], float) / max(len(values), 1)
        shares[name] = np.r_[share, 1.0 - share.sum()]
    labels = [f"{v:g}" if isinstance(v, (float, np.floating)) else str(v) for v in levels]
    if max(s[-1] for s in shares.values()) > 1e-12:
        labels.append("other")
    width = 0.8 / len(series)
    for i, (name, share) in enumerate(shares.items()):
        ax.bar(np.arange(len(labels)) + (i - (len(series) - 1) / 2) * width, share[:len(labels)], width,
               color="0.6" if name == "real" else f"C{i - 1}", label=name)
    ax.set_xticks(np.arange(len(labels)), labels, rotation=45 if len(labels) > 4 else 0, fontsize=6)
    ax.set_ylabel("share of rows", fontsize=6)


def _continuous_panel(ax, real: pd.Series, synthetic: dict[str, pd.DataFrame], column: str) -> None:
    """The real histogram filled, each synthesizer's as a step line, on common bins over the pooled
    0.5-99.5 percentiles."""
    values = {"real": real, **{name: frame[column] for name, frame in synthetic.items()}}
    values = {k: pd.to_numeric(pd.Series(v), errors="coerce").to_numpy(float) for k, v in values.items()}
    values = {k: v[np.isfinite(v)] for k, v in values.items()}
    pooled = np.concatenate(list(values.values()))
    if not len(pooled):
        return
    low, high = np.percentile(pooled, [0.5, 99.5])
    low, high = (low - 0.5, high + 0.5) if high <= low else (low, high)
    bins = np.linspace(low, high, 31)
    for i, (name, x) in enumerate(values.items()):
        if not len(x):
            continue
        density, _ = np.histogram(x, bins=bins, density=True)  # one artist per histogram (ax.hist: one per bar)
        if name == "real":
            ax.stairs(density, bins, fill=True, color="0.6", alpha=0.6, label=name)
        else:
            ax.stairs(density, bins, linewidth=1.2, color=f"C{i - 1}", label=name)
    ax.set_ylabel("density", fontsize=6)


def marginal_histograms(real: pd.DataFrame, synthetic: dict[str, pd.DataFrame], kinds: dict, path: Path,
                        categories: dict | None = None) -> Path:
    """One panel per column of ``real``, real against each synthesizer (Lee et al. 2022, Fig. 3): grouped bars of
    category shares for discrete columns (the rule of :func:`privehr.models.evaluation.mixed_fidelity.is_discrete`; invalid
    synthetic values such as a 0.37 in a binary column show as the "other" bar), overlaid histograms (real
    filled, synthesizers as step lines, density) for continuous ones. Titled by column name only."""
    categories = categories or {}
    columns = list(real.columns)
    ncols = min(4, max(len(columns), 1))
    nrows = max(-(-len(columns) // ncols), 1)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.0 * ncols, 2.3 * nrows), squeeze=False)
    for ax, column in zip(axes.flat, columns):
        if is_discrete(kinds[column], real[column]):
            _discrete_panel(ax, real[column], synthetic, column, categories.get(column))
        else:
            _continuous_panel(ax, real[column], synthetic, column)
        ax.set_title(str(column), fontsize=8)
        ax.tick_params(labelsize=6)
        ax.grid(alpha=0.3, axis="y")
    for ax in axes.flat[len(columns):]:
        ax.axis("off")
    axes[0, 0].legend(fontsize=6)
    _save(fig, Path(path), dpi=110)
    return Path(path)


def _eps_text(eps: float) -> str:
    return "non-private" if not np.isfinite(eps) else f"eps {eps:g}"


def plot_reliability(cells: list[dict], path: Path) -> Path | None:
    """Reliability diagrams (equal-mass bins of the median-AUROC seed), one panel per (label, model)."""
    if not cells:
        return None
    panels = sorted({(c["label"], c["model"]) for c in cells})
    ncols = min(len(panels), 4)
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 4.4 * nrows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (label, model) in zip(axes.flat, panels):
        for c in cells:
            if (c["label"], c["model"]) != (label, model):
                continue
            points = c["reliability"]
            style = "--" if c["method"] == "non_private" else "-"
            ax.plot([p["predicted"] for p in points], [p["observed"] for p in points], style, marker=".",
                    label=f"{_label(c['method'])} ({c['loss']}), "
                          f"{_eps_text(c['target_epsilon'])}: ECE {c['ece']:.3f}")
        ax.plot([0, 1], [0, 1], "k:", label="perfect calibration")
        _dress(ax, "mean predicted probability (bin)", "observed rate (bin)", label, model, legend_size=6)
    _save(fig, path)
    return path


def plot_subgroup_cost(costs: list[dict], path: Path) -> Path | None:
    """Privacy cost (non-private minus DP-SGD AUROC) per subgroup and epsilon with its paired interval, one
    panel per (label, model, loss); a cost whose interval holds 0 is hatched; groups too small to report are
    left out (ExpM+NF's costs are in the table only)."""
    rows = [r for r in costs if r["cost"] is not None and r["method"] == "dp_sgd"]
    if not rows:
        return None
    frame = pd.DataFrame(rows)
    frame["group_name"] = frame["attribute"] + ": " + frame["group"]
    panels = list(frame[["label", "model", "method", "loss"]].drop_duplicates().itertuples(index=False))
    ncols = min(len(panels), 2)
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(8 * ncols, 3.6 * nrows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (label, model, method, loss) in zip(axes.flat, panels):
        part = frame[(frame["label"] == label) & (frame["model"] == model) & (frame["method"] == method)
                     & (frame["loss"] == loss)]
        names = list(dict.fromkeys(part["group_name"]))
        epsilons = sorted(part["target_epsilon"].unique())
        width = 0.8 / max(len(epsilons), 1)
        for i, eps in enumerate(epsilons):
            at = part[part["target_epsilon"] == eps].set_index("group_name")
            cost = np.array([at["cost"].get(n, np.nan) for n in names], float)
            ci = np.array([at["cost_ci"].get(n, [np.nan, np.nan]) for n in names], float)
            beyond = [bool(at["cost_beyond_noise"].get(n, False)) for n in names]
            bars = ax.bar(np.arange(len(names)) + i * width, cost, width, color=f"C{i}",
                          yerr=np.abs(np.vstack([cost - ci[:, 0], ci[:, 1] - cost])), capsize=2,
                          error_kw={"linewidth": 0.7})
            for bar, solid in zip(bars, beyond):
                if not solid:
                    bar.set_hatch("//")
                    bar.set_alpha(0.5)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2, names, rotation=30, ha="right", fontsize=7)
        ax.set_ylabel("non-private - private AUROC\n(hatched: interval holds 0)", fontsize=8)
        ax.legend(handles=[Patch(color=f"C{i}", label=_eps_text(eps)) for i, eps in enumerate(epsilons)], fontsize=7)
        ax.set_title(f"privacy cost by subgroup: {label}, {model.replace('_', ' ')}, "
                     f"{_label(method)} ({loss})", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    _save(fig, path, dpi=110)
    return path
