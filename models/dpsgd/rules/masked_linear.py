"""MADE's :class:`~privehr.models.nf.made.MaskedLinear`: y = x (W * M)^T + b, so g_i = (sum_k B_ik^T A_ik) * M.

With one token per sample ||(B_i^T A_i) * M||^2 = sum_j B_ij^2 (M^2 (A_i^2))_j; with K tokens, K x K Grams per group
of identical mask rows (a MADE's mask has one row per degree) where that costs fewer operations, else materialised
with the mask. The mask multiply matters: without it a norm counts masked-out weights and clips too hard (a bug of a
public DP-MAF patch, ../shared/reference/dpnf_synthesis.md). The mask rule is privehr's. Also Opacus's per-sample
rule for the layer (registered on import), which its generic functorch fallback would otherwise replace.
"""

from __future__ import annotations

import torch
from opacus.grad_sample import register_grad_sampler

from privehr.models.dpsgd.rules.base import GhostRule, register_ghost_rule
from privehr.models.dpsgd.rules.linear import _linear_per_sample, _linear_sums, _start
from privehr.models.nf.made import MaskedLinear, made_masks

__all__ = ["MaskedLinearRule", "masked_grams_pay", "compute_masked_linear_grad_sample"]


def _masked_gram_norms(a: torch.Tensor, b: torch.Tensor, rows: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """An upper bound on ||(sum_k B_k^T A_k) * M||_F^2 per sample, rounding included, from K x K Grams per group of
    identical mask rows. Output units j whose rows M_j are the same row m_r see the same inputs, so

        ||(B^T A) * M||^2 = sum_r sum_{k,k'} [sum_{j in r} B_kj B_k'j] [sum_i m_ri^2 A_ki A_k'i],

    two (K x K) Grams per group r: K^2 R (in + out) numbers where the masked gradient has K in out. A MADE's
    mask has at most D distinct rows (one per degree), so at DP-HFlow's shapes (a conditioner used by 3 blocks,
    276 outputs, R = 12) a whole DP-HFlow fit was 2.9-3.4 times faster than materialising (bench/results/hflow_cost.json).
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
        a, b, k, d_in, d_out, total = _start(call)
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

    @classmethod
    def example(cls):
        layer = MaskedLinear(made_masks(4, [12])[0].to(torch.float64)).double()
        return layer, (torch.randn(6, 3, 4, dtype=torch.float64),)


@register_grad_sampler(MaskedLinear)
def compute_masked_linear_grad_sample(layer: MaskedLinear, activations: list[torch.Tensor],
                                      backprops: torch.Tensor) -> dict[torch.nn.Parameter, torch.Tensor]:
    """Opacus's per-sample gradients: dL_i/dW = (sum_t B_it^T A_it) * M, dL_i/db = sum_t B_it."""
    a = activations[0].to(backprops.dtype)
    grads = {}
    if layer.weight.requires_grad:
        grads[layer.weight] = torch.einsum("n...i,n...j->nij", backprops, a) * layer.mask
    if layer.bias.requires_grad:
        grads[layer.bias] = torch.einsum("n...k->nk", backprops)
    return grads
