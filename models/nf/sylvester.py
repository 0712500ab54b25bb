"""Householder Sylvester flow layer (van den Berg et al. 2018), never forming a D x D matrix.

    f(z) = z + Q R1 tanh(R2 Q^T z + b),
    log|det J_f(z)| = sum_k log|1 + R1_kk R2_kk tanh'((R2 Q^T z + b)_k)|,

with Q (D x M, orthonormal columns) the first M columns of H_1 ... H_K, H_i = I - 2 v_i v_i^T / ||v_i||^2,
applied to vectors as K reflections (O(N D K) work, O(D K) parameters); R1, R2 upper triangular
M x M with diagonals tanh(.), so R1_kk R2_kk in (-1, 1) > -1: every factor above is positive and
the layer is invertible (van den Berg et al., Thm. 2). Matrix determinant lemma:
det(I_D + Q R1 diag(h') R2 Q^T) = det(I_M + diag(h') R2 R1), triangular, hence the product above.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["SylvesterFlow"]


class SylvesterFlow(nn.Module):
    def __init__(self, dim: int, m: int = 4, reflections: int = 4, init_scale: float = 0.01,
                 generator: torch.Generator | None = None):
        super().__init__()
        if not 1 <= m <= dim:
            raise ValueError(f"m must be between 1 and dim={dim}")
        self.dim, self.m = dim, m
        self.v = nn.Parameter(torch.randn(reflections, dim, generator=generator))
        self.r1 = nn.Parameter(init_scale * torch.randn(m, m, generator=generator))
        self.r2 = nn.Parameter(init_scale * torch.randn(m, m, generator=generator))
        self.r1_diag = nn.Parameter(torch.full((m,), 0.1))
        self.r2_diag = nn.Parameter(torch.full((m,), 0.1))
        self.b = nn.Parameter(torch.zeros(m))

    def _reflect(self, x: torch.Tensor, order) -> torch.Tensor:
        unit = self.v / self.v.norm(dim=1, keepdim=True).clamp_min(1e-12)
        for i in order:
            x = x - 2 * (x @ unit[i])[:, None] * unit[i]
        return x

    def q(self, x: torch.Tensor) -> torch.Tensor:
        """Q x for x (N, M): H_1 ... H_K applied to (x, 0)."""
        padded = torch.nn.functional.pad(x, (0, self.dim - self.m))
        return self._reflect(padded, reversed(range(len(self.v))))

    def q_t(self, z: torch.Tensor) -> torch.Tensor:
        """Q^T z for z (N, D): the first M entries of H_K ... H_1 z."""
        return self._reflect(z, range(len(self.v)))[:, : self.m]

    def triangular(self) -> tuple[torch.Tensor, torch.Tensor]:
        upper = torch.triu(torch.ones(self.m, self.m, device=self.r1.device), diagonal=1)
        return (self.r1 * upper + torch.diag(torch.tanh(self.r1_diag)),
                self.r2 * upper + torch.diag(torch.tanh(self.r2_diag)))

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(f(z), log|det J_f(z)|) for a batch z of shape (N, D)."""
        r1, r2 = self.triangular()
        a = self.q_t(z) @ r2.T + self.b
        h = torch.tanh(a)
        out = z + self.q(h @ r1.T)
        diag = torch.diagonal(r1) * torch.diagonal(r2)
        log_det = torch.log1p((1 - h**2) * diag).sum(dim=1)
        return out, log_det
