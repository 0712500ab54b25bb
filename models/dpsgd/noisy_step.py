"""The two halves of a DP-SGD step that privehr's own clipping paths share (ghost clipping of the classifiers and
of DP-NF, DP-NF-VI's per-record gradients): a Poisson batch at the plan's rate, and the clipped sums turned into noised
mean gradients, (sum_i clip(g_i) + N(0, sigma^2 C^2 I)) / (q n), with the floating-point-safe noise of
:func:`privehr.models.privacy.randomness.gaussian_noise`; and the whole ghost-clipping step of DP-SGD and DP-NF (:func:`ghost_steps`).
Opacus does the same inside its optimizer for the other paths.
"""

from __future__ import annotations

import torch

from privehr.models.dpsgd.fine_grained_clipping import CLIPPING_MODES, fine_grained_clipped_sum
from privehr.models.dpsgd.ghost_clipping import clipped_gradient_sum
from privehr.models.privacy.randomness import NoiseSource, gaussian_noise
from privehr.models.privacy.release_plan import ReleasePlan

__all__ = ["poisson_indices", "poisson_batch", "clipped_sum", "set_noised_gradients", "ghost_steps"]


def poisson_indices(plan: ReleasePlan, sampler: torch.Generator, records: int) -> torch.Tensor:
    """Indices of ``records`` records, each kept with probability q (``sampler`` is a CPU generator; the batch may
    be empty). Opacus's Poisson sampler draws the same way: one uniform per record.

    ``records`` is the data's own length, which may differ from the plan's n: a plan is built from a released (DP)
    count, and Poisson sampling at rate q is DP at q whatever the number of records."""
    return (torch.rand(records, generator=sampler) < plan.sample_rate).nonzero().squeeze(1)


def poisson_batch(x: torch.Tensor, plan: ReleasePlan, sampler: torch.Generator) -> torch.Tensor:
    """The rows of ``x`` each kept with probability q (``sampler`` is a CPU generator; the batch may be empty)."""
    return x[poisson_indices(plan, sampler, len(x)).to(x.device)]


def clipped_sum(grads: dict[str, torch.Tensor], max_norm: float) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """sum_i g_i min(1, C / ||g_i||); a record whose gradient is not finite (a value outside the model's domain,
    exp overflowing at a noisy iterate) contributes zero, so no record can turn the noised sum into NaN."""
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in grads.values()))
    finite = torch.isfinite(norms)
    factor = torch.where(finite, (max_norm / (norms + 1e-6)).clamp(max=1.0), torch.zeros_like(norms))
    return {k: torch.einsum("b,b...->...", factor, torch.where(finite.view(-1, *[1] * (g.dim() - 1)), g,
                                                                 torch.zeros_like(g)))
            for k, g in grads.items()}, norms


def set_noised_gradients(sums: dict[torch.nn.Parameter, torch.Tensor], plan: ReleasePlan,
                         generator: torch.Generator) -> None:
    """``p.grad`` = (clipped sum + N(0, sigma^2 C^2)) / (q n) for every parameter p of ``sums``; n is the plan's (a
    released count where the plan was built from one): an exact count here would scale the weights by it."""
    std, expected = plan.noise_multiplier * plan.max_grad_norm, plan.sample_rate * plan.n
    for p, total in sums.items():
        p.grad = (total + gaussian_noise(total.shape, std, generator, total.device, total.dtype)) / expected


def ghost_steps(model: torch.nn.Module, losses_fn, data: tuple[torch.Tensor, ...], optimizer: torch.optim.Optimizer,
                plan: ReleasePlan, noise: NoiseSource, clipping: str = "flat", sparsity: float = 0.5):
    """DP-SGD steps by ghost clipping (:mod:`privehr.models.dpsgd.ghost_clipping`), endlessly: a Poisson batch of the rows of
    ``data`` (tensors of the plan's n rows), the clipped sum of the gradients of ``losses_fn(model, *batch)`` (one
    loss per row), N(0, sigma^2 C^2), one optimizer step; yields (mean loss, batch size) after each.

    ``clipping``: "flat" (one threshold C for the whole gradient) or a fine-grained mode of
    :mod:`privehr.models.dpsgd.fine_grained_clipping` ("per_layer", "per_unit", "sparsified" with ``sparsity``, its gammas from
    the release's "sparsify" stream); every mode bounds a sample's clipped gradient by C, so the noise and the
    accounting are the same."""
    if clipping not in CLIPPING_MODES:
        raise ValueError(f"unknown clipping mode {clipping!r}: one of {CLIPPING_MODES}")
    device = data[0].device
    sampler = noise.torch_generator("sampling")
    generator = noise.torch_generator("noise", device)
    sparsify = noise.torch_generator("sparsify", device) if clipping == "sparsified" else None
    while True:
        idx = poisson_indices(plan, sampler, len(data[0])).to(device)
        batch = tuple(t[idx] for t in data)
        if clipping == "flat":
            losses, _, sums = clipped_gradient_sum(model, losses_fn, batch, plan.max_grad_norm)
        else:
            losses, _, sums = fine_grained_clipped_sum(model, losses_fn, batch, plan.max_grad_norm, clipping,
                                                       sparsity, sparsify)
        set_noised_gradients(sums, plan, generator)
        optimizer.step()
        yield float(losses.mean()) if len(idx) else 0.0, len(idx)
