"""Figures of a run, written as PNG files."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

__all__ = ["plot_auroc_vs_epsilon", "plot_expm_boxplots"]

METHOD_LABELS = {"dp_sgd": "DP-SGD", "expm_nf": "ExpM+NF (eps~, no proven DP)"}


def plot_auroc_vs_epsilon(summary: pd.DataFrame, path: Path) -> Path:
    """Median test AUROC against epsilon, one panel per (label, model), as seed 000's Figures 2-3.

    Private methods are lines over epsilon (log axis), one per loss; the non-private baseline (best
    median over losses) is a dashed horizontal line.
    """
    panels = summary[["label", "model"]].drop_duplicates().itertuples(index=False)
    panels = list(panels)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, (label, model) in zip(axes[0], panels):
        part = summary[(summary["label"] == label) & (summary["model"] == model)]
        private = part[np.isfinite(part["target_epsilon"])]
        for (method, loss), line in private.groupby(["method", "loss"]):
            line = line.sort_values("target_epsilon")
            ax.plot(line["target_epsilon"], line["auroc_median"], marker="o",
                    label=f"{METHOD_LABELS.get(method, method)} ({loss})")
        baseline = part[part["method"] == "non_private"]
        if len(baseline):
            ax.axhline(baseline["auroc_median"].max(), linestyle="--", color="black", label="non-private")
        ax.set_xscale("log")
        ax.set_xlabel("target epsilon (eps~ for ExpM+NF)")
        ax.set_ylabel("median test AUROC")
        ax.set_title(f"{label}, {model.replace('_', ' ')}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_expm_boxplots(draws: pd.DataFrame, path: Path) -> Path | None:
    """Box plots of the test AUROC of every ExpM+NF draw (all flows of a cell pooled) per eps~, one panel
    per (label, model), as seed 000's box plots. ``draws``: label, model, target_epsilon, auroc."""
    if draws.empty:
        return None
    panels = list(draws[["label", "model"]].drop_duplicates().itertuples(index=False))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, (label, model) in zip(axes[0], panels):
        part = draws[(draws["label"] == label) & (draws["model"] == model)]
        epsilons = sorted(part["target_epsilon"].unique())
        ax.boxplot([part.loc[part["target_epsilon"] == e, "auroc"].dropna() for e in epsilons],
                   tick_labels=[f"{e:g}" for e in epsilons], showfliers=False)
        ax.set_xlabel("eps~ (no proven DP)")
        ax.set_ylabel("test AUROC of each draw")
        ax.set_title(f"ExpM+NF: {label}, {model.replace('_', ' ')}")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
