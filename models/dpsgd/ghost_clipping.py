"""Per-sample gradient clipping without per-sample gradients (ghost clipping with book-keeping).

DP-SGD needs, for every sample i of a batch, the norm of its gradient g_i and then the clipped sum
sum_i c_i g_i with c_i = min(1, C / ||g_i||). Opacus materialises g_i for every layer (hooks) or
vmaps over the batch (functorch). Here the forward pass keeps each layer's input A and output, one
backward of sum_i l_i reaches the layer outputs only (B = dl/dy), and every layer's contribution to
||g_i||^2 and to the clipped sum is computed from (A, B) by the layer's rule:

Each layer type's rule is a file of :mod:`privehr.models.dpsgd.rules`:

* ``nn.Linear`` used K times per sample (at K time steps, or on a (batch, K, in) input), with the
  sample's tokens A_i (K x in) and B_i (K x out): g_i = B_i^T A_i for the weight, so

      ||g_i||^2 = sum_{k,k'} (A_ik . A_ik') (B_ik . B_ik')          (two K x K Grams: "ghost norm")

  or, where in * out < K (in + out), the (out x in) g_i itself (Bu et al.'s "mixed" choice, whichever
  costs fewer operations); for the bias ||sum_k B_ik||^2. The clipped sum is one GEMM,
  (c * B)^T A over all tokens, instead of a second backward (book-keeping).
* :class:`~privehr.models.nf.made.MaskedLinear`: the gradient is (B_i^T A_i) * M; with one token per sample
  ||(B_i^T A_i) * M||^2 = sum_j B_ij^2 (M^2 (A_i^2))_j; with K tokens, K x K Grams per group of identical mask
  rows (a MADE's mask has one row per degree) where that costs fewer operations, else materialised with the mask.
* :class:`~privehr.models.classifiers.grud.InputDecay` (gamma = exp(-relu(w delta + b)), elementwise): g_i has F entries,
  written out in closed form.

So a DP-SGD step costs one forward, one backward to the layer outputs and a few small batched
products per layer. Papers: Li, Tramer, Liang, Hashimoto, "Large Language Models Can Be Strong
Differentially Private Learners", ICLR 2022 (ghost clipping of sequence layers, the Gram form);
Bu, Mao, Xu, "Scalable and Efficient Training of Large Convolutional Neural Networks with
Differential Privacy", NeurIPS 2022 (mixed ghost clipping); Bu, Wang, Zha, Karypis,
"Differentially Private Optimization on Large Model at Small Cost", ICML 2023 (book-keeping). The
mask rule is privehr's. Tested equal to torch.func per-sample gradients in tests/models.

What it assumes, and checks: every trainable parameter sits in exactly one module with a rule
(anything else would escape clipping or be overwritten, so it raises), every ruled layer sees the
batch first, and samples do not interact (a batch norm in training mode is refused, with or without
parameters). The Gram norm is an upper bound including float rounding (:func:`_gram_norms`).

Each sample's norm equals its per-sample gradient's norm from ``torch.func`` (up to that margin), and the clipped
sum of a batch of 8 is at most 8 C:

>>> from torch.func import functional_call, grad, vmap
>>> model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)).double()
>>> x, y = torch.randn(8, 3, dtype=torch.float64), torch.rand(8, dtype=torch.float64)
>>> losses = lambda m, x: (m(x).squeeze(-1) - y) ** 2
>>> _, norms, sums = clipped_gradient_sum(model, losses, (x,), max_grad_norm=0.1)
>>> params = {k: v.detach() for k, v in model.named_parameters()}
>>> one = lambda p, xi, yi: (functional_call(model, p, (xi[None],)).squeeze() - yi) ** 2
>>> per_sample = vmap(grad(one), in_dims=(None, 0, 0))(params, x, y)
>>> exact = torch.cat([g.flatten(1) for g in per_sample.values()], 1).norm(dim=1)
>>> bool(torch.allclose(norms, exact, rtol=1e-6))
True
>>> bool(torch.cat([s.flatten() for s in sums.values()]).norm() <= 8 * 0.1 + 1e-9)
True
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from privehr.models.dpsgd.rules import GHOST_RULES, Call, rule_of

__all__ = ["clipped_gradient_sum", "clipped_layers", "collect_calls"]


def _join(parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], batch: int, needs_output: bool) -> Call:
    """One :class:`Call` from (input, output, dl/d(output)) of each forward call of a layer."""
    def tokens(tensors):
        flat = [t.reshape(batch, -1, t.shape[-1]) for t in tensors]
        return flat[0] if len(flat) == 1 else torch.cat(flat, 1)
    b = tokens([p[2] for p in parts])
    out = tokens([p[1].detach() for p in parts]) if needs_output else None
    return Call(tokens([p[0] for p in parts]).to(b.dtype), out, b)


def clipped_layers(model: nn.Module) -> list[nn.Module]:
    """The model's modules with a ghost rule. Raises if a trainable parameter sits anywhere else (it would
    escape clipping: a bare parameter of a container, a layer type without a rule), if one is shared by two
    ruled layers (its sums would overwrite each other), or if a batch norm is in training mode (it couples the
    samples of a batch, with or without parameters)."""
    coupled = [n for n, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training]
    if coupled:
        raise ValueError(f"{coupled}: batch norm couples the samples of a batch; per-sample clipping cannot bound "
                         "one record's influence (remove it for DP training)")
    layers = [m for m in model.modules() if rule_of(m) is not None]
    owners: dict[int, int] = {}
    for layer in layers:
        for p in layer.parameters(recurse=False):
            owners[id(p)] = owners.get(id(p), 0) + 1
    shared = [n for n, p in model.named_parameters(remove_duplicate=False) if owners.get(id(p), 0) > 1]
    if shared:
        raise ValueError(f"parameters {sorted(set(shared))} are shared by several layers; ghost clipping needs one "
                         "owner per parameter (use Opacus's hooks)")
    stray = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in owners]
    if stray:
        raise ValueError(f"parameters {stray} are in layers without a ghost-clipping rule "
                         f"(rules exist for {sorted(t.__name__ for t in GHOST_RULES)}); use Opacus's hooks")
    return layers


def collect_calls(model: nn.Module, losses_fn: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...]
                  ) -> tuple[torch.Tensor, list[nn.Module], dict[nn.Module, Call]]:
    """(per-sample losses, the ruled layers, {layer: its :class:`Call`}) of one forward and one backward of
    ``losses_fn(model, *inputs)`` to the layer outputs (a layer whose output needs no gradient has no call)."""
    layers = clipped_layers(model)
    batch = len(inputs[0])
    calls: dict[nn.Module, list] = {layer: [] for layer in layers}

    def keep(layer, args, out):
        if args[0].shape[0] != batch or out.shape[0] != batch:  # per-sample rows must lead every ruled layer's IO
            raise ValueError(f"{type(layer).__name__} saw a tensor of shape {tuple(args[0].shape)} in a batch of "
                             f"{batch}: ghost clipping needs the batch first in every layer's input and output")
        calls[layer].append((args[0].detach(), out))

    handles = [layer.register_forward_hook(keep) for layer in layers]
    try:
        losses = losses_fn(model, *inputs)
    finally:
        for h in handles:
            h.remove()
    flat = [(layer, a, out) for layer in layers for a, out in calls[layer] if out.requires_grad]
    grads = torch.autograd.grad(losses.sum(), [out for _, _, out in flat], allow_unused=True)
    parts: dict[nn.Module, list] = {}
    for (layer, a, out), g in zip(flat, grads):
        parts.setdefault(layer, []).append((a, out, torch.zeros_like(out) if g is None else g))
    return losses, layers, {layer: _join(p, batch, rule_of(layer).needs_output) for layer, p in parts.items()}


def clipped_gradient_sum(model: nn.Module, losses_fn: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...],
                         max_grad_norm: float):
    """(per-sample losses, per-sample gradient norms, {parameter: sum_i c_i g_i}) for ``losses_fn(model, *inputs)``,
    which must return one loss per sample (batch first). An empty batch gives zero sums."""
    if len(inputs[0]) == 0:
        layers = clipped_layers(model)
        trainable = [p for layer in layers for p in layer.parameters(recurse=False) if p.requires_grad]
        empty = torch.zeros(0, dtype=trainable[0].dtype, device=inputs[0].device)
        return empty, empty, {p: torch.zeros_like(p) for p in trainable}
    losses, layers, joined = collect_calls(model, losses_fn, inputs)
    trainable = [p for layer in layers for p in layer.parameters(recurse=False) if p.requires_grad]
    squared = torch.zeros(len(inputs[0]), dtype=losses.dtype, device=losses.device)
    for layer, call in joined.items():
        squared = squared + rule_of(layer).squared_norms(layer, call)
    norms = torch.where(squared.isnan(), torch.inf, squared).sqrt()  # a norm no rule could compute is not trusted
    scale = (max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
    sums = {p: torch.zeros_like(p) for p in trainable}
    for layer, call in joined.items():
        sums.update(rule_of(layer).clipped_sums(layer, call, scale))
    return losses.detach(), norms, sums
