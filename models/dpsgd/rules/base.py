"""What a per-layer DP-SGD rule is, and the registry that maps a layer type to its rule.

A rule gives, from a layer's kept inputs A and the loss's gradients at its output B (:class:`Call`), each sample's
squared gradient norm, the clipped sum sum_i c_i g_i and, where a clipping mode needs them, the per-sample gradients
themselves. One file per layer type registers one rule (``@register_ghost_rule``) with an :meth:`GhostRule.example`
that the common harness checks against ``torch.func`` (as Opacus's ``grad_sample/`` keeps one file per layer and one
test harness for all).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

__all__ = ["Call", "GhostRule", "GHOST_RULES", "register_ghost_rule", "rule_of"]


@dataclass
class Call:
    """A layer's forward calls joined per sample: inputs A (batch, K, in), outputs (batch, K, out) and
    B = dl/d(output) (batch, K, out), K the tokens per sample over all calls (time steps, sequence positions)."""

    activation: torch.Tensor
    output: torch.Tensor | None  # only for rules with ``needs_output``
    backprop: torch.Tensor
    cache: dict = field(default_factory=dict)


class GhostRule:
    """How one layer type contributes to per-sample squared norms and to the clipped sum."""

    needs_output = False  # whether the rule reads the layer's output (else it is not kept)

    def squared_norms(self, layer: nn.Module, call: Call) -> torch.Tensor:
        """(batch,) sum of squared per-sample gradient entries over the layer's trainable parameters."""
        raise NotImplementedError

    def clipped_sums(self, layer: nn.Module, call: Call, scale: torch.Tensor) -> dict[nn.Parameter, torch.Tensor]:
        """{parameter: sum_i scale_i g_i} for the layer's trainable parameters."""
        raise NotImplementedError

    def per_sample_gradients(self, layer: nn.Module, call: Call) -> dict[nn.Parameter, torch.Tensor]:
        """{parameter: (batch, *shape)} per-sample gradients, materialised (clipping modes that need the entries,
        :mod:`privehr.models.dpsgd.fine_grained_clipping`). By default one clipped sum per sample with a one-hot scale: correct
        for any rule, slow; rules override it with a closed form."""
        b = call.backprop
        rows = [self.clipped_sums(layer, call, torch.eye(len(b), dtype=b.dtype, device=b.device)[i])
                for i in range(len(b))]
        return {p: torch.stack([r[p] for r in rows]) for p in rows[0]} if rows else {}

    @classmethod
    def example(cls) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        """A small float64 layer of the rule's type and a batch of inputs for it (batch first): every registered rule
        is checked against torch.func's per-sample gradients on it (tests/models/dpsgd/test_rules.py)."""
        raise NotImplementedError(f"{cls.__name__} has no example: a rule is registered with one")


GHOST_RULES: dict[type, GhostRule] = {}


def register_ghost_rule(*module_types: type):
    """Class decorator: an instance of the rule handles exactly these module types."""
    def register(rule_cls):
        for t in module_types:
            GHOST_RULES[t] = rule_cls()
        return rule_cls
    return register



def rule_of(module: nn.Module) -> GhostRule | None:
    """The registered rule of ``module``'s type (or of its nearest registered base class)."""
    for t in type(module).__mro__:
        if t in GHOST_RULES:
            return GHOST_RULES[t]
    return None
