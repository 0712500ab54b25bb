"""``nn.Linear``: g_i = sum_k B_ik^T A_ik (the weight), sum_k B_ik (the bias).

Norms by two K x K Grams per sample ("ghost norm": Li, Tramer, Liang, Hashimoto, ICLR 2022), or the (out x in)
gradient itself where that is smaller (Bu, Mao, Xu, NeurIPS 2022: mixed ghost clipping); the clipped sum is one GEMM
(c B)^T A over every token (book-keeping: Bu, Wang, Zha, Karypis, ICML 2023).
"""

from __future__ import annotations

import torch
from torch import nn

from privehr.models.dpsgd.rules.base import Call, GhostRule, register_ghost_rule

__all__ = ["LinearRule"]


def _gram_norms(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """An upper bound on ||sum_k B_k^T A_k||_F^2 per sample from the K x K Grams, rounding included.

    sum_{k,k'} (A_k . A_k')(B_k . B_k') can cancel: a sample whose hourly terms nearly cancel has a true
    squared norm far below the Gram sum's rounding error, and a crafted record could then add several C
    to the clipped sum (found by an attack on this code: 2.5 C with float32 Grams at GRU-D's shapes). The
    error of the computed sum is at most (gamma_in + gamma_out + gamma_{K^2} + 3 eps) S with
    S = sum_{k,k'} |A_k||A_k'||B_k||B_k'| = (sum_k |A_k||B_k|)^2 (standard dot-product bounds, gamma_n <= n eps,
    any summation order); twice that is added, so the norm used for clipping is never below the true one.
    On ordinary data S is about twice the squared norm and the margin is ~1e-4 of it."""
    ga, gb = torch.bmm(a, a.transpose(1, 2)), torch.bmm(b, b.transpose(1, 2))
    squared = (ga * gb).sum((1, 2))
    tokens = (ga.diagonal(dim1=1, dim2=2).clamp(min=0) * gb.diagonal(dim1=1, dim2=2).clamp(min=0)).sqrt().sum(1)
    k, d_in, d_out = a.shape[1], a.shape[2], b.shape[2]
    margin = 2 * (d_in + d_out + k * k + 3) * torch.finfo(b.dtype).eps * tokens.square()
    return (squared + margin).clamp(min=0)


def _linear_per_sample(layer: nn.Module, call: Call, mask: torch.Tensor | None = None) -> dict:
    """Per-sample gradients of a (masked) linear layer: sum_k B_ik^T A_ik (times the mask), sum_k B_ik."""
    a, b = call.activation, call.backprop
    grads = {}
    if layer.weight.requires_grad:
        weight = torch.einsum("bko,bki->boi", b, a)
        grads[layer.weight] = weight if mask is None else weight * mask
    if layer.bias is not None and layer.bias.requires_grad:
        grads[layer.bias] = b.sum(1)
    return grads


def _linear_sums(layer: nn.Module, call: Call, scale: torch.Tensor, mask: torch.Tensor | None = None) -> dict:
    """sum_i scale_i g_i of a (masked) linear layer: from the per-sample gradients the norms were taken of where
    they were materialised, else one GEMM (scale * B)^T A over every token (then masked)."""
    a, b = call.activation, call.backprop
    sums = {}
    if layer.weight.requires_grad:
        if "weight" in call.cache:
            sums[layer.weight] = (scale @ call.cache["weight"].flatten(1)).view_as(layer.weight)
        else:
            weight = (b * scale[:, None, None]).reshape(-1, b.shape[-1]).T @ a.reshape(-1, a.shape[-1])
            sums[layer.weight] = weight if mask is None else weight * mask
    if layer.bias is not None and layer.bias.requires_grad:
        sums[layer.bias] = scale @ b.sum(1)
    return sums


def _start(call: Call):
    """(A, B, tokens K, in, out, a zero squared norm per sample) of a (masked) linear layer's call."""
    a, b = call.activation, call.backprop
    return a, b, a.shape[1], a.shape[2], b.shape[2], torch.zeros(len(a), dtype=b.dtype, device=b.device)


@register_ghost_rule(nn.Linear)
class LinearRule(GhostRule):
    def squared_norms(self, layer, call):
        a, b, k, d_in, d_out, total = _start(call)
        if layer.weight.requires_grad:
            if k == 1:
                total += torch.linalg.vector_norm(a[:, 0], dim=1).square() * torch.linalg.vector_norm(b[:, 0], dim=1).square()
            elif k * (d_in + d_out) <= d_in * d_out:  # ghost norm: two K x K Grams per sample
                total += _gram_norms(a, b)
            else:  # the per-sample (out x in) gradient is smaller than the Grams: kept for the clipped sum
                call.cache["weight"] = torch.bmm(b.transpose(1, 2), a)
                total += call.cache["weight"].square().sum((1, 2))
        if layer.bias is not None and layer.bias.requires_grad:
            total += b.sum(1).square().sum(1)
        return total

    def clipped_sums(self, layer, call, scale):
        return _linear_sums(layer, call, scale)

    def per_sample_gradients(self, layer, call):
        return _linear_per_sample(layer, call)

    @classmethod
    def example(cls):
        layer = nn.Linear(5, 3).double()
        return layer, (torch.randn(6, 4, 5, dtype=torch.float64),)  # 4 tokens a sample: the Gram path
