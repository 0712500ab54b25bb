"""The classifier interface of the training grid and its registry (the config's ``training.models``).

A :class:`Classifier` says how to build a freshly initialised module for an hourly feature block and
which positional inputs that module reads from the block (values, mask and delta, each (stays, hours,
variables)); each training method keeps its own search space per classifier (``models/methods/``). Each classifier
registers itself in its own module (``models/classifiers/logistic_regression.py``, ``models/classifiers/grud.py``);
``models/classifiers.py`` imports the built-ins and builds by name. Adding a classifier is one new
module, one import line there, its name in ``privehr.core.config.Model``, and its test.

>>> from privehr.models.classifiers import get_classifier
>>> [t.shape for t in get_classifier("grud").inputs(*np.zeros((3, 2, 4, 5)))]
[torch.Size([2, 4, 5]), torch.Size([2, 4, 5]), torch.Size([2, 4, 5])]
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
get_classifier = CLASSIFIERS.create


class Classifier(ABC):
    """One model of the grid: construction and inputs."""

    name: ClassVar[str]

    @abstractmethod
    def inputs(self, values: np.ndarray, mask: np.ndarray, delta: np.ndarray,
               device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
        """The module's positional inputs for a block of stays."""

    @abstractmethod
    def construct(self, n_variables: int, n_hours: int, hidden_size: int, batch_norm: bool,
                  dropout: float) -> nn.Module:
        """A module initialised from torch's global generator (``classifiers.build_classifier`` seeds it)."""
