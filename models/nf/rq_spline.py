"""Monotone rational-quadratic splines with identity tails (Durkan, Bekasov, Murray, Papamakarios,
"Neural Spline Flows", NeurIPS 2019, arXiv:1906.04068), the elementwise transformation of DP-HFlow.

On [-B, B] a spline with K bins has knots (x^(k), y^(k)), k = 0..K, x^(0) = y^(0) = -B,
x^(K) = y^(K) = B, increasing in both coordinates, and positive derivatives delta^(k) at the knots.
In bin k, with w = x^(k+1) - x^(k), h = y^(k+1) - y^(k), Delta = h / w and xi = (x - x^(k)) / w,

    S(x) = y^(k) + h [Delta xi^2 + delta^(k) xi (1 - xi)] / [Delta + c2 xi (1 - xi)],
    c2 = delta^(k+1) + delta^(k) - 2 Delta,

    S'(x) = Delta^2 [delta^(k+1) xi^2 + 2 Delta xi (1 - xi) + delta^(k) (1 - xi)^2] / [Delta + c2 xi (1 - xi)]^2  > 0.

The inverse solves a quadratic in xi: with dy = y - y^(k),

    a = h (Delta - delta^(k)) + dy c2,   b = h delta^(k) - dy c2,   c = -Delta dy,
    xi = 2c / (-b - sqrt(b^2 - 4 a c))                      (the root in [0, 1], the stable form).

Outside [-B, B] the map is the identity with log-det 0; the boundary derivatives are fixed to 1 so S
is C^1 across +-B. Unconstrained network outputs become a spline as in Durkan et al.'s: widths and
heights by a softmax with a floor (``min_bin_width``, ``min_bin_height``), the K - 1 interior
derivatives by ``min_derivative + softplus(raw + shift)``, the shift chosen so that raw = 0 gives
derivative 1. All-zero raw parameters therefore give the identity map (equal bins, unit slopes):
a flow whose conditioner's last layer starts at zero starts as the identity, data-independently.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["rational_quadratic_spline", "spline_parameter_count"]


def spline_parameter_count(bins: int) -> int:
    """Raw parameters per dimension: K widths, K heights, K - 1 interior derivatives."""
    return 3 * bins - 1


def _knots(raw: torch.Tensor, bound: float, minimum: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(knot positions (..., K + 1) from -B to B exactly, bin sizes (..., K))."""
    bins = raw.shape[-1]
    sizes = minimum + (1 - minimum * bins) * torch.softmax(raw, -1)
    inner = 2 * bound * torch.cumsum(sizes, -1)[..., :-1] - bound
    edge = raw.new_full(raw.shape[:-1] + (1,), bound)
    knots = torch.cat([-edge, inner, edge], -1)
    return knots, knots[..., 1:] - knots[..., :-1]


def rational_quadratic_spline(x: torch.Tensor, raw_widths: torch.Tensor, raw_heights: torch.Tensor,
                              raw_derivatives: torch.Tensor, tail_bound: float = 4.0, inverse: bool = False,
                              min_bin_width: float = 1e-3, min_bin_height: float = 1e-3,
                              min_derivative: float = 1e-3) -> tuple[torch.Tensor, torch.Tensor]:
    """(S(x), log S'(x)) elementwise, or (S^{-1}(x), log |dS^{-1}/dx|) with ``inverse``.

    ``x`` (...), ``raw_widths`` and ``raw_heights`` (..., K), ``raw_derivatives`` (..., K - 1), unconstrained.

    >>> x = torch.linspace(-5, 5, 7)
    >>> y, log_det = rational_quadratic_spline(x, torch.zeros(7, 4), torch.zeros(7, 4), torch.zeros(7, 3))
    >>> bool(torch.allclose(y, x, atol=1e-6)), bool(torch.allclose(log_det, torch.zeros(7), atol=1e-6))
    (True, True)
    """
    bins = raw_widths.shape[-1]
    if min_bin_width * bins >= 1 or min_bin_height * bins >= 1:
        raise ValueError("the minimal bin sizes leave no room for K bins")
    bound = float(tail_bound)
    inside = (x >= -bound) & (x <= bound)
    xc = x.clamp(-bound, bound)  # the interior formulas only ever see finite, in-range inputs (no NaN gradients)
    x_knots, widths = _knots(raw_widths, bound, min_bin_width)
    y_knots, heights = _knots(raw_heights, bound, min_bin_height)
    shift = math.log(math.expm1(1 - min_derivative))
    interior = min_derivative + F.softplus(raw_derivatives + shift)
    one = interior.new_ones(interior.shape[:-1] + (1,))
    derivatives = torch.cat([one, interior, one], -1)

    edges = y_knots if inverse else x_knots
    idx = ((xc[..., None] >= edges[..., :-1]).sum(-1, keepdim=True) - 1).clamp(0, bins - 1)

    def take(t):
        return torch.gather(t, -1, idx).squeeze(-1)

    x_k, w, y_k, h = take(x_knots), take(widths), take(y_knots), take(heights)
    d_k, d_k1 = take(derivatives[..., :-1]), take(derivatives[..., 1:])
    slope = h / w
    c2 = d_k1 + d_k - 2 * slope
    if inverse:
        dy = xc - y_k
        a = h * (slope - d_k) + dy * c2
        b = h * d_k - dy * c2
        c = -slope * dy
        disc = (b.square() - 4 * a * c).clamp(min=0)
        xi = (2 * c / (-b - disc.sqrt())).clamp(0, 1)
        out = xi * w + x_k
    else:
        xi = (xc - x_k) / w
    one_minus = 1 - xi
    denominator = slope + c2 * xi * one_minus
    if not inverse:
        out = y_k + h * (slope * xi.square() + d_k * xi * one_minus) / denominator
    derivative = slope.square() * (d_k1 * xi.square() + 2 * slope * xi * one_minus + d_k * one_minus.square())
    log_det = torch.log(derivative) - 2 * torch.log(denominator)
    if inverse:
        log_det = -log_det
    return torch.where(inside, out, x), torch.where(inside, log_det, torch.zeros_like(log_det))
