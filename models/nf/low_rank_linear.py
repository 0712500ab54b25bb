"""The low-rank linear flow layer of DP-HFlow and its fast per-sample gradients (ghost-clipping rule).

Lee, Kim, Jeong, Ro, "Differentially Private Normalizing Flows for Synthetic Tabular Data
Generation", AAAI 2022, eq. (1), after Lu and Huang, "Woodbury Transformations for Deep Generative
Flows", NeurIPS 2020 (arXiv:2002.12229):

    z = W x + b,    W = diag(s) + A B,    A in R^{D x r}, B in R^{r x D}, r small.

* s = exp(log_s) is positive by construction (the parameter is log_s), so diag(s) is never singular
  and a noisy DP update cannot flip its sign. The rank-r correction is not constrained: W is
  singular where det(I_r + B diag(s)^{-1} A) = 0, where the log-likelihood goes to -infinity, so
  training is pushed away from it, but nothing forbids a (noisy) step from landing there.
* log|det W| = sum_j log s_j + log|det(I_r + B diag(s)^{-1} A)|   (matrix determinant lemma: an
  r x r determinant instead of a D x D one).
* W^{-1} = S^{-1} - S^{-1} A (I_r + B S^{-1} A)^{-1} B S^{-1}, S = diag(s)   (Woodbury: sampling).
* Start: log_s = 0, B = 0, A small and random, b = 0: the identity map, data-independently (B = 0
  with A != 0, as in LoRA, so that dL/dB = A^T G x^T is not zero at the start).

The layer's log-det depends on its parameters, and the per-sample loss uses it, so the parameter
gradient of sample i is not only the paper's eq. (4) but

    dl_i/dW = G_i x_i^T + c_i W^{-T},      G_i = dl_i/dz_i,   c_i = dl_i/d(log|det W|) (-1 for an NLL),

giving dl_i/dA = G_i (B x_i)^T + c_i d(log|det W|)/dA, dl_i/dB = A^T G_i x_i^T + c_i d(log|det W|)/dB,
dl_i/dlog_s = s * (G_i . x_i) + c_i d(log|det W|)/dlog_s and dl_i/db = G_i (eq. (4) plus a term that is
the same for every sample up to c_i). For ghost clipping (:mod:`privehr.models.dpsgd.rules.low_rank_linear`: a layer's
forward hook keeps its input, one backward gives dl/d(output)) both G_i and c_i must be outputs of
the layer, so :meth:`LowRankLinear.forward` returns [z, log|det W|] as one (..., D + 1) tensor, the
log-det repeated per row; :meth:`LowRankLinear.transform` splits it. The rule
(``LowRankLinearRule``) recomputes B x_i from the kept input (the paper's stored intermediate),
takes the parameter-only gradient of log|det W| by one small autograd call, and materialises the
per-sample gradients: D (2r + 2) numbers per sample and per call, cheap for any table width (the paper
extends Lee and Kifer, "Scaling up Differentially Private Deep Learning with Fast Per-Example
Gradient Clipping", PoPETs 2021, to this layer the same way). A layer
used K times per sample (K tokens) sums the K terms. Tested equal to torch.func in tests/models.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["LowRankLinear"]


class LowRankLinear(nn.Module):
    """x (..., D) -> [W x + b, log|det W|] (..., D + 1), W = diag(exp(log_scale)) + left @ right.

    ``left`` is the paper's A (D x r), ``right`` its B (r x D).

    >>> layer = LowRankLinear(4, rank=2)
    >>> z, log_det = layer.transform(torch.randn(3, 4))
    >>> z.shape, log_det.shape
    (torch.Size([3, 4]), torch.Size([3]))
    """

    def __init__(self, features: int, rank: int = 2, init_scale: float | None = None):
        super().__init__()
        self.features, self.rank = features, rank
        scale = 1 / math.sqrt(features) if init_scale is None else init_scale
        self.log_scale = nn.Parameter(torch.zeros(features))
        self.left = nn.Parameter(torch.randn(features, rank) * scale)
        self.right = nn.Parameter(torch.zeros(rank, features))
        self.bias = nn.Parameter(torch.zeros(features))

    def weight(self) -> torch.Tensor:
        """W = diag(s) + A B (D x D)."""
        return torch.diag(self.log_scale.exp()) + self.left @ self.right

    def _capacitance(self) -> torch.Tensor:
        """I_r + B diag(s)^{-1} A (r x r)."""
        eye = torch.eye(self.rank, dtype=self.left.dtype, device=self.left.device)
        return eye + (self.right * torch.exp(-self.log_scale)) @ self.left

    def log_abs_det(self) -> torch.Tensor:
        """log|det W| = sum log s + log|det(I_r + B S^{-1} A)| (a scalar)."""
        return self.log_scale.sum() + torch.linalg.slogdet(self._capacitance()).logabsdet

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x * self.log_scale.exp() + (x @ self.right.T) @ self.left.T + self.bias
        log_det = self.log_abs_det().expand(*z.shape[:-1], 1)
        return torch.cat([z, log_det], -1)

    def transform(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(z, log|det dz/dx|) with the log-det per row."""
        out = self(x)
        return out[..., :-1], out[..., -1]

    def inverse(self, z: torch.Tensor) -> torch.Tensor:
        """x = W^{-1} (z - b) by Woodbury: S^{-1} v - S^{-1} A (I_r + B S^{-1} A)^{-1} B S^{-1} v."""
        v = (z - self.bias) * torch.exp(-self.log_scale)
        correction = torch.linalg.solve(self._capacitance(), (v @ self.right.T).T).T @ self.left.T
        return v - correction * torch.exp(-self.log_scale)
