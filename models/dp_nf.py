"""DP-NF: density estimation by a normalizing flow trained with DP-SGD (seed 001 Alg. 1, seed 002 Alg. 1).

Minimises the mean negative log-likelihood -1/b sum_i log p_theta(x_i) over Poisson batches (rate
q) by DP-SGD: each per-sample gradient clipped to norm C, Gaussian noise N(0, sigma^2 C^2 I) added to
the sum, divided by the expected batch q n. Per-sample clipping by ghost clipping of the masked layers
(:mod:`models.masked_clipping`, the default) or by Opacus (hooks with privehr's masked-linear rule, or
its functorch fallback); Poisson sampling either way. After exactly T steps the
flow is released; it is (epsilon, delta)-DP for the records in ``x`` with epsilon from the PRV
accountant (RDP alongside) and, for comparison with the papers, mu-GDP with
mu = q sqrt(T (exp(1/sigma^2) - 1)) (:mod:`models.gaussian_dp`). Synthetic data sampled from the
flow are post-processing: they cost nothing more.

Not covered: anything computed from the private records before training (imputation, scaling
statistics, dropping columns by missingness) and any tuning of hyperparameters on them.
``noise_multiplier=None`` trains without privacy (the mu = infinity column of seed 002).
"""

from __future__ import annotations

import math
import secrets
import warnings
from dataclasses import asdict, dataclass, field, replace

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import models.grad_samplers  # noqa: F401  (registers the MaskedLinear rule for the Opacus paths)
from models.dp_sgd import make_private_poisson
from models.gaussian_dp import gdp_epsilon, gdp_mu, sigma_for_mu
from models.masked_clipping import clipped_gradient_sum
from models.privacy_accounting import calibrate_noise_multiplier, epsilon_spent

__all__ = ["DensityHyperparameters", "DensityRelease", "train_density", "mean_log_likelihood", "poisson_batch",
           "noise_for_budget"]


@dataclass(frozen=True)
class DensityHyperparameters:
    learning_rate: float = 1e-3
    batch_size: int = 32            # expected batch q * n (q = 1 / ceil(n / batch_size), Opacus)
    steps: int = 1000               # T
    max_grad_norm: float = 1.0      # C
    seed: int = 0


@dataclass
class DensityRelease:
    """What was released and what it cost: mechanism, sigma, q, T, delta, epsilon (PRV, RDP, GDP), mu."""

    mechanism: str                  # "dp_sgd" or "non_private"
    noise_multiplier: float | None
    sample_rate: float
    steps: int
    max_grad_norm: float | None
    delta: float | None
    epsilon_prv: float | None
    epsilon_rdp: float | None
    mu: float | None
    epsilon_gdp: float | None
    noise_source: str = "none"      # "os_entropy" (secret), "seeded" (reproducible: the seed must stay secret)
    history: list[dict] = field(default_factory=list)

    @property
    def epsilon(self) -> float:
        if self.mechanism == "non_private":
            return float("inf")
        return self.epsilon_prv if self.epsilon_prv is not None else self.epsilon_rdp

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "history"} | {"epsilon": self.epsilon}


def poisson_batch(n: int, sample_rate: float) -> tuple[int, float]:
    """(expected batch, effective q) for a requested rate: batches of ceil(q n), q_eff = 1 / ceil(n / batch)."""
    batch = max(1, math.ceil(sample_rate * n))
    return batch, 1 / math.ceil(n / batch)


def noise_for_budget(kind: str, value: float | None, sample_rate: float, steps: int, delta: float) -> float | None:
    """sigma for a budget: mu-GDP (closed form), an (epsilon, delta) target (PRV and RDP calibration) or none."""
    if kind == "mu":
        return sigma_for_mu(value, sample_rate, steps)
    if kind == "epsilon":
        return calibrate_noise_multiplier(value, delta, sample_rate, steps).noise_multiplier
    if kind == "non_private":
        return None
    raise ValueError(f"unknown budget kind {kind!r}")


def _nll(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return -model(x)


def _plain_steps(flow, x, hp, optimizer):
    """Non-private: shuffled minibatches of the expected size, epoch after epoch."""
    generator = torch.Generator().manual_seed(hp.seed)
    while True:
        for idx in torch.randperm(len(x), generator=generator).to(x.device).split(hp.batch_size):
            optimizer.zero_grad(set_to_none=True)
            loss = _nll(flow, x[idx]).mean()
            loss.backward()
            optimizer.step()
            yield float(loss.detach()), len(idx)


def _masked_steps(flow, x, hp, optimizer, sample_rate: float, noise_multiplier: float, noise_seed: int):
    """DP-SGD by ghost clipping (:mod:`models.masked_clipping`): Poisson batches, clipped sum, N(0, sigma^2 C^2)."""
    sampler = torch.Generator().manual_seed(noise_seed + 1)
    noise = torch.Generator(device=x.device).manual_seed(noise_seed)
    expected = sample_rate * len(x)
    while True:
        xb = x[(torch.rand(len(x), generator=sampler) < sample_rate).to(x.device)]
        losses, _, sums = clipped_gradient_sum(flow, _nll, xb, hp.max_grad_norm)
        for p, total in sums.items():
            z = torch.randn(total.shape, generator=noise, device=total.device, dtype=total.dtype)
            p.grad = (total + noise_multiplier * hp.max_grad_norm * z) / expected
        optimizer.step()
        yield float(losses.mean()) if len(xb) else 0.0, len(xb)


def _opacus_steps(flow, x, hp, optimizer, noise_multiplier: float, mode: str, noise_seed: int):
    """DP-SGD by Opacus's PrivacyEngine (per-sample gradients by hooks or functorch)."""
    loader = DataLoader(TensorDataset(x.cpu()), batch_size=hp.batch_size)
    _, model, optimizer, loader = make_private_poisson(flow, optimizer, loader, noise_multiplier, hp.max_grad_norm,
                                                       noise_seed - 1, mode)
    warnings.filterwarnings("ignore", message="Full backward hook is firing")  # inputs need no grad: harmless
    while True:
        for (xb,) in loader:
            xb = xb.to(x.device)
            optimizer.zero_grad(set_to_none=True)
            log_p = model(xb)
            loss = -log_p.mean() if len(xb) else log_p.sum() * 0.0  # an empty Poisson batch still steps (noise)
            loss.backward()
            optimizer.step()
            yield float(loss.detach()), len(xb)


def train_density(flow: nn.Module, x: torch.Tensor, hp: DensityHyperparameters = DensityHyperparameters(),
                  noise_multiplier: float | None = None, delta: float = 1e-5,
                  grad_sample_mode: str = "masked", log_every: int = 100, progress=None,
                  noise_seed: int | None = None) -> DensityRelease:
    """Fit ``flow`` (with ``log_prob``) to the rows of ``x`` in place; DP-SGD unless noise_multiplier is None.

    ``grad_sample_mode``: "masked" (ghost clipping; every trainable parameter must sit in a masked
    linear layer) or an Opacus mode, "hooks" or "functorch". All three clip, noise and sample alike.
    ``progress(done, total)``, if given, is called every ``log_every`` steps. The noise and the Poisson
    sampling draw from generators seeded by OS entropy unless ``noise_seed`` is given (reproducible
    runs; the guarantee then rests on that seed staying secret, so it is never recorded).
    """
    n = len(x)
    hp = replace(hp, batch_size=min(hp.batch_size, n))
    sample_rate = 1 / math.ceil(n / hp.batch_size)  # Opacus's q for this batch size, used by every path
    flow.train()
    optimizer = torch.optim.Adam([p for p in flow.parameters() if p.requires_grad], lr=hp.learning_rate)
    source = "seeded" if noise_seed is not None else "os_entropy"
    noise_seed = noise_seed if noise_seed is not None else secrets.randbits(62)
    if noise_multiplier is None:
        steps = _plain_steps(flow, x, hp, optimizer)
    elif grad_sample_mode == "masked":
        steps = _masked_steps(flow, x, hp, optimizer, sample_rate, noise_multiplier, noise_seed)
    else:
        steps = _opacus_steps(flow, x, hp, optimizer, noise_multiplier, grad_sample_mode, noise_seed)
    history, total, seen = [], 0.0, 0
    for step, (loss, size) in zip(range(1, hp.steps + 1), steps):
        total, seen = total + loss * size, seen + size
        if step % log_every == 0 or step == hp.steps:
            history.append({"step": step, "train_nll": total / max(seen, 1)})
            total, seen = 0.0, 0
            if progress is not None:
                progress(step, hp.steps)
    if noise_multiplier is None:
        return DensityRelease("non_private", None, sample_rate, hp.steps, None, None, None, None, None, None,
                              "none", history)
    spent = epsilon_spent(noise_multiplier, sample_rate, hp.steps, delta)
    mu = gdp_mu(noise_multiplier, sample_rate, hp.steps)
    return DensityRelease("dp_sgd", noise_multiplier, sample_rate, hp.steps, hp.max_grad_norm, delta,
                          spent.epsilon_prv, spent.epsilon_rdp, mu, gdp_epsilon(mu, delta), source, history)


@torch.no_grad()
def mean_log_likelihood(flow: nn.Module, x: torch.Tensor, batch_size: int = 8192) -> float:
    """Average log p(x) over the rows of ``x`` (seed 001 Table 1's test log-likelihood)."""
    flow.eval()
    device = next(flow.parameters()).device
    total = sum(float(flow.log_prob(x[i:i + batch_size].to(device)).sum()) for i in range(0, len(x), batch_size))
    return total / len(x)
