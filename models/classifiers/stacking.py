"""K models of one architecture as one module, and AdamW for each member: how a group of fits trains together.

:func:`stack_models` copies the first model and replaces each of its layers by a stacked layer holding the K members'
weights along a leading axis: :class:`StackedLinear` for ``nn.Linear``, :class:`StackedInputDecay` for GRU-D's
:class:`~privehr.models.classifiers.grud.InputDecay`. The stacked module takes the K members' batches one after the
other along the batch axis (K x B rows, member-major) and applies member k's weights to rows k B ... (k + 1) B - 1
(one batched matrix product per layer), so the model's own forward runs unchanged: GRU-D's 24-hour loop runs once
for the whole group instead of once per member. :class:`MemberAdamW` is torch's AdamW for every member at once, each
at its own learning rate and weight decay. Stacking is not DP: the non-private trainer
(:mod:`privehr.models.classifiers.batched_training`) and DP-SGD's batched groups (:mod:`privehr.models.dpsgd.batched`,
whose per-layer clipping rules for the stacked layers are in :mod:`privehr.models.dpsgd.rules`) both build on it.

>>> from torch import nn
>>> members = [nn.Sequential(nn.Linear(3, 2), nn.Tanh(), nn.Linear(2, 1)) for _ in range(4)]
>>> stacked = stack_models(members)
>>> x = torch.randn(4 * 5, 3)                        # 5 rows for each of the 4 members
>>> torch.allclose(stacked(x).view(4, 5, 1)[2], members[2](x.view(4, 5, 3)[2]), atol=1e-6)
True
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import torch
from torch import nn

from privehr.models.classifiers.grud import InputDecay

__all__ = ["StackedLinear", "StackedInputDecay", "stack_models", "unstack_into", "stackable", "same_architecture",
           "MemberAdamW", "BETAS", "EPS"]

#: AdamW's defaults in torch.optim.AdamW (what the single trainers use)
BETAS, EPS = (0.9, 0.999), 1e-8


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


_STACKED = {nn.Linear: StackedLinear, InputDecay: StackedInputDecay}


def _stackable(module: nn.Module) -> type | None:
    return _STACKED.get(type(module))


def stack_models(models: Sequence[nn.Module]) -> nn.Module:
    """One module computing the K ``models`` (one architecture) on their own rows of a (K B, ...) batch.

    Raises ValueError where a model has a trainable parameter outside ``nn.Linear`` and GRU-D's ``InputDecay`` (it
    has no stacked layer: DP-SGD then takes the functorch path), or buffers that differ between members (a shared
    forward reads one copy)."""
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
    fixed = lambda m: {**dict(m.named_buffers()), **{n: p for n, p in m.named_parameters()  # noqa: E731
                                                     if not p.requires_grad}}
    for name, value in fixed(models[0]).items():  # one copy is read by the shared forward: it must be everyone's
        if any(not torch.equal(fixed(m)[name], value) for m in models[1:]):
            raise ValueError(f"{name!r} (a buffer or frozen parameter) differs between the members: they cannot "
                             "share one forward")
    return stacked


def unstack_into(stacked: nn.Module, models: Sequence[nn.Module]) -> None:
    """Copy member k's weights of ``stacked`` back into ``models[k]``."""
    layers = dict(stacked.named_modules())
    with torch.no_grad():
        for k, model in enumerate(models):
            for name, p in model.named_parameters():
                owner, _, attribute = name.rpartition(".")
                p.copy_(getattr(layers[owner], attribute)[k])


def stackable(model: nn.Module) -> bool:
    """Whether the members of ``model``'s architecture can be stacked into one module."""
    try:
        stack_models([model])
    except ValueError:
        return False
    return True


def same_architecture(models: Sequence[nn.Module]) -> bool:
    """Whether ``models`` can be stacked: one class, and the same names, shapes and dtypes of parameters and buffers."""
    def signature(m):
        return type(m), [(k, v.shape, v.dtype, v.requires_grad if isinstance(v, nn.Parameter) else None)
                         for k, v in [*m.named_parameters(), *m.named_buffers()]]
    first = signature(models[0])
    return all(signature(m) == first for m in models[1:])


class MemberAdamW:
    """torch.optim.AdamW's update (decoupled weight decay, bias corrections) for K members stacked along the first
    axis of every parameter in ``params``, each at its own learning rate and weight decay. :meth:`step` updates the
    active members; the others (their plan's steps taken) keep their weights and state. Every active member is at the
    same step count: every member starts at step 1, and one that stops never starts again."""

    def __init__(self, params: dict[str, torch.Tensor], lr: Sequence[float], weight_decay: Sequence[float]):
        first = next(iter(params.values()))
        self.params = params
        self.lr = torch.tensor(list(lr), dtype=first.dtype, device=first.device)
        self.weight_decay = torch.tensor(list(weight_decay), dtype=first.dtype, device=first.device)
        self.exp_avg = {n: torch.zeros_like(v) for n, v in params.items()}
        self.exp_avg_sq = {n: torch.zeros_like(v) for n, v in params.items()}
        self.steps = 0

    def step(self, grads: dict[str, torch.Tensor], active: torch.Tensor | None = None) -> None:
        """One update with ``grads`` (the members' gradients, stacked as the parameters are); ``active``: a boolean
        per member (default: every member)."""
        self.steps += 1
        if active is None:
            active = torch.ones(len(self.lr), dtype=torch.bool, device=self.lr.device)
        beta1, beta2 = BETAS
        correction1, correction2 = 1 - beta1 ** self.steps, 1 - beta2 ** self.steps
        for n, p in self.params.items():
            shape = (-1, *[1] * (p.dim() - 1))
            p = p.detach()
            on = active.view(shape)
            g = grads[n]
            new_p = p * (1 - self.lr * self.weight_decay).view(shape)
            m = self.exp_avg[n].lerp(g, 1 - beta1)
            v = self.exp_avg_sq[n] * beta2 + (1 - beta2) * g * g
            denom = (v.sqrt() / math.sqrt(correction2)) + EPS
            new_p = new_p - (self.lr / correction1).view(shape) * m / denom
            with torch.no_grad():  # in place: a stacked module reads these parameters
                p.copy_(torch.where(on, new_p, p))
            self.exp_avg[n] = torch.where(on, m, self.exp_avg[n])
            self.exp_avg_sq[n] = torch.where(on, v, self.exp_avg_sq[n])
