"""The classifiers privehr trains, by name: the registry of :mod:`privehr.models.classifiers.base` with its
built-ins registered (``logistic_regression``, ``grud``), and seeded construction.

>>> model = build_classifier("logistic_regression", n_variables=2, n_hours=3, seed=0)
>>> [x.shape for x in classifier_inputs("logistic_regression", *np.zeros((3, 4, 3, 2)))]
[torch.Size([4, 18])]
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from privehr.models.classifiers import grud, logistic_regression  # noqa: F401  (register the built-in classifiers)
from privehr.models.classifiers.base import CLASSIFIERS, get_classifier

__all__ = ["CLASSIFIERS", "get_classifier", "build_classifier", "classifier_inputs", "seeded_build"]


def classifier_inputs(name: str, values: np.ndarray, mask: np.ndarray, delta: np.ndarray,
                      device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
    """The positional inputs of classifier ``name`` for a block of stays."""
    return get_classifier(name).inputs(values, mask, delta, device)


# torch's default initialisers draw from the process-wide generator; concurrent task runs (threads) that
# seed it and then build a model would interleave their draws, so seeding and building happen under a lock.
_INIT_LOCK = threading.Lock()


def build_classifier(name: str, n_variables: int, n_hours: int, *, seed: int, hidden_size: int = 32,
                     batch_norm: bool = False, dropout: float = 0.0) -> nn.Module:
    """A freshly initialised classifier whose weights depend on ``seed`` alone, whatever else runs."""
    classifier = get_classifier(name)
    return seeded_build(lambda: classifier.construct(n_variables, n_hours, hidden_size, batch_norm, dropout), seed)


def seeded_build(build: Callable[[], nn.Module], seed: int) -> nn.Module:
    """``build()`` with torch's global generator seeded by ``seed``, under a lock shared by all builders."""
    with _INIT_LOCK:
        torch.manual_seed(seed)
        return build()
