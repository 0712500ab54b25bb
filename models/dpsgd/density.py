"""DP-NF: density estimation by a normalizing flow trained with DP-SGD (Algorithm 1 of Waites & Cummings 2021
and of Su et al. 2023).

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.
    Waites, Cummings (2021). Differentially Private Normalizing Flows for Privacy-Preserving Density Estimation.
    AIES. arXiv:2103.14068.

Minimises the mean negative log-likelihood -1/b sum_i log p_theta(x_i) over Poisson batches (rate
q) by DP-SGD: each per-sample gradient clipped to norm C, Gaussian noise N(0, sigma^2 C^2 I) added to
the sum, divided by the expected batch q n. sigma, q, T and C come from the release's
:class:`~privehr.models.privacy.release_plan.ReleasePlan`; the trainer takes exactly its T steps. Per-sample
clipping by ghost clipping (:mod:`privehr.models.dpsgd.ghost_clipping`, the default) or by
Opacus (hooks with privehr's masked-linear rule, or its functorch fallback); Poisson sampling either
way. Ghost clipping also offers DP-HFlow's fine-grained clipping (per layer, per unit, stochastic
sparsification: :mod:`privehr.models.dpsgd.fine_grained_clipping`), each bounding a record's gradient by C. The
noise and the sampling come from the release's :class:`~privehr.models.privacy.randomness.NoiseSource` (OS entropy
unless reproducible noise was asked for), the noise drawn as four summed Gaussians.
After the T steps the flow is released; it is (epsilon, delta)-DP for the records in ``x`` with
epsilon from the PRV accountant (RDP and PLD alongside) and, for comparison with the papers, mu-GDP
with mu = q sqrt(T (exp(1/sigma^2) - 1)) (:mod:`privehr.models.privacy.gdp`). Synthetic data sampled from
the flow are post-processing: they cost nothing more.

Not covered: anything computed from the private records before training (imputation, scaling
statistics) and any tuning of hyperparameters on them. ``plan=None`` trains without privacy (the
mu = infinity column of Su et al. 2023), optionally with early stopping on held-out rows
(``validation_fraction``): the flow is returned at its best held-out log-likelihood.

A DP-NF release: a MAF fitted by ghost-clipped DP-SGD for exactly its plan's T steps, at a mu-GDP budget:

>>> from privehr.models.nf.maf import MAF
>>> x = torch.randn(300, 2)
>>> plan = ReleasePlan.for_mu(300, rate=0.1, steps=20, mu=1.0, delta=1e-5)
>>> release = train_density(MAF(2, blocks=2, hidden_size=8, hidden_layers=1), x,
...                         DensityHyperparameters(steps=20, validation_fraction=0.0), plan,
...                         NoiseSource.reproducible("doctest"))
>>> release.plan["steps"] == plan.steps, release.mechanism, round(plan.mu, 3)
(True, 'dp_sgd', 1.0)
"""

from __future__ import annotations

import copy
import inspect
import math
import warnings
from dataclasses import dataclass, field, replace

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import privehr.models.dpsgd.rules  # noqa: F401  (registers the MaskedLinear rule for the Opacus paths)
from privehr.core.config import DPNFConfig
from privehr.models.dpsgd.trainer import check_accounted, endless, make_private_poisson
from privehr.models.dpsgd.fine_grained_clipping import CLIPPING_MODES
from privehr.models.dpsgd.noisy_step import ghost_steps
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import ReleasePlan
from privehr.models.dpsgd.step_history import run_steps

__all__ = ["DensityHyperparameters", "DensityRelease", "train_density", "mean_log_likelihood"]


_DEFAULTS = DPNFConfig()  # the defaults live in the config, once


@dataclass(frozen=True)
class DensityHyperparameters:
    """The optimiser, and the non-private schedule (a DP release takes b, T and C from its plan)."""

    learning_rate: float = _DEFAULTS.learning_rate
    batch_size: int = 32            # non-private minibatch (the synthesis task sets ceil(q n))
    steps: int = _DEFAULTS.steps    # non-private steps (at most, with early stopping)
    seed: int = 0                   # non-private shuffling and validation split
    validation_fraction: float = _DEFAULTS.validation_fraction  # non-private: rows held out for early stopping
    eval_every: int = 50            # non-private: steps between validation log-likelihoods
    patience: int = _DEFAULTS.patience  # non-private: evaluations without improvement before stopping


@dataclass
class DensityRelease:
    """What was released and what it cost: the mechanism, the plan's record (sigma, q, T, C, delta, epsilon by
    PRV, RDP and PLD, mu and GDP's epsilon) and where the noise came from."""

    mechanism: str                  # "dp_sgd" or "non_private"
    plan: dict | None               # ReleasePlan.record() of a DP release (sigma, q, T, C, delta, epsilons, mu)
    noise_source: str = "none"      # "os_entropy" (secret, never recorded) or "reproducible" (not DP)
    history: list[dict] = field(default_factory=list)  # losses on private batches: kept with patient-level files
    early_stopping: dict | None = None  # non-private with a validation split: the steps taken and the best one

    @property
    def epsilon(self) -> float | None:
        """The claimed epsilon of a DP release; None for a non-private one."""
        return None if self.plan is None else self.plan["epsilon"]

    def as_dict(self) -> dict:
        return {"mechanism": self.mechanism, "noise_source": self.noise_source, **(self.plan or {}),
                "epsilon": self.epsilon}


def _nll(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return -model(x)


def _loss(flow: nn.Module, generator: torch.Generator):
    """The per-sample NLL; a flow that draws randomness in its forward (DP-HFlow's dequantization noise) draws it from
    ``generator``. In a DP release that generator is the release's secret stream: a draw from torch's global
    generator (seeded in public by the model's initialisation) would let an attacker replay which noise each record
    got, and removing one record would shift the noise of every later record in its batch."""
    if "generator" in inspect.signature(flow.forward).parameters:
        return lambda model, x: -model(x, generator=generator)
    return _nll


def _plain_steps(flow, x, hp, optimizer, stopper: "_EarlyStopping | None" = None):
    """Non-private: shuffled minibatches of the expected size, epoch after epoch (until ``stopper`` says stop)."""
    generator = torch.Generator().manual_seed(hp.seed)
    nll = _loss(flow, torch.Generator(x.device).manual_seed(hp.seed + 2))  # non-private: a public seed is fine
    step = 0
    while True:
        for idx in torch.randperm(len(x), generator=generator).to(x.device).split(hp.batch_size):
            optimizer.zero_grad(set_to_none=True)
            loss = nll(flow, x[idx]).mean()
            loss.backward()
            optimizer.step()
            step += 1
            yield float(loss.detach()), len(idx)
            if stopper is not None and step % hp.eval_every == 0 and stopper.stop(step):
                return


class _EarlyStopping:
    """Keeps the flow's state at its best held-out log-likelihood; stops after ``patience`` evaluations without a
    better one. A flow trained without noise can otherwise drive a few training points' density to infinity
    (held-out log-likelihood of -1e6 per patient on the demo table before this)."""

    def __init__(self, flow: nn.Module, validation: torch.Tensor, patience: int):
        self.flow, self.validation, self.patience = flow, validation, patience
        self.best, self.best_step, self.stale, self.state = -math.inf, 0, 0, copy.deepcopy(flow.state_dict())
        self.last_step = 0

    def stop(self, step: int) -> bool:
        self.last_step = step
        score = mean_log_likelihood(self.flow, self.validation)
        self.flow.train()
        if math.isfinite(score) and score > self.best:
            self.best, self.best_step, self.stale = score, step, 0
            self.state = copy.deepcopy(self.flow.state_dict())
        else:
            self.stale += 1
        return self.stopped

    @property
    def stopped(self) -> bool:
        return self.stale >= self.patience

    def restore(self, max_steps: int) -> dict:
        """Load the best state; return the steps taken, the best step and whether it stopped early."""
        self.flow.load_state_dict(self.state)
        early = self.stopped and self.last_step < max_steps
        return {"steps_taken": self.last_step if early else max_steps, "best_step": self.best_step,
                "stopped_early": early}


def _opacus_steps(flow, x, optimizer, plan: ReleasePlan, noise: NoiseSource, mode: str, accounted: list):
    """DP-SGD by Opacus's PrivacyEngine (per-sample gradients by hooks or functorch)."""
    loader = DataLoader(TensorDataset(x.cpu()), batch_size=plan.expected_batch)
    nll = _loss(flow, noise.torch_generator("dequantize", x.device))
    engine, model, optimizer, loader = make_private_poisson(flow, optimizer, loader, plan, noise, mode)
    accounted.append(engine)
    warnings.filterwarnings("ignore", message="Full backward hook is firing")  # inputs need no grad: harmless
    for (xb,) in endless(loader):
        xb = xb.to(x.device)
        optimizer.zero_grad(set_to_none=True)
        log_p = -nll(model, xb)
        loss = -log_p.mean() if len(xb) else log_p.sum() * 0.0  # an empty Poisson batch still steps (noise)
        loss.backward()
        optimizer.step()
        yield float(loss.detach()), len(xb)


def train_density(flow: nn.Module, x: torch.Tensor, hp: DensityHyperparameters = DensityHyperparameters(),
                  plan: ReleasePlan | None = None, noise: NoiseSource | None = None,
                  grad_sample_mode: str = "ghost", log_every: int = 100, progress=None, clipping: str = "flat",
                  sparsity: float = 0.5) -> DensityRelease:
    """Fit ``flow`` (with ``log_prob``) to the rows of ``x`` in place: DP-SGD by ``plan``, or non-private if None.

    ``grad_sample_mode``: "ghost" (ghost clipping; every trainable parameter must sit in a layer with a
    rule, as the MAF's masked linear layers do) or an Opacus mode, "hooks" or "functorch". All three clip, noise and sample alike.
    ``noise`` (default: OS entropy) gives the DP noise and Poisson sampling. ``progress(done, total)``,
    if given, is called every ``log_every`` steps. ``clipping`` (ghost mode only): "flat" (one threshold C), or
    "per_layer", "per_unit", "sparsified" (with ``sparsity``) of :mod:`privehr.models.dpsgd.fine_grained_clipping` (DP-HFlow's
    fine-grained clipping); each bounds a record's clipped gradient by C, so the plan's accounting holds as is.
    """
    if clipping not in CLIPPING_MODES:
        raise ValueError(f"unknown clipping mode {clipping!r}: one of {CLIPPING_MODES}")
    if clipping != "flat" and grad_sample_mode != "ghost":
        raise ValueError(f"clipping={clipping!r} needs grad_sample_mode='ghost' (Opacus clips flat)")
    n = len(x)
    flow.train()
    optimizer = torch.optim.Adam([p for p in flow.parameters() if p.requires_grad], lr=hp.learning_rate)
    accounted: list = []
    stopper = None
    if plan is None:
        fit = x
        if hp.validation_fraction > 0 and n >= 10:  # hold out rows: keep the flow at its best held-out fit
            order = torch.randperm(n, generator=torch.Generator().manual_seed(hp.seed + 1)).to(x.device)
            held = max(1, round(hp.validation_fraction * n))
            fit, stopper = x[order[held:]], _EarlyStopping(flow, x[order[:held]], hp.patience)
        hp = replace(hp, batch_size=min(hp.batch_size, len(fit)))
        total_steps, steps = hp.steps, _plain_steps(flow, fit, hp, optimizer, stopper)
    else:
        # plan.n may be a released noisy count, not n: Poisson sampling at the plan's q is DP whatever the number of
        # records, and the noised sum is divided by the plan's q n (never by the exact count)
        noise = noise if noise is not None else NoiseSource.secret()
        total_steps = plan.steps
        nll = _loss(flow, noise.torch_generator("dequantize", x.device))
        steps = (ghost_steps(flow, nll, (x,), optimizer, plan, noise, clipping, sparsity)
                 if grad_sample_mode == "ghost" else _opacus_steps(flow, x, optimizer, plan, noise, grad_sample_mode,
                                                                   accounted))
    history = run_steps(steps, total_steps, log_every, progress, "train_nll")
    if plan is None:
        stopped = None
        if stopper is not None:
            if not stopper.stopped and stopper.last_step != total_steps:  # the last steps are judged too
                stopper.stop(total_steps)
            stopped = stopper.restore(total_steps)
        return DensityRelease("non_private", None, "none", history, stopped)
    if accounted:
        check_accounted(accounted[0], plan)
    return DensityRelease("dp_sgd", plan.record(), noise.kind, history)


@torch.no_grad()
def mean_log_likelihood(flow: nn.Module, x: torch.Tensor, batch_size: int = 8192) -> float:
    """Average log p(x) over the rows of ``x`` (the test log-likelihood of Waites & Cummings 2021, Table 1)."""
    flow.eval()
    device = next(flow.parameters()).device
    total = sum(float(flow.log_prob(x[i:i + batch_size].to(device)).sum()) for i in range(0, len(x), batch_size))
    return total / len(x)
