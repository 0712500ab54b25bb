"""A normalizing flow for variational inference: MADE blocks in the sampling direction, then an elementwise affine.

The flow of Su, Wang, Schiavazzi, Liu (2023, arXiv:2302.05787), Section 4.2, is "a MAF with one MADE (1 hidden
layer with 10 neurons) and one batch norm layer". In the VI direction a draw and its density are needed together,
so each MADE (:class:`privehr.models.nf.made.MADE`, the MAF's block) is applied the way an inverse autoregressive flow uses it
(Kingma, Salimans, Jozefowicz, Chen, Sutskever, Welling, "Improved Variational Inference with Inverse
Autoregressive Flow", NeurIPS 2016, arXiv:1606.04934):

    z_0 ~ N(0, I),   z_k = z_{k-1} * exp(alpha(z_{k-1, <d})) + mu(z_{k-1, <d}), reversed between blocks,
    theta = loc + exp(log_scale) * z_K,
    log q(theta) = log N(z_0; 0, I) - sum_k sum_d alpha_k,d - sum_d log_scale_d,

one pass each way. The final elementwise affine stands in for the paper's batch norm, which at sampling time is
an elementwise affine map; unlike batch norm it mixes no draws and keeps no running statistics. Every parameter
starts data-independent (the MADE's output layer at zero, loc 0, log_scale 0): the untrained flow is N(0, I).

>>> flow = VariationalFlow(3, blocks=1, hidden_size=8)
>>> theta, log_q = flow(torch.zeros(4, 3))
>>> theta.shape, log_q.shape
(torch.Size([4, 3]), torch.Size([4]))
"""

from __future__ import annotations

import math

import torch
from torch import nn

from privehr.models.nf.made import MADE

__all__ = ["VariationalFlow"]


class VariationalFlow(nn.Module):
    """forward(z) -> (theta, log q(theta)) for base draws z (m, d)."""

    def __init__(self, dim: int, blocks: int = 1, hidden_size: int = 10, hidden_layers: int = 1,
                 alpha_bound: float = 5.0):
        super().__init__()
        self.dim = dim
        self.blocks = nn.ModuleList(MADE(dim, hidden_size, hidden_layers, alpha_bound) for _ in range(blocks))
        self.loc = nn.Parameter(torch.zeros(dim))
        self.log_scale = nn.Parameter(torch.zeros(dim))

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_q = -0.5 * z.pow(2).sum(-1) - 0.5 * self.dim * math.log(2 * math.pi)
        for k, made in enumerate(self.blocks):
            if k:
                z = z.flip(-1)
            mu, alpha = made(z)
            z = z * torch.exp(alpha) + mu
            log_q = log_q - alpha.sum(-1)
        return self.loc + torch.exp(self.log_scale) * z, log_q - self.log_scale.sum()

    def sample(self, m: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """m draws of theta (no gradient)."""
        reference = self.loc
        z = torch.randn(m, self.dim, generator=generator, dtype=reference.dtype).to(reference.device)
        with torch.no_grad():
            return self(z)[0]
