"""Fine-grained per-sample gradient clipping for DP-SGD: flat, per-layer, per-unit, stochastic sparsification.

Lee, Kim, Jeong, Ro, "Differentially Private Normalizing Flows for Synthetic Tabular Data
Generation", AAAI 2022, sections "Per-layer Clipping" and "Fine-grained Gradient Clipping";
McMahan, Ramage, Talwar, Zhang, "Learning Differentially Private Recurrent Language Models", ICLR
2018, arXiv:1710.06963 (per-layer clipping); Ye, Dai, Luo, Guo, Qi, Yang, Chen, "Accelerating CNN
Training by Pruning Activation Gradients", ECCV 2020 (the unbiased stochastic pruning operator
T_{tau,gamma} below, which the paper applies to per-sample gradients).

Per-sample gradient g_i of a model of ruled layers l (:func:`privehr.models.dpsgd.ghost_clipping.clipped_layers`:
nn.Linear, MaskedLinear, LowRankLinear, ...), g_il its part in layer l (all the layer's parameters):

* ``"flat"``: clip_C(g_i) = min(1, C / ||g_i||) g_i (Abadi et al. 2016), exactly
  :func:`privehr.models.dpsgd.ghost_clipping.clipped_gradient_sum`.
* ``"per_layer"``: clip_{C_l}(g_il) for every layer, thresholds from :func:`layer_thresholds`: C is
  split first between the model's networks (its top-level children by default: for
  :class:`~privehr.models.nf.hflow.HFlow` the spline conditioner, the linear flows, the dequantizer) and then
  between the layers of a network in proportion to their parameter counts (masked-out weights not
  counted), in squares: C_net^2 = C^2 / J (equal shares; ``network_shares="parameters"`` splits
  C^2 by parameter count too) and C_l^2 = C_net^2 P_l / P_net, so sum_l C_l^2 = C^2. Equal network
  shares are this module's reading of the paper's "first split between networks and then between
  layers within a network proportional to their parameter complexity" (were both steps by parameter
  count, the first would be void); squares, so that every parameter gets the same share C^2 / P of
  its network's budget. Norms and sums come from the layers' ghost rules (no per-sample gradient is
  materialised beyond what the rules do for the flat clip).
* ``"per_unit"``: within layer l, unit u (output neuron: row u of a weight together with entry u of
  the bias, and generally index u along the first dimension of the layer's parameters of the same
  leading size; for LowRankLinear, unit u is (log_s_u, A_u., b_u) and row v of B another unit) gets
  C_l[u] = C_l sqrt(||G_u||_1 / sum_v ||G_v||_1) (the paper's formula, L1 norms of the sample's own
  per-unit gradients), and G_u is clipped to C_l[u]; sum_u C_l[u]^2 = C_l^2. A caution: where
  clipping binds, sample i's unit u is scaled by C_l[u] / ||G_u||_2, about 1 / sqrt(magnitude) for a
  dense unit, so across samples it up-weights those whose gradient in u is small; the clipped sum
  need not be a descent direction. In a short probe (DP-HFlow, 2000 synthetic rows, C = 1, per-sample
  norms about 20, Adam at 5e-3, no noise) per-unit clipping made the fit diverge where per-layer
  clipping did not; with C large (no clipping) both fit like non-private training.
* ``"sparsified"``: g_il <- clip_{C_l}(T_{tau,gamma}(g_il)), with tau the k-th largest |entry| of g_il,
  k = max(1, ceil(m (1 - s))) for m the layer's free entries and sparsity s, and

      T(x) = x if |x| > tau,  sign(x) tau if tau gamma <= |x| <= tau,  0 if |x| < tau gamma,  gamma ~ U[0, 1],

  one independent gamma per entry and per sample (E_gamma T(x) = x: P(gamma <= |x| / tau) tau = |x|; the
  paper's operator with a fresh gamma per coordinate). s = 0 gives k = m, tau = min |entry|, T = identity:
  per-layer clipping. The gammas come from the ``generator`` the caller passes (DP training:
  ``NoiseSource.torch_generator("sparsify")``), drawn as one ``torch.rand(batch, m_l)`` per layer with a
  forward call, in :func:`~privehr.models.dpsgd.ghost_clipping.clipped_layers` order, the columns the layer's parameters in
  their registration order, each flattened.

The per-unit and sparsified modes materialise every layer's per-sample gradients (batch x
parameters numbers per layer), affordable for the small flows of privehr (a few 10^4 parameters,
batches of a few hundred); flat and per-layer use the fast rules. The layers' calls are collected as
:func:`~privehr.models.dpsgd.ghost_clipping.clipped_gradient_sum` collects them (:func:`~privehr.models.dpsgd.ghost_clipping.collect_calls`),
and the per-sample gradients are each rule's ``per_sample_gradients``.

Privacy: in every mode each sample's clipped contribution has norm at most C: per-unit rows at most
C_l[u], so a layer at most sqrt(sum_u C_l[u]^2) = C_l; every layer at most C_l, so the sample at most
sqrt(sum_l C_l^2) = C (the 1e-6 added to every norm before dividing, as in the flat clip, keeps
rounding on the safe side). The per-sample maps may depend on the sample's own gradient (the per-unit
thresholds, tau) and on data-independent randomness (gamma), never on another sample, so adding or
removing one record moves the clipped sum by at most C (for any gammas: they need not be secret), and the
Gaussian noise N(0, sigma^2 C^2 I) of
:func:`privehr.models.dpsgd.noisy_step.set_noised_gradients` gives the same guarantee as with flat clipping: the
accounting of :class:`~privehr.models.privacy.release_plan.ReleasePlan` is unchanged. Tested adversarially (huge
gradients) in tests/models/test_fine_grained_clipping.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import get_args

import torch
from torch import nn

from privehr.core.config import FineGrainedClipping
from privehr.models.dpsgd.ghost_clipping import clipped_gradient_sum, clipped_layers, collect_calls
from privehr.models.dpsgd.rules import Call, rule_of

__all__ = ["CLIPPING_MODES", "layer_thresholds", "stochastic_sparsify", "fine_grained_clipped_sum",
           "per_sample_gradients"]

CLIPPING_MODES = get_args(FineGrainedClipping)  # ("flat", "per_layer", "per_unit", "sparsified"): named in the config

_EPS = 1e-6  # added to every norm before dividing, as the flat clip (and Opacus) does


def _top_level(name: str) -> str:
    return name.split(".", 1)[0]


def _free(layer: nn.Module, p: nn.Parameter) -> torch.Tensor | None:
    """The fixed 0/1 mask of a masked layer's weight (its masked-out entries never get a gradient), else None."""
    mask = getattr(layer, "mask", None)
    if p is getattr(layer, "weight", None) and isinstance(mask, torch.Tensor) and mask.shape == p.shape:
        return mask != 0
    return None


def _count(layer: nn.Module) -> int:
    """Trainable parameters of a ruled layer, masked-out weights not counted."""
    total = 0
    for p in layer.parameters(recurse=False):
        if p.requires_grad:
            free = _free(layer, p)
            total += int(free.sum()) if free is not None else p.numel()
    return total


def layer_thresholds(model: nn.Module, max_grad_norm: float, networks: Callable[[str], str] | None = None,
                     network_shares: str = "equal") -> dict[nn.Module, float]:
    """C_l for every ruled layer of ``model`` (module doc): sum_l C_l^2 = C^2.

    ``networks`` maps a layer's qualified name to its network (default: the top-level child's name).

    >>> net = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 1))
    >>> c = layer_thresholds(net, 1.0, networks=lambda name: "one")
    >>> round(sum(v ** 2 for v in c.values()), 9), round(c[net[0]] ** 2, 4)  # P = 16 and 5
    (1.0, 0.7619)
    """
    if network_shares not in ("equal", "parameters"):
        raise ValueError(f"network_shares must be 'equal' or 'parameters', got {network_shares!r}")
    networks = networks or _top_level
    ruled = set(clipped_layers(model))
    groups: dict[str, list[tuple[nn.Module, int]]] = {}
    for name, module in model.named_modules():
        if module in ruled:
            groups.setdefault(networks(name), []).append((module, _count(module)))
    sizes = {net: sum(p for _, p in layers) for net, layers in groups.items()}
    total, live = sum(sizes.values()), sum(1 for s in sizes.values() if s > 0)
    thresholds = {}
    for net, layers in groups.items():
        if sizes[net] == 0:
            thresholds.update({layer: 0.0 for layer, _ in layers})
            continue
        share = 1 / live if network_shares == "equal" else sizes[net] / total
        for layer, count in layers:
            thresholds[layer] = max_grad_norm * math.sqrt(share * count / sizes[net])
    return thresholds


def stochastic_sparsify(g: torch.Tensor, sparsity: float, generator: torch.Generator | None = None,
                        free: torch.Tensor | None = None) -> torch.Tensor:
    """T_{tau,gamma} applied to each row of ``g`` (batch, m): tau the row's k-th largest |entry| among the ``free``
    columns (all by default), k = max(1, ceil(m_free (1 - sparsity))), one gamma ~ U[0, 1) per entry.

    >>> g = torch.tensor([[3.0, -0.5, 0.1, 2.0]])
    >>> stochastic_sparsify(g, 0.0, torch.Generator().manual_seed(0)).tolist()  # s = 0: unchanged
    [[3.0, -0.5, 0.10000000149011612, 2.0]]
    """
    if not 0 <= sparsity < 1:
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity!r}")
    gamma = torch.rand(g.shape, generator=generator, dtype=g.dtype,
                       device=generator.device if generator is not None else g.device).to(g.device)
    magnitude = g.abs()
    if free is not None:
        magnitude = magnitude[:, free]
    m = magnitude.shape[1]
    if m == 0:
        return g
    k = max(1, math.ceil(m * (1 - sparsity) - 1e-9))
    tau = torch.kthvalue(magnitude, m - k + 1, dim=1).values[:, None]
    a = g.abs()
    rounded = torch.where(a >= tau * gamma, torch.sign(g) * tau, torch.zeros_like(g))
    return torch.where(a > tau, g, rounded)


def per_sample_gradients(layer: nn.Module, call: Call) -> dict[nn.Parameter, torch.Tensor]:
    """{parameter: (batch, *shape)} for a ruled layer's trainable parameters, from its :class:`Call` (the rule's
    :meth:`~privehr.models.dpsgd.ghost_clipping.GhostRule.per_sample_gradients`)."""
    return rule_of(layer).per_sample_gradients(layer, call)


def _unit_scaled(grads: dict[nn.Parameter, torch.Tensor], threshold: float) -> dict[nn.Parameter, torch.Tensor]:
    """Per-unit clipping of one layer's per-sample gradients (module doc)."""
    groups: dict[int, list[nn.Parameter]] = {}
    for p, g in grads.items():
        groups.setdefault(g.shape[1] if g.dim() > 1 else -1, []).append(p)  # -1: a scalar parameter, one unit
    l1, l2 = [], []
    for members in groups.values():
        rows = [grads[p].reshape(len(grads[p]), grads[p].shape[1] if grads[p].dim() > 1 else 1, -1)
                for p in members]  # (batch, units, entries per unit)
        l1.append(sum(r.abs().sum(2) for r in rows))
        l2.append(sum(r.square().sum(2) for r in rows).sqrt())
    l1, l2 = torch.cat(l1, 1), torch.cat(l2, 1)
    unit_thresholds = threshold * (l1 / l1.sum(1, keepdim=True).clamp(min=torch.finfo(l1.dtype).tiny)).sqrt()
    scale = (unit_thresholds / (l2 + _EPS)).clamp(max=1.0)
    out, start = {}, 0
    for members in groups.values():
        width = grads[members[0]].shape[1] if grads[members[0]].dim() > 1 else 1
        s = scale[:, start:start + width]
        for p in members:
            g = grads[p]
            out[p] = g * s.reshape(len(g), -1, *[1] * (g.dim() - 2)) if g.dim() > 1 else g * s[:, 0]
        start += width
    return out


def _sparsified_scaled(layer: nn.Module, grads: dict[nn.Parameter, torch.Tensor], threshold: float, sparsity: float,
                       generator: torch.Generator | None) -> dict[nn.Parameter, torch.Tensor]:
    """clip_{C_l}(T(g_il)) of one layer, every sample (module doc)."""
    params = [p for p in layer.parameters(recurse=False) if p in grads]  # the layer's own order: a fixed draw layout
    batch = len(grads[params[0]])
    flat = torch.cat([grads[p].reshape(batch, -1) for p in params], 1)
    free = torch.cat([(_free(layer, p) if _free(layer, p) is not None else torch.ones_like(p, dtype=torch.bool))
                      .reshape(-1).to(flat.device) for p in params])
    sparse = stochastic_sparsify(flat, sparsity, generator, free)
    scale = (threshold / (torch.linalg.vector_norm(sparse, dim=1) + _EPS)).clamp(max=1.0)
    sparse = sparse * scale[:, None]
    out, start = {}, 0
    for p in params:
        out[p] = sparse[:, start:start + p.numel()].reshape(batch, *p.shape)
        start += p.numel()
    return out


def fine_grained_clipped_sum(model: nn.Module, losses_fn: Callable[..., torch.Tensor],
                             inputs: tuple[torch.Tensor, ...], max_grad_norm: float, mode: str = "flat",
                             sparsity: float = 0.5, generator: torch.Generator | None = None,
                             networks: Callable[[str], str] | None = None, network_shares: str = "equal"):
    """(per-sample losses, per-sample unclipped gradient norms, {parameter: sum_i clip(g_i)}) of
    ``losses_fn(model, *inputs)`` under ``mode`` (module doc), as
    :func:`~privehr.models.dpsgd.ghost_clipping.clipped_gradient_sum` returns them. Every sample's clipped gradient has norm
    at most ``max_grad_norm``. ``generator``: the gammas of ``"sparsified"`` (torch's default if None)."""
    if mode not in CLIPPING_MODES:
        raise ValueError(f"unknown clipping mode {mode!r}: one of {CLIPPING_MODES}")
    if mode == "flat" or len(inputs[0]) == 0:
        return clipped_gradient_sum(model, losses_fn, inputs, max_grad_norm)
    thresholds = layer_thresholds(model, max_grad_norm, networks, network_shares)
    losses, _, joined = collect_calls(model, losses_fn, inputs)
    sums = {p: torch.zeros_like(p) for layer in thresholds for p in layer.parameters(recurse=False) if p.requires_grad}
    squared = torch.zeros(len(inputs[0]), dtype=losses.dtype, device=losses.device)
    for layer, call in joined.items():
        rule, threshold = rule_of(layer), thresholds[layer]
        if mode == "per_layer":
            layer_squared = rule.squared_norms(layer, call)
            squared = squared + layer_squared
            scale = (threshold / (layer_squared.sqrt() + _EPS)).clamp(max=1.0)
            sums.update(rule.clipped_sums(layer, call, scale))
            continue
        grads = per_sample_gradients(layer, call)
        if not grads:
            continue
        squared = squared + sum(g.flatten(1).square().sum(1) for g in grads.values())
        clipped = (_unit_scaled(grads, threshold) if mode == "per_unit"
                   else _sparsified_scaled(layer, grads, threshold, sparsity, generator))
        sums.update({p: g.sum(0) for p, g in clipped.items()})
    return losses.detach(), squared.sqrt(), sums
