"""K models of one architecture as one module, for ghost clipping of a batched group
(:mod:`privehr.models.dpsgd.batched`).

:func:`stack_models` copies the first model and replaces each of its layers by a stacked layer holding the K members'
weights along a leading axis: :class:`StackedLinear` for ``nn.Linear``, :class:`StackedInputDecay` for GRU-D's
:class:`~privehr.models.classifiers.grud.InputDecay`. The stacked module takes the K members' batches one after the
other along the batch axis (K x B rows, member-major) and applies member k's weights to rows k B ... (k + 1) B - 1
(one batched matrix product per layer), so the model's own forward runs unchanged: GRU-D's 24-hour loop runs once
for the whole group instead of once per member.

Each stacked layer has a ghost-clipping rule (:mod:`privehr.models.dpsgd.ghost_clipping`). A row's gradient touches
only its own member's weights, so its norm is the single layer's (the same Grams of its inputs and output
gradients: the rules below inherit the norms), and the clipped sum is one batched product per layer, one (out x in)
sum per member. Fine-grained clipping modes need per-sample gradients in the member's shape and are not supported.

>>> from torch import nn
>>> members = [nn.Sequential(nn.Linear(3, 2), nn.Tanh(), nn.Linear(2, 1)) for _ in range(4)]
>>> stacked = stack_models(members)
>>> x = torch.randn(4 * 5, 3)                        # 5 rows for each of the 4 members
>>> torch.allclose(stacked(x).view(4, 5, 1)[2], members[2](x.view(4, 5, 3)[2]), atol=1e-6)
True
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from privehr.models.classifiers.grud import InputDecay
from privehr.models.dpsgd.ghost_clipping import InputDecayRule, LinearRule, register_ghost_rule, rule_of

__all__ = ["StackedLinear", "StackedInputDecay", "stack_models", "unstack_into"]


class StackedLinear(nn.Module):
    """K ``nn.Linear`` layers of one shape: weight (K, out, in), bias (K, out); input (K B, ..., in), member-major."""

    def __init__(self, layers: Sequence[nn.Linear]):
        super().__init__()
        self.members = len(layers)
        self.in_features, self.out_features = layers[0].in_features, layers[0].out_features
        self.weight = nn.Parameter(torch.stack([layer.weight.detach() for layer in layers]).clone(),
                                   requires_grad=layers[0].weight.requires_grad)
        self.bias = None if layers[0].bias is None else nn.Parameter(
            torch.stack([layer.bias.detach() for layer in layers]).clone(), requires_grad=layers[0].bias.requires_grad)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(self.members, -1, self.in_features)           # (K, B x tokens, in)
        out = torch.bmm(rows, self.weight.transpose(1, 2))
        if self.bias is not None:
            out = out + self.bias[:, None, :]
        return out.reshape(*x.shape[:-1], self.out_features)


class StackedInputDecay(nn.Module):
    """K :class:`InputDecay` layers: gamma = exp(-relu(w_k delta + b_k)) on member k's rows."""

    def __init__(self, layers: Sequence[InputDecay]):
        super().__init__()
        self.members = len(layers)
        self.weight = nn.Parameter(torch.stack([layer.weight.detach() for layer in layers]).clone())
        self.bias = nn.Parameter(torch.stack([layer.bias.detach() for layer in layers]).clone())

    def rows(self, parameter: torch.Tensor, batch: int) -> torch.Tensor:
        """``parameter`` (K, F) repeated for each of its member's rows: (K B, F)."""
        return parameter.repeat_interleave(batch // self.members, dim=0)

    def forward(self, delta: torch.Tensor) -> torch.Tensor:
        shape = (len(delta),) + (1,) * (delta.dim() - 2) + (delta.shape[-1],)
        w, b = self.rows(self.weight, len(delta)).view(shape), self.rows(self.bias, len(delta)).view(shape)
        return torch.exp(-torch.relu(torch.addcmul(b, delta, w)))


def _per_member(total: torch.Tensor, members: int) -> torch.Tensor:
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
                sums[layer.weight] = _per_member(scale[:, None, None] * call.cache["weight"], k)
            else:
                scaled = (b * scale[:, None, None]).reshape(k, -1, b.shape[-1])
                sums[layer.weight] = torch.bmm(scaled.transpose(1, 2), a.reshape(k, -1, a.shape[-1]))
        if layer.bias is not None and layer.bias.requires_grad:
            sums[layer.bias] = _per_member(scale[:, None] * b.sum(1), k)
        return sums

    def per_sample_gradients(self, layer, call):
        raise NotImplementedError("a stacked group is clipped flat (one threshold per member): fine-grained clipping "
                                  "trains one model at a time")


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
        return {p: _per_member(scale[:, None] * g, layer.members) for p, g in self._per_sample(layer, call).items()}

    def per_sample_gradients(self, layer, call):
        raise NotImplementedError("a stacked group is clipped flat: fine-grained clipping trains one model at a time")


_STACKED = {nn.Linear: StackedLinear, InputDecay: StackedInputDecay}


def _stackable(module: nn.Module) -> type | None:
    return _STACKED.get(type(module))


def stack_models(models: Sequence[nn.Module]) -> nn.Module:
    """One module computing the K ``models`` (one architecture) on their own rows of a (K B, ...) batch.

    Raises ValueError where a model has a trainable parameter outside ``nn.Linear`` and GRU-D's ``InputDecay`` (it
    would have no stacked rule: use the functorch path), or buffers that differ between members (a shared forward
    reads one copy)."""
    stacked = copy.deepcopy(models[0])
    named = [dict(m.named_modules()) for m in models]
    for name, module in list(stacked.named_modules()):
        kind = _stackable(module)
        if kind is None:
            if any(p.requires_grad for p in module.parameters(recurse=False)):
                raise ValueError(f"{type(module).__name__} {name!r} has no stacked layer: a batched group of it "
                                 "takes its per-sample gradients by torch.func")
            continue
        replacement = kind([n[name] for n in named])
        parent, _, child = name.rpartition(".")
        setattr(stacked.get_submodule(parent) if parent else stacked, child, replacement)
    for name, buffer in models[0].named_buffers():
        if any(not torch.equal(dict(m.named_buffers())[name], buffer) for m in models[1:]):
            raise ValueError(f"buffer {name!r} differs between the members: they cannot share one forward")
    if any(rule_of(m) is None and any(True for _ in m.parameters(recurse=False)) for m in stacked.modules()):
        raise ValueError("a parameter of the stacked model has no ghost-clipping rule")
    return stacked


def unstack_into(stacked: nn.Module, models: Sequence[nn.Module]) -> None:
    """Copy member k's weights of ``stacked`` back into ``models[k]``."""
    layers = dict(stacked.named_modules())
    with torch.no_grad():
        for k, model in enumerate(models):
            for name, p in model.named_parameters():
                owner, _, attribute = name.rpartition(".")
                p.copy_(getattr(layers[owner], attribute)[k])
