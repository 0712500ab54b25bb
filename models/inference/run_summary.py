"""Mean and SD over runs of posterior summaries: the "mean (SD over 5 runs)" cells of Tables 6 and 7 of Su et al. 2023.

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.

>>> out = summarise_posteriors([{"mean": [1.0], "sd": [0.1], "correlation": [[1.0]]},
...                       {"mean": [3.0], "sd": [0.3], "correlation": [[1.0]]}])
>>> out["mean"]["mean"], out["mean"]["sd"]
([2.0], [1.4142135623730951])
"""

from __future__ import annotations

import numpy as np

__all__ = ["summarise_posteriors"]


def summarise_posteriors(summaries: list[dict]) -> dict:
    """For each of mean, sd and correlation: the mean over runs and the SD over runs (ddof 1; 0 for one run)."""
    out = {}
    for key in ("mean", "sd", "correlation"):
        values = np.array([s[key] for s in summaries], dtype=float)
        spread = values.std(0, ddof=1) if len(values) > 1 else np.zeros_like(values[0])
        out[key] = {"mean": values.mean(0).tolist(), "sd": spread.tolist()}
    out["runs"] = len(summaries)
    return out
