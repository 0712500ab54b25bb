"""Per-sample binary losses on logits, and their batch means.

    bce(z, y) = -[y log sigma(z) + (1 - y) log(1 - sigma(z))]
    l2(z, y)  = (sigma(z) - y)^2        (bounded in [0, 1]: the utility ExpM+NF needs)
"""

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["LOSSES", "binary_loss", "per_sample_loss"]

LOSSES = ("bce", "l2")


def per_sample_loss(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``loss(logits, target)`` -> one loss per sample (what per-sample clipping differentiates).

    >>> per_sample_loss("l2")(torch.zeros(2), torch.tensor([0.0, 1.0]))
    tensor([0.2500, 0.2500])
    """
    if name == "bce":
        return lambda logits, target: F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    if name == "l2":
        return lambda logits, target: (torch.sigmoid(logits) - target) ** 2
    raise ValueError(f"unknown loss {name!r}; choose one of {LOSSES}")


def binary_loss(name: str) -> nn.Module:
    """Mean-reduced loss module; Opacus needs ``reduction='mean'`` to match its loss_reduction."""
    if name == "bce":
        return nn.BCEWithLogitsLoss(reduction="mean")
    if name == "l2":
        return _SquaredErrorOnSigmoid()
    raise ValueError(f"unknown loss {name!r}; choose one of {LOSSES}")


class _SquaredErrorOnSigmoid(nn.Module):
    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return ((torch.sigmoid(logits) - target) ** 2).mean()
