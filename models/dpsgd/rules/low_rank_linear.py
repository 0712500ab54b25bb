"""DP-HFlow's :class:`~privehr.models.nf.low_rank_linear.LowRankLinear` (W = diag(s) + A B): its per-sample
gradients from the kept input x_i and dl_i/d[z, log|det W|], materialised (D (2r + 2) numbers per sample and call):

    dl_i/dW = G_i x_i^T + c_i W^{-T},      G_i = dl_i/dz_i,   c_i = dl_i/d(log|det W|)

(Lee, Kim, Jeong, Ro, AAAI 2022, eq. (4), with the log-det term the per-sample loss adds; the layer's module
docstring derives it).
"""

from __future__ import annotations

import torch
from torch import nn

from privehr.models.dpsgd.rules.base import Call, GhostRule, register_ghost_rule
from privehr.models.nf.low_rank_linear import LowRankLinear

__all__ = ["LowRankLinearRule"]


@register_ghost_rule(LowRankLinear)
class LowRankLinearRule(GhostRule):
    """Per-sample gradients of a :class:`LowRankLinear` from its input x_i and dl_i/d[z, log|det W|] (module doc)."""

    def per_sample_gradients(self, layer: LowRankLinear, call: Call) -> dict[nn.Parameter, torch.Tensor]:
        """{parameter: (batch, *shape)}: every trainable parameter's per-sample gradient (cached on the call)."""
        if "grads" in call.cache:
            return call.cache["grads"]
        x, back = call.activation, call.backprop
        g, c = back[..., :-1], back[..., -1].sum(1)  # G (batch, K, D), c (batch,)
        in_log_det = [p for p in (layer.log_scale, layer.left, layer.right) if p.requires_grad]
        log_det_grads = {}
        if in_log_det:
            with torch.enable_grad():
                log_det_grads = dict(zip(in_log_det, torch.autograd.grad(layer.log_abs_det(), in_log_det)))
        left, right = layer.left.detach().to(g.dtype), layer.right.detach().to(g.dtype)
        grads = {}
        if layer.log_scale.requires_grad:
            grads[layer.log_scale] = (g * x).sum(1) * layer.log_scale.detach().exp()
        if layer.left.requires_grad:  # G (B x)^T, eq. (4)
            grads[layer.left] = torch.einsum("bkd,bkr->bdr", g, x @ right.T)
        if layer.right.requires_grad:  # A^T G x^T, eq. (4)
            grads[layer.right] = torch.einsum("bkd,dr,bke->bre", g, left, x)
        for p, term in log_det_grads.items():
            grads[p] = grads[p] + c.view(-1, *[1] * term.dim()) * term.to(g.dtype)
        if layer.bias.requires_grad:
            grads[layer.bias] = g.sum(1)
        call.cache["grads"] = grads
        return grads

    def squared_norms(self, layer, call):
        total = torch.zeros(len(call.backprop), dtype=call.backprop.dtype, device=call.backprop.device)
        for g in self.per_sample_gradients(layer, call).values():
            total = total + g.flatten(1).square().sum(1)
        return total

    def clipped_sums(self, layer, call, scale):
        return {p: torch.tensordot(scale, g, 1) for p, g in self.per_sample_gradients(layer, call).items()}

    @classmethod
    def example(cls):
        layer = LowRankLinear(5, rank=2).double()
        with torch.no_grad():
            layer.right.normal_(0, 0.3), layer.log_scale.normal_(0, 0.2)  # off the identity start
        return layer, (torch.randn(6, 3, 5, dtype=torch.float64),)
