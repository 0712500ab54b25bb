"""GRU-D's :class:`~privehr.models.classifiers.grud.InputDecay`, gamma = exp(-relu(w delta + b)) elementwise over
(B, T, F): with G = dl/dgamma and the active set a = 1[w delta + b > 0],

    dl_i/dw = -sum_t G_it gamma_it delta_it a_it,      dl_i/db = -sum_t G_it gamma_it a_it

(F entries each, written out). Also Opacus's per-sample rule for the layer (registered on import).
"""

from __future__ import annotations

import torch
from opacus.grad_sample import register_grad_sampler
from torch import nn

from privehr.models.classifiers.grud import InputDecay
from privehr.models.dpsgd.rules.base import GhostRule, register_ghost_rule

__all__ = ["InputDecayRule", "compute_input_decay_grad_sample"]


@register_ghost_rule(InputDecay)
class InputDecayRule(GhostRule):
    """dl_i/dw = -sum_t G_it gamma_it delta_it 1[pre_it > 0], dl_i/db the same without delta (F entries each)."""

    needs_output = True

    @staticmethod
    def _per_sample(layer, call) -> dict[nn.Parameter, torch.Tensor]:
        if "grads" not in call.cache:
            delta = call.activation  # the pre-activation as the forward computes it (same ops, same rounding at 0)
            pre = torch.addcmul(layer.bias.detach(), delta, layer.weight.detach())  # as InputDecay's forward
            common = (call.backprop * call.output).mul_(pre > 0)
            grads = {}
            if layer.bias.requires_grad:
                grads[layer.bias] = common.sum(1).neg_()
            if layer.weight.requires_grad:
                grads[layer.weight] = common.mul_(delta).sum(1).neg_()
            call.cache["grads"] = grads
        return call.cache["grads"]

    def squared_norms(self, layer, call):
        grads = self._per_sample(layer, call)
        return sum((g.square().sum(1) for g in grads.values()),
                   torch.zeros(len(call.backprop), dtype=call.backprop.dtype, device=call.backprop.device))

    def clipped_sums(self, layer, call, scale):
        return {p: scale @ g for p, g in self._per_sample(layer, call).items()}

    def per_sample_gradients(self, layer, call):
        return dict(self._per_sample(layer, call))

    @classmethod
    def example(cls):
        layer = InputDecay(5).double()
        with torch.no_grad():
            layer.weight.uniform_(-1, 1), layer.bias.uniform_(-1, 1)  # some pre-activations on each side of 0
        return layer, (torch.rand(6, 7, 5, dtype=torch.float64) * 3,)


@register_grad_sampler(InputDecay)
def compute_input_decay_grad_sample(layer: InputDecay, activations: list[torch.Tensor],
                                    backprops: torch.Tensor) -> dict[torch.nn.Parameter, torch.Tensor]:
    """Opacus's per-sample gradients of the closed form above, over every axis between batch and features."""
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
