"""Randomised hyperparameter search (Bergstra and Bengio, JMLR 2012), as in seed 000 Appendix D.

Draw ``budget`` configurations from a space of independent ranges (log-uniform for rates, uniform
integers for sizes, choices for categorical settings); the first draw is always the defaults, so
budget 1 means "no search". Selection is by dev AUROC; the privacy cost of tuning on private dev
data is not accounted by any DP guarantee in privehr.

DP-SGD's spaces hold only what leaves the privacy plan unchanged (learning rate, clipping norm C,
hidden size): batch size and epochs set q and T, hence sigma and the spend, and stay as configured,
so every trial's and the final fit's cost is known, and reserved, before anything is trained.
"""

from __future__ import annotations

import numpy as np

__all__ = ["sample_configurations", "SEARCH_SPACES"]

# parameter -> ("log", low, high) | ("int", low, high) | ("choice", [values])
SEARCH_SPACES = {
    ("logistic_regression", "non_private"): {"learning_rate": ("log", 1e-4, 1e-2), "weight_decay": ("log", 1e-4, 1.0),
                                             "batch_size": ("choice", [64, 128, 256])},
    ("logistic_regression", "dp_sgd"): {"learning_rate": ("log", 1e-3, 5e-2), "max_grad_norm": ("log", 0.1, 5.0)},
    ("grud", "non_private"): {"learning_rate": ("log", 5e-4, 1e-2), "hidden_size": ("int", 16, 64),
                              "weight_decay": ("log", 1e-5, 1e-1), "batch_size": ("choice", [64, 128, 256])},
    ("grud", "dp_sgd"): {"learning_rate": ("log", 1e-3, 5e-2), "hidden_size": ("int", 8, 48),
                         "max_grad_norm": ("log", 0.1, 5.0)},
    ("logistic_regression", "expm_nf"): {"learning_rate": ("log", 1e-3, 3e-2), "base_sigma": ("log", 1e-3, 0.1),
                                         "l1": ("log", 1e-4, 1e-1), "samples": ("choice", [8, 16, 32])},
    ("grud", "expm_nf"): {"learning_rate": ("log", 1e-3, 3e-2), "base_sigma": ("log", 1e-3, 0.1),
                          "l1": ("log", 1e-4, 1e-1), "hidden_size": ("int", 8, 48)},
}


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
