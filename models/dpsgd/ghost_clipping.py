"""Per-sample gradient clipping without per-sample gradients (ghost clipping with book-keeping).

DP-SGD needs, for every sample i of a batch, the norm of its gradient g_i and then the clipped sum
sum_i c_i g_i with c_i = min(1, C / ||g_i||). Opacus materialises g_i for every layer (hooks) or
vmaps over the batch (functorch). Here the forward pass keeps each layer's input A and output, one
backward of sum_i l_i reaches the layer outputs only (B = dl/dy), and every layer's contribution to
||g_i||^2 and to the clipped sum is computed from (A, B) by the layer's rule:

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
from dataclasses import dataclass, field

import torch
from torch import nn

from privehr.models.classifiers.grud import InputDecay
from privehr.models.nf.made import MaskedLinear

__all__ = ["GhostRule", "GHOST_RULES", "register_ghost_rule", "clipped_gradient_sum", "clipped_layers", "collect_calls",
           "rule_of", "Call"]


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


GHOST_RULES: dict[type, GhostRule] = {}


def register_ghost_rule(*module_types: type):
    """Class decorator: an instance of the rule handles exactly these module types."""
    def register(rule_cls):
        for t in module_types:
            GHOST_RULES[t] = rule_cls()
        return rule_cls
    return register


def _join(parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], batch: int, needs_output: bool) -> Call:
    """One :class:`Call` from (input, output, dl/d(output)) of each forward call of a layer."""
    def tokens(tensors):
        flat = [t.reshape(batch, -1, t.shape[-1]) for t in tensors]
        return flat[0] if len(flat) == 1 else torch.cat(flat, 1)
    b = tokens([p[2] for p in parts])
    out = tokens([p[1].detach() for p in parts]) if needs_output else None
    return Call(tokens([p[0] for p in parts]).to(b.dtype), out, b)


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


@register_ghost_rule(nn.Linear)
class LinearRule(GhostRule):
    def squared_norms(self, layer, call):
        a, b = call.activation, call.backprop
        k, d_in, d_out = a.shape[1], a.shape[2], b.shape[2]
        total = torch.zeros(len(a), dtype=b.dtype, device=b.device)
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


def _masked_gram_norms(a: torch.Tensor, b: torch.Tensor, rows: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """An upper bound on ||(sum_k B_k^T A_k) * M||_F^2 per sample, rounding included, from K x K Grams per group of
    identical mask rows. Output units j whose rows M_j are the same row m_r see the same inputs, so

        ||(B^T A) * M||^2 = sum_r sum_{k,k'} [sum_{j in r} B_kj B_k'j] [sum_i m_ri^2 A_ki A_k'i],

    two (K x K) Grams per group r: K^2 R (in + out) numbers where the masked gradient has K in out. A MADE's
    mask has at most D distinct rows (one per degree), so at DP-HFlow's shapes (a conditioner used by 3 blocks,
    276 outputs, R = 12) a whole DP-HFlow fit was 2.9-3.4 times faster than materialising (bench/hflow_cost.py).
    Each group's sum is the Gram norm of (A * m_r, B restricted to r), so :func:`_gram_norms`' rounding margin
    applies per group, with K^2 R terms in the final sum (and the rounding of m^2 and of the products before the sums, within its factor 2).
    The Grams are formed in float64 whatever the inputs' precision: float32 squares underflow below 1e-19 (an
    absolute error the relative margin misses) and overflow above 2e19 (inf - inf: a NaN norm); both found by an
    attack on this code, and neither reaches float64's range from float32 inputs. ``rows``, ``group``: the mask's
    distinct rows and each output's row (``torch.unique(mask, dim=0, return_inverse=True)``)."""
    k, d_in, d_out = a.shape[1], a.shape[2], b.shape[2]
    wide = torch.float64
    a, b, rows = a.to(wide), b.to(wide), rows.to(wide)
    members = torch.zeros(d_out, len(rows), dtype=wide, device=b.device)
    members[torch.arange(d_out, device=b.device), group] = 1
    ga = (a[:, :, None, :] * a[:, None, :, :]).flatten(1, 2) @ rows.square().T  # (batch, K^2, R)
    gb = (b[:, :, None, :] * b[:, None, :, :]).flatten(1, 2) @ members
    squared = (ga * gb).sum((1, 2))
    diagonal = torch.arange(k, device=b.device) * (k + 1)  # the (k, k) entries of the flattened K x K Grams
    tokens = (ga[:, diagonal].clamp(min=0) * gb[:, diagonal].clamp(min=0)).sqrt().sum(1)  # (batch, R)
    margin = 2 * (d_in + d_out + k * k * len(rows) + 3) * torch.finfo(wide).eps * tokens.square().sum(1)
    return (squared + margin).clamp(min=0)


def masked_grams_pay(tokens: int, groups: int, d_in: int, d_out: int) -> bool:
    """Whether a masked layer's norms come from grouped Grams (K^2 R (in + out) numbers, small tensors) rather than
    the materialised (out x in) gradient ((K + 2) in out operations, written to memory): the factor 2 is for the
    memory traffic the Grams avoid."""
    return tokens * tokens * groups * (d_in + d_out) <= 2 * (tokens + 2) * d_in * d_out


@register_ghost_rule(MaskedLinear)
class MaskedLinearRule(GhostRule):
    def squared_norms(self, layer, call):
        a, b = call.activation, call.backprop
        k, d_in, d_out = a.shape[1], a.shape[2], b.shape[2]
        total = torch.zeros(len(a), dtype=b.dtype, device=b.device)
        if layer.weight.requires_grad:
            if k == 1:  # sum_j B_j^2 sum_i M_ji^2 A_i^2 (M^2 = M for MADE's binary masks)
                total += (b[:, 0].square() * (a[:, 0].square() @ layer.mask.square().T)).sum(1)
            else:
                rows, group = torch.unique(layer.mask, dim=0, return_inverse=True)
                if masked_grams_pay(k, len(rows), d_in, d_out):
                    wide = _masked_gram_norms(a, b, rows, group)  # float64; rounded up into the batch's precision
                    total += (wide * (1 + torch.finfo(b.dtype).eps)).to(b.dtype)
                else:  # the masked per-sample gradients, kept for the clipped sum
                    call.cache["weight"] = torch.bmm(b.transpose(1, 2), a) * layer.mask
                    total += call.cache["weight"].square().sum((1, 2))
        if layer.bias.requires_grad:
            total += b.sum(1).square().sum(1)
        return total

    def clipped_sums(self, layer, call, scale):
        return _linear_sums(layer, call, scale, layer.mask)

    def per_sample_gradients(self, layer, call):
        return _linear_per_sample(layer, call, layer.mask)


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


def rule_of(module: nn.Module) -> GhostRule | None:
    """The registered rule of ``module``'s type (or of its nearest registered base class)."""
    for t in type(module).__mro__:
        if t in GHOST_RULES:
            return GHOST_RULES[t]
    return None


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
