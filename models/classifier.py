"""The classifier interface of the training grid and its registry (the config's ``training.models``).

A :class:`Classifier` says how to build a freshly initialised module for an hourly feature block,
which positional inputs that module reads from the block (values, mask and delta, each (stays, hours,
variables)), and the search space of each training method over its hyperparameters. Each classifier
registers itself in its own module (``models/logistic_regression.py``, ``models/grud.py``);
``models/classifiers.py`` imports the built-ins and builds by name. Adding a classifier is one new
module, one import line there, its name in ``privehr.core.config.Model``, and its test.

>>> from privehr.models.classifiers import get_classifier
>>> sorted(get_classifier("grud").search_spaces)
['dp_sgd', 'expm_nf', 'non_private']
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, get_args

import numpy as np
import torch
from torch import nn

from privehr.core.config import Model
from privehr.core.registry import Registry

__all__ = ["Classifier", "CLASSIFIERS", "register_classifier", "get_classifier"]

CLASSIFIERS: Registry["Classifier"] = Registry("model", declared=get_args(Model))
register_classifier = CLASSIFIERS.register
get_classifier = CLASSIFIERS.__getitem__


class Classifier(ABC):
    """One model of the grid: construction, inputs and search spaces."""

    name: ClassVar[str]
    #: training method -> parameter -> ("log", low, high) | ("int", low, high) | ("choice", [values]);
    #: a DP-SGD space holds only what leaves the privacy plan unchanged (see models.hyperparameter_search)
    search_spaces: ClassVar[dict[str, dict]]

    @abstractmethod
    def inputs(self, values: np.ndarray, mask: np.ndarray, delta: np.ndarray,
               device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
        """The module's positional inputs for a block of stays."""

    @abstractmethod
    def construct(self, n_variables: int, n_hours: int, hidden_size: int, batch_norm: bool,
                  dropout: float) -> nn.Module:
        """A module initialised from torch's global generator (``classifiers.build_classifier`` seeds it)."""
