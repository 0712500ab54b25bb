"""K GRU-D ``InputDecay`` layers stacked (:class:`~privehr.models.classifiers.stacking.StackedInputDecay`):
InputDecay's closed form with each row's own member's w and b; sums per member.
"""

from __future__ import annotations

import torch
from torch import nn

from privehr.models.classifiers.stacking import StackedInputDecay, stack_models
from privehr.models.dpsgd.rules.base import register_ghost_rule
from privehr.models.dpsgd.rules.input_decay import InputDecayRule
from privehr.models.dpsgd.rules.stacked_linear import per_member

__all__ = ["StackedInputDecayRule"]


@register_ghost_rule(StackedInputDecay)
class StackedInputDecayRule(InputDecayRule):
    """InputDecay's closed form with each row's own member's w and b; sums per member."""

    @staticmethod
    def _per_sample(layer, call):
        if "grads" not in call.cache:
            delta = call.activation  # (K B, T, F)
            w = layer.rows(layer.weight.detach(), len(delta))[:, None, :]
            b = layer.rows(layer.bias.detach(), len(delta))[:, None, :]
            common = (call.backprop * call.output).mul_(torch.addcmul(b, delta, w) > 0)
            call.cache["grads"] = {layer.bias: common.sum(1).neg_(), layer.weight: common.mul_(delta).sum(1).neg_()}
        return call.cache["grads"]

    def clipped_sums(self, layer, call, scale):
        return {p: per_member(scale[:, None] * g, layer.members) for p, g in self._per_sample(layer, call).items()}

    def per_sample_gradients(self, layer, call):
        raise NotImplementedError("a stacked group is clipped flat: fine-grained clipping trains one model at a time")

    @classmethod
    def example(cls):
        members = [nn.Sequential(InputDecayRule.example()[0]) for _ in range(3)]
        return stack_models(members), (torch.rand(3 * 4, 7, 5, dtype=torch.float64) * 3,)
