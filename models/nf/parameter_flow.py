"""A normalizing flow over a classifier's flat parameter vector theta in R^D.

References:
    Bridges, Tombs, Stanley (2023). Are Normalizing Flows the Key to Unlocking the Exponential Mechanism?
    arXiv:2311.09200.

    z ~ N(0, sigma^2 I_D),   theta = T_L o ... o T_1 o A (z),
    log q(theta) = log N(z; 0, sigma^2 I) - sum_l log|det J_{T_l}| - log|det J_A|,

with planar or Householder Sylvester layers T_l; sigma (the base scale) is a hyperparameter. A is an
optional elementwise affine layer A(z) = mu + exp(s) * z (log|det J_A| = sum s): planar and Sylvester
layers only move mass inside a subspace of dimension <= layers x M, so without A the flow is the
base Gaussian around 0 in every other direction of a 7,000-dimensional theta (the flows of Bridges et al. 2023).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from privehr.models.nf.planar import PlanarFlow
from privehr.models.nf.sylvester import SylvesterFlow

__all__ = ["ParameterFlow"]


class ParameterFlow(nn.Module):
    def __init__(self, dim: int, layers: int = 4, kind: Literal["planar", "sylvester"] = "sylvester",
                 base_sigma: float = 0.01, m: int = 4, reflections: int = 4, affine: bool = True,
                 seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)  # private: initial weights depend on the seed alone
        self.shift = nn.Parameter(torch.zeros(dim)) if affine else None
        self.log_scale = nn.Parameter(torch.zeros(dim)) if affine else None
        if kind == "planar":
            self.layers = nn.ModuleList(PlanarFlow(dim, generator=g) for _ in range(layers))
        elif kind == "sylvester":
            self.layers = nn.ModuleList(SylvesterFlow(dim, min(m, dim), reflections, generator=g)
                                        for _ in range(layers))
        else:
            raise ValueError(f"unknown flow kind {kind!r}; choose planar or sylvester")
        self.dim, self.base_sigma = dim, float(base_sigma)

    def base_log_prob(self, z: torch.Tensor) -> torch.Tensor:
        s = self.base_sigma
        return -0.5 * (z / s).pow(2).sum(1) - self.dim * (math.log(s) + 0.5 * math.log(2 * math.pi))

    def push(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(theta, log q(theta)) for base draws z (N, D)."""
        log_q = self.base_log_prob(z)
        if self.shift is not None:
            z = self.shift + torch.exp(self.log_scale) * z
            log_q = log_q - self.log_scale.sum()
        for layer in self.layers:
            z, log_det = layer(z)
            log_q = log_q - log_det
        return z, log_q
