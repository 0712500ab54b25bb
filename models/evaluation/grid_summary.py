"""Summaries of a training grid: medians over seeds, as Bridges et al. 2023 report them.

References:
    Bridges, Tombs, Stanley (2023). Are Normalizing Flows the Key to Unlocking the Exponential Mechanism?
    arXiv:2311.09200.

For each (label, model, method, loss, target epsilon) the test AUROC and AUPRC are the medians over
seeds; the spent epsilon is the largest over seeds (by each accountant), and a cell whose runs carry
different guarantees (never, within one run) lists them all. The non-private baseline of a (label, model) is
the best median over losses (Bridges et al. 2023, ``plot_results.py``).
"""

from __future__ import annotations

import pandas as pd

__all__ = ["summarise_grid", "GROUP"]

GROUP = ["label", "model", "method", "loss", "target_epsilon"]


def summarise_grid(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per grid cell with median metrics over seeds and the worst-case epsilon spent."""
    runs = runs.copy()
    runs["target_epsilon"] = runs["target_epsilon"].fillna(float("inf"))  # non-private: epsilon = inf
    agg = {"auroc": "median", "auprc": "median", "seed": "count"}
    for col in ("epsilon_prv", "epsilon_rdp", "epsilon_pld", "noise_multiplier"):
        if col in runs:
            agg[col] = "max"
    if "guarantee" in runs:
        agg["guarantee"] = lambda g: "; ".join(sorted(set(g.dropna())))
    for col in ("auroc_bayes", "auroc_map", "gap_std"):  # ExpM+NF diagnostics (NaN for other methods)
        if col in runs:
            agg[col] = "median"
    table = runs.groupby(GROUP, sort=True).agg(agg).rename(columns={"seed": "seeds"}).reset_index()
    table = table.rename(columns={"auroc": "auroc_median", "auprc": "auprc_median"})
    return table.sort_values(["label", "model", "method", "loss", "target_epsilon"]).reset_index(drop=True)
