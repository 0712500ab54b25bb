"""Logistic regression as a torch module: p(y = 1 | x) = sigmoid(w^T x + b)."""

import torch
from torch import nn

from privehr.models.classifier import Classifier, register_classifier
from privehr.models.hourly_features import flatten_for_linear

__all__ = ["LogisticRegression", "LogisticRegressionClassifier"]


class LogisticRegression(nn.Module):
    """A single ``nn.Linear`` layer returning logits (so Opacus can clip its per-sample gradients).

    >>> model = LogisticRegression(3)
    >>> model(torch.zeros(2, 3)).shape
    torch.Size([2])
    """

    def __init__(self, n_features: int):
        super().__init__()
        self.linear = nn.Linear(n_features, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).squeeze(-1)

    @staticmethod
    def batched_logits(params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """Logits (N, n) of N parameter sets at once (``linear.weight`` (N, 1, d), ``linear.bias`` (N, 1)):
        one GEMM, X W^T, as vmap over ``forward`` would compute but without its copies of X."""
        weight = params["linear.weight"]
        return weight.reshape(len(weight), -1) @ x.T + params["linear.bias"].reshape(-1, 1)


@register_classifier
class LogisticRegressionClassifier(Classifier):
    """The grid's ``logistic_regression``: x = flattened (mask, value, delta / 100) of every variable-hour."""

    name = "logistic_regression"
    search_spaces = {
        "non_private": {"learning_rate": ("log", 1e-4, 1e-2), "weight_decay": ("log", 1e-4, 1.0),
                        "batch_size": ("choice", [64, 128, 256])},
        "dp_sgd": {"learning_rate": ("log", 1e-3, 5e-2), "max_grad_norm": ("log", 0.1, 5.0)},
        "expm_nf": {"learning_rate": ("log", 1e-3, 3e-2), "base_sigma": ("log", 1e-3, 0.1),
                    "l1": ("log", 1e-4, 1e-1), "samples": ("choice", [8, 16, 32])},
    }

    def inputs(self, values, mask, delta, device="cpu"):
        return (torch.as_tensor(flatten_for_linear(values, mask, delta), device=device),)

    def construct(self, n_variables, n_hours, hidden_size, batch_norm, dropout):
        return LogisticRegression(3 * n_variables * n_hours)
