"""Randomised hyperparameter search (Bergstra and Bengio, JMLR 2012), as in Bridges et al. 2023, Appendix D.

References:
    Bridges, Tombs, Stanley (2023). Are Normalizing Flows the Key to Unlocking the Exponential Mechanism?
    arXiv:2311.09200.

Draw ``budget`` configurations from a space of independent ranges (log-uniform for rates, uniform
integers for sizes, choices for categorical settings); the first draw is always the defaults, so
budget 1 means "no search". Selection is by dev AUROC; the privacy cost of tuning on private dev
data is not accounted by any DP guarantee in privehr.

DP-SGD's spaces hold only what leaves the privacy plan unchanged (learning rate, clipping norm C,
hidden size): batch size and epochs set q and T, hence sigma and the spend, and stay as configured,
so every trial's and the final fit's cost is known, and reserved, before anything is trained. Each
classifier declares its spaces (``Classifier.search_spaces``, by training method).
"""

from __future__ import annotations

import numpy as np

__all__ = ["sample_configurations"]

def sample_configurations(defaults: dict, space: dict, budget: int, seed: int) -> list[dict]:
    """``budget`` configurations: the defaults, then ``budget - 1`` random draws over ``space``."""
    if budget < 1:
        raise ValueError("budget must be at least 1")
    rng = np.random.default_rng(seed)
    configs = [dict(defaults)]
    for _ in range(budget - 1):
        draw = dict(defaults)
        for name, (kind, *args) in space.items():
            if kind == "log":
                draw[name] = float(np.exp(rng.uniform(np.log(args[0]), np.log(args[1]))))
            elif kind == "int":
                draw[name] = int(rng.integers(args[0], args[1] + 1))
            elif kind == "choice":
                draw[name] = args[0][int(rng.integers(len(args[0])))]
            else:
                raise ValueError(f"unknown range kind {kind!r} for {name}")
        configs.append(draw)
    return configs
