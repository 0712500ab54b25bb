"""Logistic regression as a torch module: p(y = 1 | x) = sigmoid(w^T x + b)."""

import torch
from torch import nn

from privehr.models.classifiers.base import Classifier, register_classifier
from privehr.models.data.hourly_features import flatten_for_linear

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

    def inputs(self, values, mask, delta, device="cpu"):
        return (torch.as_tensor(flatten_for_linear(values, mask, delta), device=device),)

    def construct(self, n_variables, n_hours, hidden_size, batch_norm, dropout):
        return LogisticRegression(3 * n_variables * n_hours)
