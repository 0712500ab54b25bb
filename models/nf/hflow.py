"""DP-HFlow: a normalizing flow for mixed (continuous and discrete) tables, trainable by DP-SGD.

References:
    Lee, Kim, Jeong, Ro (2022). Differentially Private Normalizing Flows for Synthetic Tabular Data Generation. AAAI.

The model of Lee et al. 2022. A row x = (x_cont, x_disc) has ``continuous`` values, already
scaled by the caller to about [-2, 2] from public bounds, and one integer code per discrete column
(0..k_j - 1). The density direction, data to base:

1. Dequantization (:mod:`privehr.models.nf.dequantization`): y_disc = 2h ((x_disc + u) / k - 1/2), u ~ U[0, 1)
   or u ~ q(u | x_disc) (a logistic-mixture-CDF conditional flow, Ho et al. 2019), h = 2; the
   continuous columns pass unchanged: y = (x_cont, y_disc) in R^D, D = continuous + d_c. Each
   discrete column is one dimension holding its code, as in the paper (y^(c) = x^(c) + u, no one-hot):
   D stays the number of columns whatever the levels (counts with hundreds of levels included), at
   the price that a nominal column's levels have the caller's arbitrary order and that a spline of
   ``bins`` bins per block resolves a column of many levels only coarsely.
2. ``blocks`` blocks j = 1..J (the paper's experiments: J = 3), each

       y <- S(y; theta^j),  theta^j = NN_nu(y, q(j))    autoregressive rational-quadratic spline
                                                        (Durkan et al. 2019, :mod:`privehr.models.nf.rq_spline`),
       y <- (diag(s_j) + A_j B_j) y + b_j              low-rank linear flow (:mod:`privehr.models.nf.low_rank_linear`),

   with the variable order reversed between blocks. NN_nu is ONE masked network shared by all
   blocks (:class:`~privehr.models.nf.conditional_made.ConditionalMADE`), told which block it serves by the
   one-hot q(j) fed to every layer (the paper's conditional spline flow): the spline parameters
   cost one MADE, not J. The splines act on [-B, B] (B = ``tail_bound`` = 4) with identity tails.
3. Base N(0, I_D):  log p(y) = log N(z; 0, I) + sum_j (log|det S_j'| + log|det W_j|).

The per-sample objective (``forward`` = ``log_prob``) is

    log p(x_cont, x_disc + u) - log q(u | x_disc)
        = log N(z) + sum_j log-dets + sum_disc log(2h / k_j) - log q(u | x_disc),

a draw of the ELBO (uniform: log q = 0) whose expectation is at most log p(x_cont, x_disc), a density
in the continuous columns and a probability in the discrete ones (Jensen). ``noise`` fixes the draw (the uniform u, or the variational posterior's base eps ~ N(0, I)),
else it comes from ``generator`` or torch's default generator. Sampling draws z ~ N(0, I), inverts
each block (Woodbury for the linear layer, D passes of the shared MADE per spline) and decodes the
discrete columns to floor(k (y / 2h + 1/2)), clamped to 0..k - 1; continuous columns come back in
the caller's scaled units.

DP-SGD: every parameter sits in a layer with a ghost-clipping rule (:mod:`privehr.models.dpsgd.ghost_clipping`):
the shared MADE's and the dequantizer's :class:`~privehr.models.nf.made.MaskedLinear` layers (the shared ones
used J times per sample: J x J Grams per group of mask rows), and :class:`~privehr.models.nf.low_rank_linear.LowRankLinear` (the
paper's eq. (4), with the log-det's own gradient). The top-level children are the "networks" of
the paper's per-layer clipping split (:mod:`privehr.models.dpsgd.fine_grained_clipping`): ``conditioner`` (the
spline MADE), ``linears`` (the J linear flows) and, with variational dequantization, ``dequantizer``.
No batch norm, no data-dependent initialisation: every block starts as the identity (zero MADE
output layer, B = 0) and the untrained flow is N(0, I) on y.

Not implemented from the paper: the LU linear flow (eq. (2)), the alternative to the low-rank one.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from privehr.models.nf.conditional_made import ConditionalMADE
from privehr.models.nf.dequantization import (UniformDequantizer, VariationalDequantizer, discrete_to_flow,
                                   flow_to_discrete)
from privehr.models.nf.low_rank_linear import LowRankLinear
from privehr.models.nf.rq_spline import rational_quadratic_spline, spline_parameter_count

__all__ = ["HFlow"]


class HFlow(nn.Module):
    """DP-HFlow over rows (x_cont (continuous), codes (len(cardinalities))); ``log_prob(x)`` is per sample.

    >>> flow = HFlow(2, [2, 3], blocks=2, hidden_size=8, bins=4)
    >>> x = torch.tensor([[0.5, -1.0, 1.0, 2.0], [0.0, 0.3, 0.0, 0.0]])
    >>> flow.log_prob(x).shape, flow.sample(5, torch.Generator().manual_seed(0)).shape
    (torch.Size([2]), torch.Size([5, 4]))
    """

    def __init__(self, continuous: int, cardinalities: list[int], blocks: int = 3, hidden_size: int = 64,
                 hidden_layers: int = 1, bins: int = 8, rank: int = 2, dequantization: str = "uniform",
                 tail_bound: float = 4.0, components: int = 4, dequantizer_hidden_size: int | None = None):
        super().__init__()
        if dequantization not in ("uniform", "variational"):
            raise ValueError(f"dequantization must be 'uniform' or 'variational', got {dequantization!r}")
        if any(int(k) < 1 for k in cardinalities):
            raise ValueError(f"every discrete column needs at least one level, got {cardinalities}")
        self.continuous, self.cardinalities = continuous, [int(k) for k in cardinalities]
        self.features = continuous + len(self.cardinalities)
        if self.features < 1:
            raise ValueError("HFlow needs at least one column")
        self.blocks, self.bins, self.tail_bound = blocks, bins, tail_bound
        self.dequantization = dequantization
        self.conditioner = ConditionalMADE(self.features, blocks, spline_parameter_count(bins), hidden_size,
                                           hidden_layers)
        self.linears = nn.ModuleList(LowRankLinear(self.features, rank) for _ in range(blocks))
        if dequantization == "variational" and self.cardinalities:
            self.dequantizer = VariationalDequantizer(self.cardinalities, dequantizer_hidden_size or hidden_size,
                                                      hidden_layers, components)
        else:
            self.dequantizer = UniformDequantizer(self.cardinalities)

    def forward(self, x: torch.Tensor, noise: torch.Tensor | None = None,
                generator: torch.Generator | None = None) -> torch.Tensor:
        """= :meth:`log_prob` (the per-sample objective DP-NF's trainer maximises)."""
        return self.log_prob(x, noise, generator)

    def _stage(self, j: int, like: torch.Tensor) -> torch.Tensor:
        """q(j): the one-hot code of block j, one row per sample."""
        return torch.eye(self.blocks, dtype=like.dtype, device=like.device)[j].expand(like.shape[0], -1)

    def _spline(self, y: torch.Tensor, j: int) -> tuple[torch.Tensor, torch.Tensor]:
        w, h, d = self.conditioner(y, self._stage(j, y)).split([self.bins, self.bins, self.bins - 1], -1)
        return rational_quadratic_spline(y, w, h, d, self.tail_bound)

    def transform(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(z, log|det dz/dy|): the J blocks on the dequantized, scaled rows y (n, D)."""
        log_det = y.new_zeros(y.shape[0])
        for j, linear in enumerate(self.linears):
            y, spline_log_det = self._spline(y, j)
            y, linear_log_det = linear.transform(y)
            log_det = log_det + spline_log_det.sum(-1) + linear_log_det
            if j < self.blocks - 1:
                y = y.flip(-1)
        return y, log_det

    def dequantize(self, x: torch.Tensor, noise: torch.Tensor | None = None,
                   generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(y (n, D), log|dy/d(x + u)| - log q(u | x) (n,)): the rows on the flow's scale, one dequantization draw."""
        cont, codes = x[:, :self.continuous], x[:, self.continuous:]
        if not self.cardinalities:
            return cont, x.new_zeros(x.shape[0])
        if noise is None:
            noise = self.dequantizer.draw(x.shape[0], generator, like=x)
        u, log_q = self.dequantizer(codes, noise)
        y_disc, log_det = discrete_to_flow(codes + u, self.cardinalities)
        return torch.cat([cont, y_disc], -1), log_det - log_q

    def log_prob(self, x: torch.Tensor, noise: torch.Tensor | None = None,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """Per-sample log p(x_cont, x_disc + u) - log q(u | x_disc) (n,): the log-density for a continuous-only flow.

        ``noise`` (n, d_c): the dequantizer's base draw, u ~ U[0, 1) (uniform) or eps ~ N(0, I) (variational), e.g.
        ``flow.dequantizer.draw(n, generator, like=x)``; if None it is drawn from ``generator`` (torch's default if
        None). Ignored without discrete columns."""
        y, log_det = self.dequantize(x, noise, generator)
        z, flow_log_det = self.transform(y)
        log_base = -0.5 * z.square().sum(-1) - 0.5 * self.features * math.log(2 * math.pi)
        return log_base + flow_log_det + log_det

    @torch.no_grad()
    def inverse(self, z: torch.Tensor) -> torch.Tensor:
        """y from z: each block inverted, last first (Woodbury, then the spline one dimension at a time)."""
        for j in reversed(range(self.blocks)):
            if j < self.blocks - 1:
                z = z.flip(-1)
            z = self.linears[j].inverse(z)
            y = torch.zeros_like(z)
            for d in range(self.features):  # theta_d depends on y_{<d} only: y_d is final after pass d
                params = self.conditioner(y, self._stage(j, y))[:, d]
                w, h, dv = params.split([self.bins, self.bins, self.bins - 1], -1)
                y_d, _ = rational_quadratic_spline(z[:, d], w, h, dv, self.tail_bound, inverse=True)
                y = torch.cat([y[:, :d], y_d[:, None], y[:, d + 1:]], -1)
            z = y
        return z

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """n rows (n, continuous + d_c): continuous columns in the scaled units, discrete ones as codes 0..k - 1."""
        reference = next(self.parameters())
        z = torch.randn(n, self.features, generator=generator, dtype=reference.dtype,
                        device=generator.device if generator is not None else reference.device).to(reference.device)
        y = self.inverse(z)
        if not self.cardinalities:
            return y
        return torch.cat([y[:, :self.continuous], flow_to_discrete(y[:, self.continuous:], self.cardinalities)], -1)
