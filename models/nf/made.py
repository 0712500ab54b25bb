"""MADE: Masked Autoencoder for Distribution Estimation (Germain, Gregor, Murray, Larochelle, ICML 2015).

A feed-forward network whose weight matrices are multiplied elementwise by binary masks so that
output d depends only on inputs that precede d in the ordering. With input degrees 1..D, hidden
degrees m_k = (k mod (D - 1)) + 1 (deterministic: no data, no seed) and

    hidden mask  M[k, j] = 1[m_k >= d_j],        output mask  M[o, k] = 1[d_o > m_k],

the network is autoregressive. Here it outputs, for each input dimension, a shift mu_d and a log
scale alpha_d (the Gaussian MADE of MAF).

For Opacus the mask is a *frozen parameter*, not a buffer: Opacus refuses trainable modules with
buffers. :mod:`privehr.models.dpsgd.rules.masked_linear` gives its per-sample rules.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["MaskedLinear", "MADE", "made_masks"]


class MaskedLinear(nn.Module):
    """y = x (W * M)^T + b with a fixed binary mask M (a parameter with requires_grad=False)."""

    def __init__(self, mask: torch.Tensor, zero_init: bool = False):
        super().__init__()
        out_features, in_features = mask.shape
        linear = nn.Linear(in_features, out_features)
        self.weight = nn.Parameter(torch.zeros_like(linear.weight) if zero_init else linear.weight.detach())
        self.bias = nn.Parameter(torch.zeros_like(linear.bias) if zero_init else linear.bias.detach())
        self.mask = nn.Parameter(mask.to(self.weight.dtype), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight * self.mask, self.bias)


def made_masks(features: int, hidden: list[int]) -> list[torch.Tensor]:
    """Masks of a MADE over ``features`` inputs in their given order; the last is the output mask."""
    degrees = [torch.arange(1, features + 1)]
    for size in hidden:
        degrees.append(torch.arange(size) % max(features - 1, 1) + 1)
    masks = [(d_out[:, None] >= d_in[None, :]) for d_in, d_out in zip(degrees[:-1], degrees[1:])]
    masks.append(degrees[0][:, None] > degrees[-1][None, :])
    return [m.float() for m in masks]


class MADE(nn.Module):
    """x (n, D) -> (mu, alpha), each (n, D), with (mu_d, alpha_d) a function of x_{<d} only.

    The output layer starts at zero, so an untrained MAF is the identity map (data-independent
    initialisation). alpha is softly bounded, alpha = bound * tanh(raw / bound), which keeps the
    exp(alpha) of a noisy DP update finite.
    """

    def __init__(self, features: int, hidden_size: int = 64, hidden_layers: int = 1, alpha_bound: float = 5.0):
        super().__init__()
        masks = made_masks(features, [hidden_size] * hidden_layers)
        self.features, self.alpha_bound = features, alpha_bound
        self.hidden = nn.ModuleList(MaskedLinear(m) for m in masks[:-1])
        self.output = MaskedLinear(masks[-1].repeat(2, 1), zero_init=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x
        for layer in self.hidden:
            h = torch.relu(layer(h))
        mu, raw = self.output(h).chunk(2, dim=-1)
        return mu, self.alpha_bound * torch.tanh(raw / self.alpha_bound)
