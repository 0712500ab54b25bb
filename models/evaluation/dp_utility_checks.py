"""Sanity checks of DP-SGD's privacy-utility curve, as the figure of Bridges et al. 2023 is read.

References:
    Bridges, Tombs, Stanley (2023). Are Normalizing Flows the Key to Unlocking the Exponential Mechanism?
    arXiv:2311.09200.

For each (label, model, loss) with DP-SGD cells, over the target epsilons e_1 < ... < e_k:

* below the baseline: every median test AUROC stays below the non-private baseline of the (label,
  model), the best median over losses. A DP model that beats it points at an under-trained baseline
  (or a bug), not at a free lunch;
* no decrease beyond seed noise: a step from e_i to a larger e_j lowers the AUROC beyond seed noise
  when every seed at e_j scores below every seed at e_i (the seed ranges do not overlap; with 3 seeds
  an unchanged AUROC falls so by chance with probability 1/C(6,3) = 1/20 per pair, and a 4-epsilon
  grid compares 6 pairs per curve, so a flat curve is flagged now and then).

An epsilon whose seeds are not all finite (a diverged model, a one-class test split) fails both checks.

With the test set's bootstrap replicates of each cell's median AUROC (``replicates``: every cell scored
on the same stratified resamples, ``models/evaluation/bootstrap.py``), a flag also needs the interval to say so:
"at or above the baseline" only where the ``confidence`` interval of (DP - baseline) lies above 0, and
"a decrease" only where the interval of (AUROC at e_j - AUROC at e_i) lies below 0, besides the seed
ranges. A DP median at or above the baseline within the intervals is neither below it
(``below_baseline`` is False) nor flagged: it is listed in ``above_baseline_within_intervals``. Without
replicates the baseline check has no tolerance and a tie is flagged.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["check_dp_sgd_curves"]


def _difference_interval(replicates, a, b, confidence) -> tuple[float, float] | None:
    """Percentile interval of replicates[a] - replicates[b], or None where either is missing."""
    if replicates is None or a not in replicates or b not in replicates:
        return None
    tail = (1 - confidence) / 2 * 100
    diff = np.asarray(replicates[a]) - np.asarray(replicates[b])
    diff = diff[np.isfinite(diff)]
    if not diff.size:
        return None
    return float(np.percentile(diff, tail)), float(np.percentile(diff, 100 - tail))


def check_dp_sgd_curves(runs: pd.DataFrame, replicates: dict | None = None, confidence: float = 0.95) -> list[dict]:
    """One record per (label, model, loss) with DP-SGD runs; ``runs`` holds one row per (cell, seed);
    ``replicates`` maps (label, model, method, loss, target epsilon; inf when non-private) to the bootstrap
    replicates of that cell's median test AUROC."""
    checks = []
    dp = runs[runs["method"] == "dp_sgd"]
    for (label, model, loss), cells in dp.groupby(["label", "model", "loss"], sort=True):
        plain = runs[(runs["method"] == "non_private") & (runs["label"] == label) & (runs["model"] == model)]
        by_loss = plain.groupby("loss")["auroc"].median()
        baseline = float(by_loss.max()) if len(plain) else float("nan")
        base_key = (label, model, "non_private", by_loss.idxmax(), float("inf")) if len(plain) and \
            np.isfinite(baseline) else None
        key = lambda e: (label, model, "dp_sgd", loss, float(e))  # noqa: E731
        seeds = {float(e): g["auroc"].to_numpy(float) for e, g in cells.groupby("target_epsilon", sort=True)}
        epsilons = sorted(seeds)
        medians = {e: float(np.median(seeds[e])) for e in epsilons}
        not_finite = [e for e in epsilons if not np.isfinite(seeds[e]).all()]
        above_median = [e for e in epsilons if e not in not_finite and np.isfinite(baseline) and medians[e] >= baseline]
        above_ci = {e: _difference_interval(replicates, key(e), base_key, confidence) for e in above_median}
        above = [e for e in above_median if above_ci[e] is None or above_ci[e][0] > 0]
        within = [e for e in above_median if e not in above]
        drops = []
        for i, a in enumerate(epsilons):
            for b in epsilons[i + 1:]:
                if a in not_finite or b in not_finite or not seeds[b].max() < seeds[a].min():
                    continue
                interval = _difference_interval(replicates, key(b), key(a), confidence)
                if interval is None or interval[1] < 0:
                    drops.append({"from": a, "to": b, "auroc_from": medians[a], "auroc_to": medians[b],
                                  "difference_interval": interval})
        checks.append({"label": label, "model": model, "loss": loss, "non_private_baseline": _finite(baseline),
                       "epsilons": epsilons, "auroc_medians": [_finite(medians[e]) for e in epsilons],
                       "not_finite": not_finite,
                       "below_baseline": bool(np.isfinite(baseline)) and not above_median and not not_finite,
                       "at_or_above_baseline": above, "above_baseline_within_intervals": within,
                       "intervals": replicates is not None,
                       "no_decrease_beyond_seed_noise": not drops and not not_finite, "decreases": drops})
    return checks


def _finite(x: float) -> float | None:
    """None for NaN, so the checks stay valid JSON."""
    return x if np.isfinite(x) else None
