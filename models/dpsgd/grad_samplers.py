"""Opacus per-sample gradient rules for privehr's own layers (registered on import).

:class:`~privehr.models.classifiers.grud.InputDecay`, gamma = exp(-relu(w * delta + b)) applied elementwise to (B, T, F):
with the gradient of the loss with respect to gamma, G (the "backprops"), and the active set
a = 1[w * delta + b > 0],

    dL_i/dw = -sum_t G_it * gamma_it * delta_it * a_it,      dL_i/db = -sum_t G_it * gamma_it * a_it.

:class:`~privehr.models.nf.made.MaskedLinear`, y = x (W * M)^T + b with activations A (n, ..., in) and backprops
B (n, ..., out):

    dL_i/dW = (sum_t B_it^T A_it) * M,                      dL_i/db = sum_t B_it.

The mask multiply matters: without it the norm of a per-sample gradient counts masked-out weights
and clips too hard (a bug of a public DP-MAF patch, ../shared/reference/dpnf_synthesis.md).

Opacus would otherwise route these layers through its generic functorch fallback (a vmap over the
batch), which costs more than the closed forms. Tested against torch.func in tests/models.
"""

from __future__ import annotations

import torch
from opacus.grad_sample import register_grad_sampler

from privehr.models.classifiers.grud import InputDecay
from privehr.models.nf.made import MaskedLinear

__all__ = ["compute_input_decay_grad_sample", "compute_masked_linear_grad_sample"]


@register_grad_sampler(InputDecay)
def compute_input_decay_grad_sample(layer: InputDecay, activations: list[torch.Tensor],
                                    backprops: torch.Tensor) -> dict[torch.nn.Parameter, torch.Tensor]:
    delta = activations[0].to(backprops.dtype)
    pre = torch.addcmul(layer.bias, delta, layer.weight)  # as InputDecay's forward computes it
    gamma = torch.exp(-torch.relu(pre))
    common = -backprops * gamma * (pre > 0).to(backprops.dtype)
    dims = tuple(range(1, delta.dim() - 1))  # every axis between batch and features (time)
    grads = {}
    if layer.weight.requires_grad:
        grads[layer.weight] = (common * delta).sum(dim=dims) if dims else common * delta
    if layer.bias.requires_grad:
        grads[layer.bias] = common.sum(dim=dims) if dims else common
    return grads


@register_grad_sampler(MaskedLinear)
def compute_masked_linear_grad_sample(layer: MaskedLinear, activations: list[torch.Tensor],
                                      backprops: torch.Tensor) -> dict[torch.nn.Parameter, torch.Tensor]:
    a = activations[0].to(backprops.dtype)
    grads = {}
    if layer.weight.requires_grad:
        grads[layer.weight] = torch.einsum("n...i,n...j->nij", backprops, a) * layer.mask
    if layer.bias.requires_grad:
        grads[layer.bias] = torch.einsum("n...k->nk", backprops)
    return grads
