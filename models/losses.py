"""Per-sample binary losses on logits, averaged over the batch.

    bce(z, y) = -[y log sigma(z) + (1 - y) log(1 - sigma(z))]
    l2(z, y)  = (sigma(z) - y)^2        (bounded in [0, 1]: the utility ExpM+NF needs)
"""

import torch
from torch import nn

__all__ = ["LOSSES", "binary_loss"]

LOSSES = ("bce", "l2")


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
