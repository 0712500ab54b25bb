"""Planar flow layer (Rezende & Mohamed 2015) with the reparametrisation that makes it invertible.

    f(z) = z + u_hat * tanh(w^T z + b),    log|det J_f(z)| = log|1 + u_hat^T psi(z)|,
    psi(z) = (1 - tanh^2(w^T z + b)) w,
    u_hat = u + (m(w^T u) - w^T u) w / ||w||^2,   m(a) = -1 + softplus(a),

so that w^T u_hat = m(w^T u) > -1 and f is strictly increasing along w: invertible, with
1 + u_hat^T psi(z) > 0 everywhere. The inverse has no closed form; ``inverse`` solves the scalar
equation for a = w^T z by bisection.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["PlanarFlow"]


class PlanarFlow(nn.Module):
    def __init__(self, dim: int, init_scale: float = 0.01, generator: torch.Generator | None = None):
        super().__init__()
        self.u = nn.Parameter(init_scale * torch.randn(dim, generator=generator))
        self.w = nn.Parameter(init_scale * torch.randn(dim, generator=generator))
        self.b = nn.Parameter(torch.zeros(()))

    def u_hat(self) -> torch.Tensor:
        wu = self.w @ self.u
        return self.u + (-1 + F.softplus(wu) - wu) * self.w / (self.w @ self.w).clamp_min(1e-12)

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(f(z), log|det J_f(z)|) for a batch z of shape (N, D)."""
        u = self.u_hat()
        a = z @ self.w + self.b
        h = torch.tanh(a)
        log_det = torch.log1p((1 - h**2) * (self.w @ u))  # u_hat^T psi = (1 - tanh^2) w^T u_hat > -1
        return z + h[:, None] * u, log_det

    @torch.no_grad()
    def inverse(self, y: torch.Tensor, iterations: int = 100) -> torch.Tensor:
        """z with f(z) = y: solve w^T y = a + (w^T u_hat) tanh(a + b) for a = w^T z by bisection."""
        u = self.u_hat()
        wu, target = self.w @ u, y @ self.w
        lo = target - wu.abs() - 1.0
        hi = target + wu.abs() + 1.0
        for _ in range(iterations):  # g(a) = a + wu tanh(a + b) is increasing: 1 + wu (1 - tanh^2) > 0
            mid = (lo + hi) / 2
            above = mid + wu * torch.tanh(mid + self.b) > target
            hi, lo = torch.where(above, mid, hi), torch.where(above, lo, mid)
        a = (lo + hi) / 2
        return y - torch.tanh(a + self.b)[:, None] * u
