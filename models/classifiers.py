"""The classifiers privehr trains, by name, and the inputs each one reads from hourly features.

* ``logistic_regression``: x = flattened (mask, value, delta / 100) of every variable-hour.
* ``grud``: (values, mask, delta), each (stays, hours, variables). The values are standardised with
  training statistics, so the empirical training mean x_tilde of GRU-D is 0.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from privehr.models.grud import GRUD
from privehr.models.hourly_features import flatten_for_linear
from privehr.models.logistic_regression import LogisticRegression

__all__ = ["MODELS", "build_classifier", "classifier_inputs", "seeded_build"]

MODELS = ("logistic_regression", "grud")


def classifier_inputs(name: str, values: np.ndarray, mask: np.ndarray, delta: np.ndarray,
                      device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
    """The positional inputs of classifier ``name`` for a block of stays."""
    if name == "logistic_regression":
        return (torch.as_tensor(flatten_for_linear(values, mask, delta), device=device),)
    if name == "grud":
        return tuple(torch.as_tensor(a, device=device) for a in (values, mask, delta))
    raise ValueError(f"unknown model {name!r}; choose one of {MODELS}")


# torch's default initialisers draw from the process-wide generator; concurrent task runs (threads) that
# seed it and then build a model would interleave their draws, so seeding and building happen under a lock.
_INIT_LOCK = threading.Lock()


def build_classifier(name: str, n_variables: int, n_hours: int, *, seed: int, hidden_size: int = 32,
                     batch_norm: bool = False, dropout: float = 0.0) -> nn.Module:
    """A freshly initialised classifier whose weights depend on ``seed`` alone, whatever else runs."""
    return seeded_build(lambda: _construct(name, n_variables, n_hours, hidden_size, batch_norm, dropout), seed)


def seeded_build(build: Callable[[], nn.Module], seed: int) -> nn.Module:
    """``build()`` with torch's global generator seeded by ``seed``, under a lock shared by all builders."""
    with _INIT_LOCK:
        torch.manual_seed(seed)
        return build()


def _construct(name, n_variables, n_hours, hidden_size, batch_norm, dropout) -> nn.Module:
    if name == "logistic_regression":
        return LogisticRegression(3 * n_variables * n_hours)
    if name == "grud":
        return GRUD(n_variables, hidden_size, dropout=dropout, batch_norm=batch_norm)
    raise ValueError(f"unknown model {name!r}; choose one of {MODELS}")
