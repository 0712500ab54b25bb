"""DP-NF-VI: variational inference with a normalizing flow, made differentially private by DP-SGD over records.

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.

Algorithm 2 of Su et al. 2023.
The free-energy bound F = E_q[log q(theta) - log p(x, theta)] splits into per-record terms (their eq. 4),

    l_i(lambda) = 1/m sum_j { 1/n log q0(z_j) - log p(x_i | theta_j) - 1/n log p(theta_j) - 1/n log|dF/dz_j| },
    theta_j = F_lambda(z_j),  z_j ~ q0,

and each step clips every sampled record's gradient g_i = grad_lambda l_i to norm C, adds N(0, sigma^2 C^2 I) to
the sum and divides by the expected batch q n, exactly as :mod:`privehr.models.dpsgd.density` trains a density. sigma, q, T and C
come from the release's :class:`~privehr.models.privacy.release_plan.ReleasePlan` (mu-GDP budget, epsilon by PRV, RDP and PLD);
the Poisson sampling, the noise and the Monte Carlo draws z come from its :class:`~privehr.models.privacy.randomness.NoiseSource`.

**Exact per-record gradients, cheaply.** theta_j depends on lambda and z_j only, so with the Jacobian
J_j = d theta_j / d lambda (d x P, one ``torch.func.jacrev`` per draw, shared by every record) and the scores
s_ij = grad_theta log p(x_i | theta_j) (:meth:`privehr.models.inference.likelihood.Likelihood.score`),

    g_i = -tau/m sum_j J_j^T s_ij + 1/n grad_lambda 1/m sum_j [log q(theta_j) - log p(theta_j)],

one (b, m d) x (m d, P) product for the whole batch instead of b backward passes. The second term is the same for
every record. Tested equal to ``torch.func.vmap(torch.func.grad(l_i))``.

**The alternative loss** (``temperature`` tau < 1): the tempered free energy E_q[log q - tau log p(x | theta)
- log p(theta)], whose minimiser is the power posterior p(theta | x)^tau (Gaussian case: the posterior's
correlation with every variance divided by tau; under a flat prior p(theta | x)^tau, in general
p(x | theta)^tau p(theta)). The paper conjectures (Section 4.3) that DP noise inflates the
variational variance and the KL-optimal density at inflated variance has a distorted correlation; the tempered
loss asks for the inflation itself, with the true correlation, and its draws are shrunk back around their mean by
sqrt(tau) (post-processing: :func:`untemper`). ``temperature=1`` is the paper's loss.

The release is the flow's parameters after T steps; draws from it are post-processing. Not covered: anything
computed from the records before training, and the choice of hyperparameters if tuned on the same records. The
number of records n is treated as public (the pipeline and synthesis plan from noisy counts; DP-VI does not
yet): it weights the shared term of every l_i and sets the expected batch q n. ``plan=None`` is the non-private NF-VI (minibatches of records, the same loss).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn
from torch.func import functional_call, jacrev, vmap

from privehr.core.inference_config import VIConfig
from privehr.models.inference.likelihood import Likelihood
from privehr.models.dpsgd.noisy_step import clipped_sum, poisson_batch, set_noised_gradients
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import ReleasePlan
from privehr.models.dpsgd.step_history import run_steps

__all__ = ["VIHyperparameters", "VIRelease", "per_record_gradients", "train_vi", "untemper", "posterior_summary"]


@dataclass(frozen=True)
class VIHyperparameters:
    """The optimiser and the Monte Carlo; the defaults (those of Su et al. 2023) live in
    ``privehr.core.inference_config.VIConfig``."""

    learning_rate: float
    lr_decay: float                     # exponential, per step
    draws: int                          # m: Monte Carlo draws of theta per step
    steps: int                          # non-private steps (a DP release takes T from its plan)
    batch_size: int                     # non-private minibatch of records
    optimizer: Literal["adam", "rmsprop"] = VIConfig().optimizer
    temperature: float = 1.0            # tau: 1 is the free energy (Algorithm 2); < 1 the tempered loss
    seed: int = 0                       # non-private: minibatches and draws (public randomness)


@dataclass
class VIRelease:
    """What was released and what it cost (the plan's record), where its noise came from, and the loss curve."""

    mechanism: str                      # "dp_sgd" or "non_private"
    plan: dict | None
    noise_source: str = "none"
    history: list[dict] = field(default_factory=list)  # losses on private batches: patient-level statistics

    @property
    def epsilon(self) -> float | None:
        return None if self.plan is None else self.plan["epsilon"]


def _trainable(flow: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v for k, v in flow.named_parameters() if v.requires_grad}


def per_record_gradients(flow: nn.Module, likelihood: Likelihood, records: torch.Tensor, z: torch.Tensor, n: int,
                         temperature: float = 1.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(l_i for every record, {name: (b, *shape)} grad_lambda l_i): Algorithm 2's per-record losses and gradients."""
    params = {k: v.detach() for k, v in _trainable(flow).items()}
    m = len(z)

    def draw(p, z_j):
        return functional_call(flow, p, (z_j[None],))[0][0]

    jac = vmap(jacrev(draw), in_dims=(None, 0))(params, z)           # {name: (m, d, *shape)}

    def shared(p):
        theta, log_q = functional_call(flow, p, (z,))
        term = (log_q - likelihood.log_prior(theta)).mean() / n
        return term, (theta.detach(), term.detach())

    shared_grad, (theta, shared_term) = torch.func.grad(shared, has_aux=True)(params)
    with torch.no_grad():
        loglik = likelihood.log_likelihood(theta, records)              # (b, m)
    scores = likelihood.score(theta, records)                          # (b, m, d)
    losses = shared_term - temperature * loglik.mean(1)
    weights = scores.reshape(len(records), m * scores.shape[-1]) * (-temperature / m)    # (b, m d); b may be 0
    grads = {k: (weights @ j.reshape(m * j.shape[1], -1)).reshape(len(records), *j.shape[2:]) + shared_grad[k]
             for k, j in jac.items()}
    return losses, grads


def _optimizer(flow: nn.Module, hp: VIHyperparameters):
    params = list(_trainable(flow).values())
    optimizer = (torch.optim.Adam(params, lr=hp.learning_rate) if hp.optimizer == "adam"
                 else torch.optim.RMSprop(params, lr=hp.learning_rate))
    return optimizer, torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=hp.lr_decay)


def _dp_steps(flow, likelihood, records, hp, plan: ReleasePlan, noise: NoiseSource, optimizer, scheduler):
    device = records.device
    sampler = noise.torch_generator("sampling")
    draws = noise.torch_generator("draws", device)
    generator = noise.torch_generator("noise", device)
    named = _trainable(flow)
    while True:
        batch = poisson_batch(records, plan, sampler)
        z = torch.randn(hp.draws, flow.dim, generator=draws, device=device, dtype=records.dtype)
        losses, grads = per_record_gradients(flow, likelihood, batch, z, plan.n, hp.temperature)
        sums, _ = clipped_sum(grads, plan.max_grad_norm)
        set_noised_gradients({p: sums[k] for k, p in named.items()}, plan, generator)
        optimizer.step()
        scheduler.step()
        yield float(losses.mean()) if len(batch) else 0.0, len(batch)


def _plain_steps(flow, likelihood, records, hp, optimizer, scheduler):
    device, n = records.device, len(records)
    generator = torch.Generator(device=device).manual_seed(hp.seed)
    batch_size = min(hp.batch_size, n)
    while True:
        for idx in torch.randperm(n, generator=generator, device=device).split(batch_size):
            z = torch.randn(hp.draws, flow.dim, generator=generator, device=device, dtype=records.dtype)
            theta, log_q = flow(z)
            loss = ((log_q - likelihood.log_prior(theta)).mean() / n
                    - hp.temperature * likelihood.log_likelihood(theta, records[idx]).mean())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            yield float(loss.detach()), len(idx)


def train_vi(flow: nn.Module, likelihood: Likelihood, records: torch.Tensor, hp: VIHyperparameters,
             plan: ReleasePlan | None = None,
             noise: NoiseSource | None = None, log_every: int = 100, progress=None) -> VIRelease:
    """Fit ``flow`` (z -> (theta, log q)) to the posterior given ``records``, in place: DP-SGD by ``plan``, or not."""
    flow.train()
    optimizer, scheduler = _optimizer(flow, hp)
    if plan is None:
        total_steps, steps = hp.steps, _plain_steps(flow, likelihood, records, hp, optimizer, scheduler)
    else:
        if plan.n != len(records):
            raise ValueError(f"the plan is for {plan.n} records, the data has {len(records)}")
        noise = noise if noise is not None else NoiseSource.secret()
        total_steps = plan.steps
        steps = _dp_steps(flow, likelihood, records, hp, plan, noise, optimizer, scheduler)
    history = run_steps(steps, total_steps, log_every, progress, "loss")
    if plan is None:
        return VIRelease("non_private", None, "none", history)
    return VIRelease("dp_sgd", plan.record(), noise.kind, history)


def untemper(draws: torch.Tensor, temperature: float) -> torch.Tensor:
    """Draws of a tempered fit shrunk around their mean by sqrt(tau): the power posterior's correlation kept,
    its variances multiplied back by tau (exact for a Gaussian posterior). Post-processing of the release."""
    if temperature == 1.0:
        return draws
    mean = draws.mean(0, keepdim=True)
    return mean + (draws - mean) * temperature ** 0.5


def posterior_summary(draws: torch.Tensor, weights: torch.Tensor | None = None) -> dict:
    """Mean, SD and correlation matrix of (weighted) draws, as plain lists.

    >>> s = posterior_summary(torch.tensor([[0.0, 0.0], [2.0, 2.0]]))
    >>> s["mean"], s["correlation"][0][1]
    ([1.0, 1.0], 1.0)
    """
    x = draws.double()
    w = torch.full((len(x),), 1.0 / len(x), dtype=x.dtype) if weights is None else weights.double() / weights.sum()
    mean = (w[:, None] * x).sum(0)
    centred = x - mean
    cov = (w[:, None, None] * centred[:, :, None] * centred[:, None, :]).sum(0)
    sd = cov.diagonal().clamp(min=0).sqrt()
    corr = cov / (sd[:, None] * sd[None, :]).clamp(min=1e-300)
    return {"mean": mean.tolist(), "sd": sd.tolist(), "correlation": corr.tolist()}
