"""DP-SGD (Abadi et al., "Deep Learning with Differential Privacy", CCS 2016).

Each of the plan's T steps samples every training example independently with probability q,
clips each per-sample gradient g_i to norm C, and updates with

    g = (sum_i g_i * min(1, C / ||g_i||) + N(0, sigma^2 C^2 I)) / (q n)

(mean loss reduction over the *expected* batch size q n). sigma, q and T come from the release's
:class:`~privehr.models.privacy.release_plan.ReleasePlan`, calibrated before training so that the T steps are
(epsilon, delta)-DP under PRV and RDP (PLD alongside); the trainer takes exactly T steps.

Per-sample clipping, ``grad_sample_mode``:

* ``"ghost"`` (the default): :mod:`privehr.models.dpsgd.ghost_clipping` computes the norms of the g_i from each
  layer's inputs and output gradients and the clipped sum by one GEMM per layer, never materialising
  a g_i of a layer whose Grams are smaller; the Poisson batch and the noise are drawn here
  (:mod:`privehr.models.dpsgd.noisy_step`). GRU-D's recurrent weights are used at every hour: their norms come from
  24 x 24 Grams per sample.
* ``"hooks"`` / ``"functorch"``: Opacus's PrivacyEngine (per-sample gradients by its hooks, with
  privehr's rules of :mod:`privehr.models.dpsgd.rules`, or by vmap). The trainer checks that Opacus's sampler
  drew at rate q and that its optimizer noised exactly T steps at sigma. (Opacus alone would take
  int(1/q) steps an epoch, one fewer than ceil(n/b) for some n, e.g. 92 for 93 batches, and books q
  as 1/int(1/q): the plan's rate and steps are what actually happens here.)

All modes sample, clip and noise alike (tested against torch.func and against each other).
Weight decay is decoupled (AdamW): it only reads the current parameters, so it is post-processing
and costs no privacy; a penalty added to the loss would never reach the per-sample gradients. No
early stopping on dev: the model after the T steps is released.

Randomness: the Poisson sampling and the noise come from the release's
:class:`~privehr.models.privacy.randomness.NoiseSource` (OS entropy unless reproducible noise was asked for), and
the noise is drawn as Opacus's ``secure_mode`` draws it (four Gaussians summed, robust to the
floating-point attack); torchcsprng, the other half of ``secure_mode``, does not exist for torch 2.x.
What the guarantee covers: the training examples given here. What it does not: feature statistics
fitted on the same private data, and any hyperparameter tuning on dev.

A release takes exactly its plan's T steps at its q and sigma (the trainer checks what it took):

>>> from privehr.models.classifiers.logistic_regression import LogisticRegression
>>> x, y = torch.randn(200, 4), (torch.rand(200) < 0.5).float()
>>> plan = ReleasePlan.for_epochs(200, batch_size=50, epochs=2, target_epsilon=2.0, delta=1e-5)
>>> model, result = train_dp_sgd(LogisticRegression(4), (x,), y, DPSGDHyperparameters(0.05, 0.0), plan,
...                              NoiseSource.reproducible("doctest"))
>>> plan.steps, len(result.history), result.noise_source
(8, 2, 'reproducible')
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass, field
from typing import get_args

import torch
from opacus import PrivacyEngine
from opacus.data_loader import DPDataLoader
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import privehr.models.dpsgd.rules  # noqa: F401  (registers Opacus rules for privehr's layers)
from privehr.core.config import DPSGDClipping, DPSGDSettings
from privehr.models.classifiers.losses import binary_loss, per_sample_loss
from privehr.models.dpsgd.noisy_step import ghost_steps
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import ReleasePlan

__all__ = ["CLIPPING_MODES", "DPSGDHyperparameters", "DPSGDResult", "train_dp_sgd", "make_private_poisson",
           "check_accounted"]

CLIPPING_MODES = get_args(DPSGDClipping)  # ("ghost", "hooks", "functorch"): named in the config


_DEFAULTS = DPSGDSettings()  # the defaults live in the config, once


@dataclass(frozen=True)
class DPSGDHyperparameters:
    """What the optimiser does with the privatised gradient; the privacy side (b, epochs, C) is the plan's."""

    learning_rate: float = _DEFAULTS.learning_rate
    weight_decay: float = _DEFAULTS.weight_decay


@dataclass
class DPSGDResult:
    plan: ReleasePlan
    noise_source: str
    history: list[dict] = field(default_factory=list)  # losses on private batches: never written out


def make_private_poisson(model: nn.Module, optimizer: torch.optim.Optimizer, loader: DataLoader,
                         plan: ReleasePlan, noise: NoiseSource, grad_sample_mode: str = "hooks"):
    """Opacus's PrivacyEngine over ``loader``'s dataset with Poisson sampling at ``plan``'s q and sigma.

    Returns (engine, private module, DP optimizer, Poisson loader). The sampler's and the noise's
    generators come from ``noise`` (private to the release, so concurrent releases in one process
    never share torch's global generator); the optimizer draws its noise in Opacus's secure mode.
    The Poisson loader samples at the plan's q (not at one over the number of batches of the data's own length,
    which a plan built from a DP count does not know), and the optimizer divides by the plan's q n.
    """
    device = next(p for p in model.parameters() if p.requires_grad).device
    sampler = noise.torch_generator("sampling")
    poisson = DPDataLoader(loader.dataset, sample_rate=plan.sample_rate, generator=sampler)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]ecure RNG.*")  # secure_mode's torchcsprng: not for torch 2
        engine = PrivacyEngine(accountant="prv")
        private, optimizer, private_loader = engine.make_private(
            module=model, optimizer=optimizer, data_loader=poisson, noise_multiplier=plan.noise_multiplier,
            max_grad_norm=plan.max_grad_norm, poisson_sampling=False, grad_sample_mode=grad_sample_mode,
            noise_generator=noise.torch_generator("noise", device))
    private.forbid_grad_accumulation()  # as make_private does under Poisson sampling
    optimizer.secure_mode = True  # four Gaussians per coordinate (Opacus's floating-point mitigation)
    optimizer.expected_batch_size = plan.sample_rate * plan.n  # the plan's n: never the exact count
    if not hasattr(optimizer, "expected_batch_size") or optimizer.expected_batch_size != plan.sample_rate * plan.n:
        raise RuntimeError("Opacus's optimizer no longer takes its expected batch from the attribute privehr sets")
    if private_loader.sample_rate != plan.sample_rate:  # (Opacus's own book keeps 1 / int(1 / q): not what we claim)
        raise RuntimeError(f"Opacus samples at q = {private_loader.sample_rate}, the plan at {plan.sample_rate}")
    return engine, private, optimizer, private_loader


def check_accounted(engine: PrivacyEngine, plan: ReleasePlan) -> None:
    """Raise unless the optimizer took exactly the plan's T noised steps at sigma (its accountant's book;
    the sampling rate is checked on the sampler itself in :func:`make_private_poisson`)."""
    history = engine.accountant.history
    taken = sum(h[2] for h in history)
    if any(s != plan.noise_multiplier for s, _, _ in history) or taken != plan.steps:
        raise RuntimeError(f"the accountant saw {history}, the plan was ({plan.noise_multiplier}, "
                           f"{plan.sample_rate}, {plan.steps})")


def endless(loader: DataLoader):
    """The loader's batches, epoch after epoch (the trainer stops after exactly T of them)."""
    while True:
        yield from loader


def _ghost_steps(model: nn.Module, inputs: tuple[torch.Tensor, ...], y: torch.Tensor, optimizer, plan: ReleasePlan,
                 noise: NoiseSource, loss: str):
    """DP-SGD steps by ghost clipping (:func:`privehr.models.dpsgd.noisy_step.ghost_steps`) on the classifier's per-sample loss."""
    loss_fn = per_sample_loss(loss)

    def losses(m, target, *xs):
        return loss_fn(m(*xs), target)

    return ghost_steps(model, losses, (y, *inputs), optimizer, plan, noise)


def _opacus_steps(model: nn.Module, inputs: tuple[torch.Tensor, ...], y: torch.Tensor, optimizer, plan: ReleasePlan,
                  noise: NoiseSource, loss: str, mode: str, engines: list):
    """DP-SGD steps by Opacus's PrivacyEngine; its engine goes to ``engines`` for the accounting check."""
    device = y.device
    loader = DataLoader(TensorDataset(*[t.cpu() for t in inputs], y.cpu()), batch_size=plan.expected_batch)
    engine, private, optimizer, private_loader = make_private_poisson(model, optimizer, loader, plan, noise, mode)
    engines.append((engine, private))
    loss_fn = binary_loss(loss)
    warnings.filterwarnings("ignore", message="Full backward hook is firing")  # inputs need no grad: harmless
    private.train()
    for *batch, target in endless(private_loader):
        batch = [t.to(device) for t in batch]
        target = target.to(device)
        optimizer.zero_grad(set_to_none=True)
        out = private(*batch)
        batch_loss = loss_fn(out, target) if len(target) else out.sum() * 0.0  # empty Poisson batch
        batch_loss.backward()
        optimizer.step()
        yield float(batch_loss.detach()), len(target)


def train_dp_sgd(model: nn.Module, x_train: tuple[torch.Tensor, ...], y_train: torch.Tensor,
                 hp: DPSGDHyperparameters, plan: ReleasePlan, noise: NoiseSource, loss: str = "bce",
                 grad_sample_mode: str = "ghost", progress=None) -> tuple[nn.Module, DPSGDResult]:
    """Train ``model`` privately for exactly ``plan.steps`` steps; return the (unwrapped) module and the result.

    ``x_train`` are the model's positional inputs (batch first); the plan's n is the count it was built from (a DP
    count of these records, or their number where it is public), and only scales the noised gradient sum.
    ``grad_sample_mode``: one of :data:`CLIPPING_MODES`. ``progress(done, total)``, if given, is called after
    every epoch of ``plan.steps_per_epoch`` steps.
    """
    x_train = x_train if isinstance(x_train, tuple) else (x_train,)
    if grad_sample_mode not in CLIPPING_MODES:
        raise ValueError(f"unknown clipping {grad_sample_mode!r}; choose one of {CLIPPING_MODES}")
    model.train()  # Opacus validates the module in training mode
    optimizer = torch.optim.AdamW(model.parameters(), lr=hp.learning_rate, weight_decay=hp.weight_decay)
    engines: list = []
    steps = (_ghost_steps(model, x_train, y_train, optimizer, plan, noise, loss) if grad_sample_mode == "ghost"
             else _opacus_steps(model, x_train, y_train, optimizer, plan, noise, loss, grad_sample_mode, engines))
    history = []
    epochs = -(-plan.steps // plan.steps_per_epoch)
    for epoch in range(1, epochs + 1):
        total, seen, empty = 0.0, 0, 0
        todo = min(plan.steps_per_epoch, plan.steps - (epoch - 1) * plan.steps_per_epoch)
        for batch_loss, size in itertools.islice(steps, todo):
            total += batch_loss * size
            seen += size
            empty += size == 0
        history.append({"epoch": epoch, "train_loss": total / max(seen, 1), "examples": seen, "empty_batches": empty})
        if progress is not None:
            progress(epoch, epochs)
    steps.close()
    if engines:
        engine, private = engines[0]
        check_accounted(engine, plan)
        model = private._module
    return model, DPSGDResult(plan=plan, noise_source=noise.kind, history=history)
