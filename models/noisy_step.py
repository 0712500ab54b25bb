"""The two halves of a DP-SGD step that privehr's own clipping paths share (DP-NF's ghost clipping, DP-NF-VI's
per-record gradients): a Poisson batch at the plan's rate, and the clipped sums turned into noised mean gradients,
(sum_i clip(g_i) + N(0, sigma^2 C^2 I)) / (q n), with the floating-point-safe noise of
:func:`models.randomness.gaussian_noise`. Opacus does the same inside its optimizer for the other paths.
"""

from __future__ import annotations

import torch

from models.randomness import gaussian_noise
from models.release_plan import ReleasePlan

__all__ = ["poisson_batch", "set_noised_gradients"]


def poisson_batch(x: torch.Tensor, plan: ReleasePlan, sampler: torch.Generator) -> torch.Tensor:
    """The rows of ``x`` each kept with probability q (``sampler`` is a CPU generator; the batch may be empty)."""
    return x[(torch.rand(len(x), generator=sampler) < plan.sample_rate).to(x.device)]


def set_noised_gradients(sums: dict[torch.nn.Parameter, torch.Tensor], plan: ReleasePlan,
                         generator: torch.Generator) -> None:
    """``p.grad`` = (clipped sum + N(0, sigma^2 C^2)) / (q n) for every parameter p of ``sums``."""
    std, expected = plan.noise_multiplier * plan.max_grad_norm, plan.sample_rate * plan.n
    for p, total in sums.items():
        p.grad = (total + gaussian_noise(total.shape, std, generator, total.device, total.dtype)) / expected
