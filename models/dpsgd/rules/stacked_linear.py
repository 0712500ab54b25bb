"""K ``nn.Linear`` layers stacked (:class:`~privehr.models.classifiers.stacking.StackedLinear`): a row's gradient
touches only its own member's weights, so its norm is the single layer's (the same Grams of its inputs and output
gradients: the rule inherits the norms), and the clipped sum is one batched product, one (out x in) sum per member.
Fine-grained clipping modes need per-sample gradients in the member's shape and are not supported.
"""

from __future__ import annotations

import torch
from torch import nn

from privehr.models.classifiers.stacking import StackedLinear, stack_models
from privehr.models.dpsgd.rules.base import register_ghost_rule
from privehr.models.dpsgd.rules.linear import LinearRule

__all__ = ["StackedLinearRule", "per_member"]


def per_member(total: torch.Tensor, members: int) -> torch.Tensor:
    """Sum the (K B, ...) rows of each member: (K, ...)."""
    return total.reshape(members, -1, *total.shape[1:]).sum(1)


@register_ghost_rule(StackedLinear)
class StackedLinearRule(LinearRule):
    """Norms as ``nn.Linear``'s (a row's gradient is B_i^T A_i on its member's weight); clipped sums per member:
    (c B)^T A over each member's rows, one batched product."""

    def clipped_sums(self, layer, call, scale):
        a, b, k = call.activation, call.backprop, layer.members
        sums = {}
        if layer.weight.requires_grad:
            if "weight" in call.cache:  # the per-sample gradients the norms were taken of
                sums[layer.weight] = per_member(scale[:, None, None] * call.cache["weight"], k)
            else:
                scaled = (b * scale[:, None, None]).reshape(k, -1, b.shape[-1])
                sums[layer.weight] = torch.bmm(scaled.transpose(1, 2), a.reshape(k, -1, a.shape[-1]))
        if layer.bias is not None and layer.bias.requires_grad:
            sums[layer.bias] = per_member(scale[:, None] * b.sum(1), k)
        return sums

    def per_sample_gradients(self, layer, call):
        raise NotImplementedError("a stacked group is clipped flat (one threshold per member): fine-grained clipping "
                                  "trains one model at a time")

    @classmethod
    def example(cls):
        group = stack_models([nn.Sequential(nn.Linear(5, 3)).double() for _ in range(3)])
        return group, (torch.randn(3 * 4, 2, 5, dtype=torch.float64),)  # 4 rows a member, 2 tokens a row
