"""MAF: Masked Autoregressive Flow (Papamakarios, Pavlakou, Murray, NeurIPS 2017), arXiv:1705.07057.

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.

K blocks, each a Gaussian MADE followed by a reversal of the variable order. In the density
direction block k maps x to

    u_d = (x_d - mu_d(x_{<d})) * exp(-alpha_d(x_{<d})),     log|det du/dx| = -sum_d alpha_d,

and log p(x) = log N(u_K; 0, I) + sum_k log|det_k|. Sampling inverts each block one dimension at a
time (D passes per block). No batch norm (it mixes samples and releases un-noised running
statistics: the code of Su et al. 2023); no data-initialised ActNorm: every parameter starts data-independent,
so the whole model can be trained by DP-SGD with per-sample gradients (Opacus hooks, the rule for
:class:`~privehr.models.nf.made.MaskedLinear` in :mod:`privehr.models.dpsgd.rules.masked_linear`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from privehr.models.nf.made import MADE

__all__ = ["MAF"]


class MAF(nn.Module):
    """A parameter-free top module over ``blocks`` MADEs; ``log_prob(x)`` is per sample.

    >>> flow = MAF(3, blocks=2, hidden_size=8)
    >>> flow.log_prob(torch.zeros(4, 3)).shape
    torch.Size([4])
    """

    def __init__(self, features: int, blocks: int = 5, hidden_size: int = 64, hidden_layers: int = 1,
                 alpha_bound: float = 5.0):
        super().__init__()
        self.features = features
        self.blocks = nn.ModuleList(MADE(features, hidden_size, hidden_layers, alpha_bound) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.log_prob(x)

    def transform(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(u, log|det du/dx|): the density direction, data to base."""
        log_det = x.new_zeros(x.shape[0])
        for made in self.blocks:
            mu, alpha = made(x)
            x = ((x - mu) * torch.exp(-alpha)).flip(-1)
            log_det = log_det - alpha.sum(-1)
        return x, log_det

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        u, log_det = self.transform(x)
        return log_det - 0.5 * (u ** 2).sum(-1) - 0.5 * self.features * math.log(2 * math.pi)

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """n draws: u ~ N(0, I), then each block inverted, x_d = u_d exp(alpha_d) + mu_d, d = 1..D."""
        reference = next(self.parameters())
        u = torch.randn(n, self.features, generator=generator, dtype=reference.dtype).to(reference.device)
        for made in reversed(self.blocks):
            u = u.flip(-1)
            x = torch.zeros_like(u)
            for d in range(self.features):
                mu, alpha = made(x)
                x[:, d] = u[:, d] * torch.exp(alpha[:, d]) + mu[:, d]
            u = x
        return u
