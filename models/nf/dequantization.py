"""Dequantization of DP-HFlow's discrete columns: uniform, and variational by a conditional flow.

Lee, Kim, Jeong, Ro, "Differentially Private Normalizing Flows for Synthetic Tabular Data
Generation", AAAI 2022, section "Variational Dequantization"; Theis, van den Oord, Bethge, "A note
on the evaluation of generative models", ICLR 2016 (uniform); Ho, Chen, Srinivas, Duan, Abbeel,
"Flow++: Improving Flow-Based Generative Models with Variational Dequantization and Architecture
Design", ICML 2019, arXiv:1902.00275 (variational, logistic-mixture CDF).

A discrete column j with k_j levels holds an integer code x_j in 0..k_j - 1 (binary, nominal,
ordinal, counts alike: one dimension per column, the code itself, as the paper's y^(c) = x^(c) + u;
no one-hot). Its dequantized value x_j + u_j, u_j in [0, 1), is then put on the scale of the
continuous columns by the fixed affine map

    y_j = 2 h ((x_j + u_j) / k_j - 1/2)  in [-h, h),  h = 2,      log|dy_j/d(x_j + u_j)| = log(2 h / k_j),

so every level gets an interval of width 2h / k_j inside the spline's range [-B, B] (B = 4 > h) and
the column, whatever k_j, lives where the continuous columns (scaled to about [-2, 2]) do. A logit
instead would send codes 0 and k_j - 1 towards +-infinity, into the splines' identity tails. The map
depends only on k_j (the schema), not on the data. For any density p_Y of y, P(x) >= E_q[p(x + u) /
q(u | x)] with p(x + u) = p_Y(y) prod_j 2h / k_j (Jensen; equality in the uniform case up to the
mass p_Y puts outside [-h, h)^{d_c}, which only lowers P). A sampled y decodes to
floor(k_j (y_j / 2h + 1/2)), clamped to 0..k_j - 1.

* :class:`UniformDequantizer`: u ~ U[0, 1)^{d_c}, log q = 0: log p(x + u) is an unbiased draw of a
  lower bound on log P(x) (Theis et al.).
* :class:`VariationalDequantizer`: u ~ q(u | x), a conditional flow from eps ~ N(0, I_{d_c}):

      (pi_j, mu_j, s_j) = NN(eps_{<j}, f(x)),        u_j = F(eps_j) = sum_m pi_jm sigmoid((eps_j - mu_jm) exp(-s_jm)),

  F the CDF of a mixture of M logistic distributions, which maps R onto (0, 1), so no final sigmoid
  is needed; log q(u | x) = sum_j [log N(eps_j) - log F'(eps_j)], and the objective is the ELBO
  log p(x + u) - log q(u | x) at one reparameterised draw. NN is one
  :class:`~privehr.models.nf.conditional_made.ConditionalMADE` over eps with the codes as context
  (f_j(x) = 2 (x_j + 1/2) / k_j - 1): the paper's r = NN_phi(x^(c)) and NN_psi([eps_1, r]) merged into
  one masked network, and its two-part coupling (eps_1 passed through, eps_2 transformed) generalised
  to an autoregressive transform, each eps_j conditioned on eps_{<j} and x. That keeps the paper's
  mixture-CDF transformation and works for any d_c >= 1 (the paper's split needs 0 < r < d_c, i.e.
  two discrete columns or more). The log-scales are softly bounded, s = -log(1.7) + 3 tanh(raw / 3),
  so a noisy DP step cannot make them degenerate; the offset makes the untrained posterior
  u = sigmoid(1.7 eps) ~ Phi(eps), about uniform: variational dequantization starts close to the
  uniform one. Its MaskedLinear layers have a ghost-clipping rule, so it trains by DP-SGD with the flow.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from privehr.models.nf.conditional_made import ConditionalMADE

__all__ = ["DISCRETE_HALF_WIDTH", "discrete_to_flow", "flow_to_discrete", "UniformDequantizer",
           "VariationalDequantizer", "logistic_mixture_cdf"]

DISCRETE_HALF_WIDTH = 2.0  # h: discrete columns are mapped into [-h, h), the continuous columns' scaled range

_LOG_SCALE_OFFSET = -math.log(1.7)  # sigmoid(1.7 eps) ~ Phi(eps): the untrained posterior is about uniform
_LOG_SCALE_BOUND = 3.0


def _levels(cardinalities, like: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(cardinalities, dtype=like.dtype, device=like.device)


def discrete_to_flow(dequantized: torch.Tensor, cardinalities: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, log|det|): x + u (n, d_c) to the flow's scale, y = 2h ((x + u) / k - 1/2); the log-det is a constant (n,)."""
    k = _levels(cardinalities, dequantized)
    y = 2 * DISCRETE_HALF_WIDTH * (dequantized / k - 0.5)
    log_det = torch.log(2 * DISCRETE_HALF_WIDTH / k).sum()
    return y, log_det.expand(dequantized.shape[0])


def flow_to_discrete(y: torch.Tensor, cardinalities: list[int]) -> torch.Tensor:
    """Codes floor(k (y / 2h + 1/2)) clamped to 0..k - 1 (as floats), the inverse of :func:`discrete_to_flow`."""
    k = _levels(cardinalities, y)
    codes = torch.floor(k * (y / (2 * DISCRETE_HALF_WIDTH) + 0.5))
    return torch.minimum(codes.clamp(min=0), k - 1)


def logistic_mixture_cdf(eps: torch.Tensor, logits: torch.Tensor, means: torch.Tensor,
                         log_scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(F(eps), log F'(eps)) for F = sum_m pi_m sigmoid((eps - mu_m) exp(-s_m)), pi = softmax(logits); the mixture
    parameters (..., M), ``eps`` (...)."""
    z = (eps[..., None] - means) * torch.exp(-log_scales)
    log_pi = torch.log_softmax(logits, -1)
    cdf = (log_pi.exp() * torch.sigmoid(z)).sum(-1)
    log_pdf = torch.logsumexp(log_pi - F.softplus(-z) - F.softplus(z) - log_scales, -1)
    return cdf, log_pdf


class UniformDequantizer(nn.Module):
    """u ~ U[0, 1)^{d_c}; log q(u | x) = 0. No parameters."""

    def __init__(self, cardinalities: list[int]):
        super().__init__()
        self.cardinalities = list(cardinalities)

    def draw(self, n: int, generator: torch.Generator | None = None, like: torch.Tensor | None = None) -> torch.Tensor:
        """The base draw the ``noise`` argument stands for: u, (n, d_c) uniform in [0, 1)."""
        return _draw(torch.rand, n, len(self.cardinalities), generator, like)

    def forward(self, codes: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(u, log q(u | x)) for the codes (n, d_c) and the base draw."""
        return noise.to(codes.dtype), codes.new_zeros(codes.shape[0])


class VariationalDequantizer(nn.Module):
    """u = F(eps; NN(eps_{<j}, f(x))) with eps ~ N(0, I) (module doc); returns (u, log q(u | x))."""

    def __init__(self, cardinalities: list[int], hidden_size: int = 32, hidden_layers: int = 1, components: int = 4):
        super().__init__()
        self.cardinalities, self.components = list(cardinalities), components
        d = len(self.cardinalities)
        self.conditioner = ConditionalMADE(d, d, 3 * components, hidden_size, hidden_layers)

    def draw(self, n: int, generator: torch.Generator | None = None, like: torch.Tensor | None = None) -> torch.Tensor:
        """The base draw the ``noise`` argument stands for: eps, (n, d_c) standard normal."""
        return _draw(torch.randn, n, len(self.cardinalities), generator, like)

    def forward(self, codes: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        eps = noise.to(codes.dtype)
        k = _levels(self.cardinalities, codes)
        context = 2 * (codes + 0.5) / k - 1
        logits, means, raw = self.conditioner(eps, context).split(self.components, -1)
        log_scales = _LOG_SCALE_OFFSET + _LOG_SCALE_BOUND * torch.tanh(raw / _LOG_SCALE_BOUND)
        u, log_pdf = logistic_mixture_cdf(eps, logits, means, log_scales)
        log_base = -0.5 * eps.square() - 0.5 * math.log(2 * math.pi)
        return u, (log_base - log_pdf).sum(-1)


def _draw(sampler, n: int, d: int, generator: torch.Generator | None, like: torch.Tensor | None) -> torch.Tensor:
    dtype = like.dtype if like is not None else torch.get_default_dtype()
    device = generator.device if generator is not None else (like.device if like is not None else None)
    out = sampler(n, d, generator=generator, dtype=dtype, device=device)
    return out if like is None else out.to(like.device)
