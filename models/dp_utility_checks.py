"""Sanity checks of DP-SGD's privacy-utility curve, as seed 000's figure is read.

For each (label, model, loss) with DP-SGD cells, over the target epsilons e_1 < ... < e_k:

* below the baseline: every median test AUROC stays below the non-private baseline of the (label,
  model), the best median over losses. A DP model that beats it points at an under-trained baseline
  (or a bug), not at a free lunch;
* no decrease beyond seed noise: a step from e_i to a larger e_j lowers the AUROC beyond seed noise
  when every seed at e_j scores below every seed at e_i (the seed ranges do not overlap; with 3 seeds
  an unchanged AUROC falls so by chance with probability 1/C(6,3) = 1/20 per pair, and a 4-epsilon
  grid compares 6 pairs per curve, so a flat curve is flagged now and then).

An epsilon whose seeds are not all finite (a diverged model, a one-class test split) fails both checks.
The baseline check has no tolerance: the issue asks for "below", and a tie is worth a look.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["check_dp_sgd_curves"]


def check_dp_sgd_curves(runs: pd.DataFrame) -> list[dict]:
    """One record per (label, model, loss) with DP-SGD runs; ``runs`` holds one row per (cell, seed)."""
    checks = []
    dp = runs[runs["method"] == "dp_sgd"]
    for (label, model, loss), cells in dp.groupby(["label", "model", "loss"], sort=True):
        plain = runs[(runs["method"] == "non_private") & (runs["label"] == label) & (runs["model"] == model)]
        baseline = float(plain.groupby("loss")["auroc"].median().max()) if len(plain) else float("nan")
        seeds = {float(e): g["auroc"].to_numpy(float) for e, g in cells.groupby("target_epsilon", sort=True)}
        epsilons = sorted(seeds)
        medians = {e: float(np.median(seeds[e])) for e in epsilons}
        not_finite = [e for e in epsilons if not np.isfinite(seeds[e]).all()]
        above = [e for e in epsilons if e not in not_finite and np.isfinite(baseline) and medians[e] >= baseline]
        drops = [{"from": a, "to": b, "auroc_from": medians[a], "auroc_to": medians[b]}
                 for i, a in enumerate(epsilons) for b in epsilons[i + 1:]
                 if a not in not_finite and b not in not_finite and seeds[b].max() < seeds[a].min()]
        checks.append({"label": label, "model": model, "loss": loss, "non_private_baseline": _finite(baseline),
                       "epsilons": epsilons, "auroc_medians": [_finite(medians[e]) for e in epsilons],
                       "not_finite": not_finite,
                       "below_baseline": bool(np.isfinite(baseline)) and not above and not not_finite,
                       "at_or_above_baseline": above,
                       "no_decrease_beyond_seed_noise": not drops and not not_finite, "decreases": drops})
    return checks


def _finite(x: float) -> float | None:
    """None for NaN, so the checks stay valid JSON."""
    return x if np.isfinite(x) else None
