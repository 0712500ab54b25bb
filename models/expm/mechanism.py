"""ExpM+NF (Bridges et al. 2023, Algorithm 1): a normalizing flow trained to sample the exponential mechanism.

References:
    Bridges, Tombs, Stanley (2023). Are Normalizing Flows the Key to Unlocking the Exponential Mechanism?
    arXiv:2311.09200.

Target density over a classifier's parameters:  p(theta) ∝ exp(eps * u(theta) / (2 s)), with the
utility u of :mod:`privehr.models.expm.batched_utility` and sensitivity s = 1. The flow q is fitted by the reverse
KL divergence, estimated with N reparametrised draws per step:

    KL(q || p) = E_q[log q(theta) - eps u(theta) / (2 s)] + log Z,

minimised with Adam or RMSprop and a plateau scheduler. Release modes: one sample (the private
use), and the Bayesian mode of Bridges et al. 2023, section 5 (posterior-predictive average over N samples, and the
sample of highest target density, "MAP"). ``fit_gap`` reports the spread of
log q(theta) - eps u(theta)/(2s) over samples: zero iff q equals p on them (then it is -log Z), so a
large spread shows q is far from the mechanism.

No differential-privacy guarantee is proven for ExpM+NF: the flow only approximates the mechanism,
and eps (written eps~ in reports) is a training parameter, not a guarantee.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from privehr.core.config import ExpMNFConfig
from privehr.models.expm.batched_utility import BatchedUtility
from privehr.models.nf.parameter_flow import ParameterFlow

__all__ = ["ExpMNFHyperparameters", "ExpMNFResult", "train_expm_nf", "train_expm_nf_many", "sample_parameters",
           "draw_utilities", "draw_probabilities", "posterior_predictive", "map_index", "fit_gap"]


_DEFAULTS = ExpMNFConfig()  # the defaults live in the config, once


@dataclass(frozen=True)
class ExpMNFHyperparameters:
    epsilon: float
    flow: Literal["planar", "sylvester"] = _DEFAULTS.flow
    layers: int = _DEFAULTS.layers
    m: int = _DEFAULTS.m
    reflections: int = _DEFAULTS.reflections
    base_sigma: float = _DEFAULTS.base_sigma
    affine: bool = _DEFAULTS.affine
    samples: int = _DEFAULTS.samples              # N draws per step
    steps: int = _DEFAULTS.steps
    learning_rate: float = _DEFAULTS.learning_rate
    optimizer: Literal["adam", "rmsprop"] = _DEFAULTS.optimizer
    momentum: float = 0.5                         # RMSprop only
    batch_size: int | None = _DEFAULTS.batch_size  # None: the exact utility over the whole training set
    seed: int = 0

    def __post_init__(self):
        if self.epsilon <= 0:
            raise ValueError("epsilon must be positive")


@dataclass
class ExpMNFResult:
    flow: ParameterFlow
    history: list[float] = field(default_factory=list)  # reverse-KL estimate (up to log Z) per step


def train_expm_nf(utility: BatchedUtility, hp: ExpMNFHyperparameters, device: torch.device | str = "cpu",
                  flow: ParameterFlow | None = None, round_: int = 0, progress=None) -> ExpMNFResult:
    """Fit a flow to exp(eps u / 2s) by reverse KL; returns the flow (in eval mode) and the loss curve.

    ``flow`` continues training an earlier flow for ``hp.steps`` more steps (``round_`` varies the draws);
    ``progress(done, total)``, if given, is called after every step."""
    return train_expm_nf_many([utility], [hp], device, [flow], round_, progress)[0]


def train_expm_nf_many(utilities: list[BatchedUtility], hps: list[ExpMNFHyperparameters],
                       device: torch.device | str = "cpu", flows: list[ParameterFlow | None] | None = None,
                       round_: int = 0, progress=None) -> list[ExpMNFResult]:
    """K flows trained together, flow k exactly as :func:`train_expm_nf` trains it alone (its own draws from its own
    seed, its own optimizer, scheduler and steps): what is shared is the pass over the records. Where the utilities
    share their data (:meth:`BatchedUtility.shares_data_with`) and use every record (``batch_size`` None), the K
    flows' draws go through one batched utility per step, so the records are read once for K flows instead of K
    times (the utility's products are memory-bound on CPU: an (8 x n) x (n x 7,488) product streams the whole
    feature matrix). Each member's L1 term is its own. Otherwise the flows step one after another, each utility's graph
    freed before the next is built."""
    k_members = len(utilities)
    if not (k_members == len(hps) and k_members > 0):
        raise ValueError(f"{k_members} utilities, {len(hps)} hyperparameters: one of each per flow")
    flows = list(flows) if flows is not None else [None] * k_members
    generators, optimizers, schedulers, scales = [], [], [], []
    for k, (utility, hp) in enumerate(zip(utilities, hps)):
        generators.append(torch.Generator(device=device).manual_seed(hp.seed + 7919 * round_))
        if flows[k] is None:
            flows[k] = ParameterFlow(utility.dim, hp.layers, hp.flow, hp.base_sigma, hp.m, hp.reflections, hp.affine,
                                     seed=hp.seed).to(device)
        flows[k].train()
        if hp.optimizer == "adam":
            optimizers.append(torch.optim.Adam(flows[k].parameters(), lr=hp.learning_rate))
        else:
            optimizers.append(torch.optim.RMSprop(flows[k].parameters(), lr=hp.learning_rate, momentum=hp.momentum))
        schedulers.append(torch.optim.lr_scheduler.ReduceLROnPlateau(optimizers[k], factor=0.5, patience=20))
        scales.append(hp.epsilon / (2 * utility.sensitivity))
    exact = [hp.batch_size is None or hp.batch_size >= u.n for u, hp in zip(utilities, hps)]
    shared = all(exact) and all(utilities[0].shares_data_with(u) for u in utilities[1:])
    histories: list[list[float]] = [[] for _ in range(k_members)]
    longest = max(hp.steps for hp in hps)
    for step in range(1, longest + 1):
        active = [k for k in range(k_members) if step <= hps[k].steps]
        thetas, log_qs, batches = [], [], []
        for k in active:
            hp, utility = hps[k], utilities[k]
            z = torch.randn(hp.samples, utility.dim, generator=generators[k], device=device) * flows[k].base_sigma
            theta, log_q = flows[k].push(z)
            thetas.append(theta)
            log_qs.append(log_q)
            batches.append(None if exact[k] else
                           torch.randperm(utility.n, generator=generators[k], device=device)[: hp.batch_size])
        for k in active:
            optimizers[k].zero_grad(set_to_none=True)
        if shared:
            data = utilities[0].data_utility(torch.cat(thetas)).split([len(t) for t in thetas])
            losses = [(log_q - scales[k] * (d - utilities[k].l1 * t.abs().sum(1))).mean()
                      for k, log_q, d, t in zip(active, log_qs, data, thetas)]
            sum(losses).backward()  # the flows share no parameter: each gets its own loss's gradient
        else:  # one flow's utility graph at a time: memory stays one flow's
            losses = []
            for k, theta, batch, log_q in zip(active, thetas, batches, log_qs):
                losses.append((log_q - scales[k] * utilities[k](theta, batch)).mean())
                losses[-1].backward()
        for k, loss in zip(active, losses):
            optimizers[k].step()
            schedulers[k].step(loss.item())
            histories[k].append(float(loss.detach()))
        if progress is not None:
            progress(step, longest)
    return [ExpMNFResult(flow.eval(), history) for flow, history in zip(flows, histories)]


@torch.no_grad()
def sample_parameters(flow: ParameterFlow, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n parameter vectors (N, D) and their log q."""
    device = next(flow.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    z = torch.randn(n, flow.dim, generator=generator, device=device) * flow.base_sigma
    return flow.push(z)


@torch.no_grad()
def draw_utilities(utility: BatchedUtility, theta: torch.Tensor, chunk: int = 64) -> torch.Tensor:
    """u(theta_j) on the whole training set for each draw, in chunks of draws."""
    return torch.cat([utility(theta[i:i + chunk]) for i in range(0, len(theta), chunk)])


@torch.no_grad()
def draw_probabilities(utility: BatchedUtility, theta: torch.Tensor, inputs: tuple[torch.Tensor, ...],
                       chunk: int = 64) -> np.ndarray:
    """sigmoid(f(x; theta_j)) for each draw j and record x: (N, n)."""
    return torch.cat([torch.sigmoid(utility.logits(theta[i:i + chunk], inputs))
                      for i in range(0, len(theta), chunk)]).cpu().numpy()


def posterior_predictive(probabilities: np.ndarray) -> np.ndarray:
    """p(y = 1 | x) = mean over the N draws of sigmoid(f(x; theta_j)) (Bridges et al. 2023, Appendix F)."""
    return probabilities.mean(axis=0)


def map_index(utilities: torch.Tensor) -> int:
    """The draw of highest target density eps u(theta) / (2s), i.e. of highest utility ("MAP")."""
    return int(torch.argmax(utilities))


def fit_gap(epsilon: float, sensitivity: float, utilities: torch.Tensor, log_q: torch.Tensor) -> dict:
    """Spread of g = log q(theta) - eps u(theta)/(2s) over draws (0 iff q = p there, up to log Z)."""
    g = (log_q - epsilon * utilities / (2 * sensitivity)).double().cpu().numpy()
    return {"gap_std": float(g.std()), "gap_range": float(g.max() - g.min()), "samples": int(g.size)}
