"""The exponential mechanism's utility, evaluated for N parameter vectors at once, for any classifier.

    u(theta) = - sum_i (sigmoid(f(x_i; theta)) - y_i)^2  - lambda * ||theta||_1,

over the whole training set (sensitivity s = 1: with y_i and sigmoid outputs in [0, 1], replacing
one record changes the sum by at most 1; the regulariser does not depend on the data), or the
unbiased estimate (n / B) * sum over a minibatch of B records (the sensitivity bound holds for the
full sum only). theta (N, D) is unflattened into the module's parameters and the module is called
with ``torch.func.functional_call`` under ``torch.func.vmap``: one batched program, any architecture.
``loss="bce"`` puts the binary cross-entropy in place of the squared error: a Gibbs density of the logistic
likelihood, whose sensitivity is unbounded (``sensitivity`` is then infinite), so only a method whose privacy does not
rest on s (the DP-trained flows of :mod:`privehr.models.expm.dp_trained`) may use it. A module may offer ``batched_logits(params, *inputs)`` computing the same (N, n) logits with a cheaper
batched product (logistic regression: one GEMM; vmap would copy X per parameter vector); the tests
check both paths against a per-theta loop.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.func import functional_call, vmap

__all__ = ["BatchedUtility", "flat_parameters"]


def flat_parameters(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


class BatchedUtility:
    """u(theta) for theta of shape (N, D), D the classifier's parameter count.

    Args:
        model: a classifier returning one logit per record (its weights are not used, only its shape).
        inputs: the model's positional inputs for the n training records (batch first).
        y: labels in [0, 1].
        l1: weight of the L1 regulariser (data independent).
        loss: "l2" (the squared error on the sigmoid, s = 1) or "bce" (unbounded s).
    """

    def __init__(self, model: nn.Module, inputs: tuple[torch.Tensor, ...], y: torch.Tensor, l1: float = 0.0,
                 loss: str = "l2"):
        if any(isinstance(m, nn.Dropout) and m.p > 0 for m in model.modules()):
            raise ValueError("the utility must be deterministic: remove dropout from the model")
        if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
            raise ValueError("batch norm couples records, which breaks the sensitivity bound: remove it")
        y = y.to(torch.float32)
        if y.numel() and (y.min() < 0 or y.max() > 1):
            raise ValueError("targets must lie in [0, 1] for the sensitivity bound s = 1")
        self.model = model.eval()
        self.names = [n for n, _ in model.named_parameters()]
        self.shapes = [p.shape for _, p in model.named_parameters()]
        self.sizes = [p.numel() for _, p in model.named_parameters()]
        self.dim = sum(self.sizes)
        self.buffers = dict(model.named_buffers())
        self.inputs, self.y, self.l1, self.n = inputs, y, float(l1), len(y)
        if loss not in ("l2", "bce"):
            raise ValueError(f"unknown utility loss {loss!r}: l2 or bce")
        self.loss = loss
        self.sensitivity = 1.0 if loss == "l2" else math.inf

    def batched_params(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """(N, D) parameter vectors as the module's named parameters, each with a leading N axis."""
        parts = theta.split(self.sizes, dim=1)
        return {n: t.reshape(len(theta), *s) for n, t, s in zip(self.names, parts, self.shapes)}

    def logits(self, theta: torch.Tensor, inputs: tuple[torch.Tensor, ...] | None = None,
               generic: bool = False) -> torch.Tensor:
        """(N, n) logits of the N parameter vectors on the records (``generic``: always via vmap)."""
        inputs = self.inputs if inputs is None else inputs
        if not generic and hasattr(self.model, "batched_logits"):
            return self.model.batched_logits(self.batched_params(theta), *inputs)

        def one(params):
            return functional_call(self.model, {**params, **self.buffers}, inputs).reshape(-1)
        return vmap(one)(self.batched_params(theta))

    def __call__(self, theta: torch.Tensor, batch: torch.Tensor | None = None) -> torch.Tensor:
        """u(theta) for each row of theta; ``batch`` (record indices) gives the n/B-scaled estimate."""
        return self.data_utility(theta, batch) - self.l1 * theta.abs().sum(1)

    def data_utility(self, theta: torch.Tensor, batch: torch.Tensor | None = None) -> torch.Tensor:
        """The data term of u(theta), without the L1 regulariser: minus the (scaled) sum of record losses."""
        if batch is None:
            inputs, y, scale = self.inputs, self.y, 1.0
        else:
            inputs, y, scale = tuple(t[batch] for t in self.inputs), self.y[batch], self.n / len(batch)
        return -scale * self.record_losses(self.logits(theta, inputs), y).sum(1)

    def shares_data_with(self, other: "BatchedUtility") -> bool:
        """Whether ``other`` computes the same data term: the same records, targets and loss, and a model of the same
        parameter layout and buffers (its weights are not used), so one pass over the records serves both."""
        return (other.inputs is self.inputs and other.y is self.y and other.loss == self.loss
                and type(other.model) is type(self.model) and other.names == self.names and other.shapes == self.shapes
                and other.buffers.keys() == self.buffers.keys()
                and all(torch.equal(other.buffers[k], b) for k, b in self.buffers.items()))

    def record_losses(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each record's loss l_i for logits (..., n): (sigmoid - y)^2, or the cross-entropy."""
        if self.loss == "l2":
            return (torch.sigmoid(logits) - y).pow(2)
        return torch.nn.functional.softplus(logits) - y * logits
