"""DP-SGD (Abadi et al., CCS 2016) with Opacus: per-sample clipping, Gaussian noise, Poisson sampling.

Each step samples every training example independently with probability q, clips each per-sample
gradient g_i to norm C, and updates with

    g = (sum_i g_i * min(1, C / ||g_i||) + N(0, sigma^2 C^2 I)) / (q n)

(mean loss reduction over the *expected* batch size q n). sigma is calibrated before training so that
T = epochs * (1/q) steps are (epsilon, delta)-DP under both the PRV and RDP accountants
(:mod:`models.privacy_accounting`). Weight decay is decoupled (AdamW): it only reads the current
parameters, so it is post-processing and costs no privacy; a penalty added to the loss would never
reach Opacus's per-sample gradients. No early stopping on dev: the model after the accounted T
steps is released. The noise comes from a seeded torch generator (reproducible runs), not a
cryptographically secure one: Opacus's ``secure_mode`` needs torchcsprng, which is not installed. What the guarantee covers: the training examples given here. What it does not:
feature statistics fitted on the same private data, and any hyperparameter tuning on dev.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import models.grad_samplers  # noqa: F401  (registers Opacus rules for privehr's layers)
from models.losses import binary_loss
from models.privacy_accounting import PrivacySpend, calibrate_noise_multiplier, epsilon_spent

__all__ = ["DPSGDHyperparameters", "DPSGDResult", "train_dp_sgd", "poisson_schedule", "make_private_poisson"]


@dataclass(frozen=True)
class DPSGDHyperparameters:
    learning_rate: float = 1e-2
    weight_decay: float = 0.0
    batch_size: int = 128          # expected batch size q * n
    epochs: int = 10
    max_grad_norm: float = 1.0
    seed: int = 0


@dataclass
class DPSGDResult:
    privacy: PrivacySpend
    history: list[dict] = field(default_factory=list)


def poisson_schedule(n: int, batch_size: int, epochs: int) -> tuple[float, int]:
    """(q, T): Opacus samples with q = 1 / (batches per epoch) and takes that many steps per epoch."""
    batches = math.ceil(n / min(batch_size, n))
    return 1 / batches, epochs * batches


def make_private_poisson(model: nn.Module, optimizer: torch.optim.Optimizer, loader: DataLoader,
                         noise_multiplier: float, max_grad_norm: float, seed: int, grad_sample_mode: str = "hooks"):
    """Opacus's PrivacyEngine over ``loader`` with Poisson sampling and seeded generators.

    Returns (engine, private module, DP optimizer, Poisson loader). The noise generator (seed + 1)
    and the sampler's generator (seed + 2) are private to the run, so concurrent runs in one
    process stay reproducible instead of sharing torch's global RNG.
    """
    device = next(p for p in model.parameters() if p.requires_grad).device
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]ecure RNG.*")  # secure_mode needs torchcsprng
        engine = PrivacyEngine(accountant="prv")
        engine.secure_rng = torch.Generator().manual_seed(seed + 2)  # handed to the Poisson sampler
        private, optimizer, private_loader = engine.make_private(
            module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=noise_multiplier,
            max_grad_norm=max_grad_norm, poisson_sampling=True, grad_sample_mode=grad_sample_mode,
            noise_generator=torch.Generator(device=device).manual_seed(seed + 1))
    return engine, private, optimizer, private_loader


def train_dp_sgd(model: nn.Module, x_train: tuple[torch.Tensor, ...], y_train: torch.Tensor,
                 hp: DPSGDHyperparameters, target_epsilon: float, delta: float = 1e-5,
                 loss: str = "bce", grad_sample_mode: str = "hooks", progress=None) -> tuple[nn.Module, DPSGDResult]:
    """Train ``model`` privately; return the trained (unwrapped) module and the privacy spent.

    ``progress(done, total)``, if given, is called after every epoch.
    ``x_train`` are the model's positional inputs (batch first). The returned epsilon is computed
    from the steps actually taken; it never exceeds ``target_epsilon``.
    """
    x_train = x_train if isinstance(x_train, tuple) else (x_train,)
    n = len(y_train)
    device = y_train.device
    generator = torch.Generator().manual_seed(hp.seed)
    loader = DataLoader(TensorDataset(*[t.cpu() for t in x_train], y_train.cpu()),
                        batch_size=min(hp.batch_size, n), generator=generator)
    sample_rate, steps = poisson_schedule(n, hp.batch_size, hp.epochs)  # = 1 / len(loader), epochs * len(loader)
    calibrated = calibrate_noise_multiplier(target_epsilon, delta, sample_rate, steps)

    model.train()  # Opacus validates the module in training mode
    optimizer = torch.optim.AdamW(model.parameters(), lr=hp.learning_rate, weight_decay=hp.weight_decay)
    engine, private, optimizer, private_loader = make_private_poisson(
        model, optimizer, loader, calibrated.noise_multiplier, hp.max_grad_norm, hp.seed, grad_sample_mode)
    loss_fn = binary_loss(loss)
    history = []
    warnings.filterwarnings("ignore", message="Full backward hook is firing")  # inputs need no grad: harmless
    for epoch in range(1, hp.epochs + 1):
        private.train()
        total, seen, empty = 0.0, 0, 0
        for *inputs, target in private_loader:
            inputs = [t.to(device) for t in inputs]
            target = target.to(device)
            optimizer.zero_grad(set_to_none=True)
            out = private(*inputs)
            batch_loss = loss_fn(out, target) if len(target) else out.sum() * 0.0  # empty Poisson batch
            batch_loss.backward()
            optimizer.step()
            total += float(batch_loss.detach()) * len(target)
            seen += len(target)
            empty += len(target) == 0
        history.append({"epoch": epoch, "train_loss": total / max(seen, 1), "examples": seen, "empty_batches": empty})
        if progress is not None:
            progress(epoch, hp.epochs)
    sigma, q, taken = engine.accountant.history[0] if len(engine.accountant.history) == 1 else (
        calibrated.noise_multiplier, sample_rate, sum(h[2] for h in engine.accountant.history))
    spent = epsilon_spent(sigma, q, taken, delta, target_epsilon)
    return private._module, DPSGDResult(privacy=spent, history=history)
