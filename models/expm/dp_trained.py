"""DP-trained ExpM flows: the exponential mechanism's target, fitted by DP-SGD over records, so the guarantee is
DP-SGD's and the ExpM temperature is only a utility knob.

References:
    Bridges, Tombs, Stanley (2023). Are Normalizing Flows the Key to Unlocking the Exponential Mechanism?
    arXiv:2311.09200 (the target and the reverse-KL objective).
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787, Algorithm 2 (the
    flow's objective split into per-record terms, clipped and noised).
    Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar, Zhang (2016). Deep Learning with Differential Privacy.

ExpM+NF (:mod:`privehr.models.expm.mechanism`) fits a flow q over a classifier's parameters theta by the reverse KL to
p_D(theta) ∝ exp(eps~ u(theta; D) / 2s), u = -sum_i l_i(theta) - lambda ||theta||_1, l_i = (sigmoid(f(x_i; theta))
- y_i)^2, s = 1, and claims eps~ although the flow is only an approximation. Here the same objective, per record
(tau = eps~ / 2, m draws theta_j = F(z_j) shared by every record),

    KL(q || p_D) = E_q[log q + tau lambda ||theta||_1] + sum_i tau E_q[l_i(theta)] + log Z,

is minimised by DP-SGD: each step Poisson-samples records at the plan's rate q, clips every record's gradient
g_i = grad_lambda tau/m sum_j l_i(theta_j) to norm C, adds N(0, sigma^2 C^2 I) to the sum, divides by q n (n: the
plan's count) and adds the gradient of the data-independent term, h = grad_lambda 1/(n m) sum_j [log q(theta_j) +
tau lambda ||theta_j||_1], which reads only the flow's parameters and the draws: it needs no clipping and no noise.
The release (the flow's parameters after T steps) is (epsilon, delta)-DP by the plan, whatever eps~ is; draws from
it, its mean and every prediction made with them are post-processing. Since no privacy rests on u's sensitivity, l_i
may also be the cross-entropy (``BatchedUtility(loss="bce")``: the target is then the Gibbs density of the logistic
likelihood under the L1 prior, tau a temperature); under DP the squared error's gradient, bounded by 0.3 |x_i| and
vanishing for confident records, fails on a rare label (``bench/dp_expm.py``).

**The flow** is ExpM+NF's elementwise affine layer, theta = mu + exp(rho) * z, z ~ N(0, sigma0^2 I)
(:class:`~privehr.models.nf.parameter_flow.ParameterFlow` with no planar or Sylvester layer): a diagonal Gaussian.
Its Jacobian is diagonal, d theta_j / d mu = I and d theta_j / d rho = theta_j - mu, so every record's gradient is
exact and closed form given the scores s_ij = grad_theta l_i(theta_j):

    g_i^mu = tau/m sum_j s_ij,      g_i^rho = tau/m sum_j s_ij * (theta_j - mu),

(b, D) each, where DP-VI's generic Jacobian (D x P per draw) would not fit a 15,000-parameter model. For logistic
regression s_ij = c_ij (x_i, 1), c_ij = 2 (p_ij - y_i) p_ij (1 - p_ij) (cross-entropy: p_ij - y_i), so the whole batch
is two GEMMs; any other
classifier gets its scores from ``torch.func`` (vmap over draws and records). Tested against ``torch.func.grad`` of
each record's loss through the flow.

What the guarantee does not cover: the records' count n where it is exact (the pipeline plans from a released
count), and hyperparameters chosen on the same records by exact scores (the grid's tuning rules apply).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.func import functional_call, grad, vmap

from privehr.models.classifiers.logistic_regression import LogisticRegression
from privehr.models.dpsgd.noisy_step import clipped_sum, poisson_indices, set_noised_gradients
from privehr.models.dpsgd.step_history import run_steps
from privehr.models.expm.batched_utility import BatchedUtility
from privehr.models.nf.parameter_flow import ParameterFlow
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import ReleasePlan

__all__ = ["DPExpMHyperparameters", "gaussian_parameter_flow", "record_gradients", "shared_gradients",
           "train_dp_expm", "flow_mean"]


@dataclass(frozen=True)
class DPExpMHyperparameters:
    """The target's temperature and the optimiser; the defaults live in ``privehr.core.config.DPExpMConfig``."""

    temperature: float                  # eps~ of the targeted density exp(eps~ u / 2s): a utility knob, not a claim
    learning_rate: float
    draws: int                          # m: parameter draws per step, shared by every record
    init_scale: float                   # sigma0: q starts at N(0, sigma0^2 I), data-independent
    l1: float = 0.0                     # lambda of u's regulariser (data-independent)

    def __post_init__(self):
        if self.temperature <= 0 or self.draws < 1 or self.init_scale <= 0:
            raise ValueError("temperature and init_scale must be positive and draws at least 1")


def gaussian_parameter_flow(dim: int, init_scale: float) -> ParameterFlow:
    """ExpM+NF's elementwise affine layer alone: q = N(mu, sigma0^2 exp(2 rho)), starting at mu = 0, rho = 0."""
    return ParameterFlow(dim, layers=0, base_sigma=init_scale, affine=True)


def _scores(utility: BatchedUtility, theta: torch.Tensor, inputs: tuple[torch.Tensor, ...],
            y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(l_ij (m, b), s_ij (m, b, D)): each record's loss under each draw and its gradient in theta."""
    def one(flat, *record):
        params = {k: v.reshape(s) for k, v, s in zip(utility.names, flat.split(utility.sizes), utility.shapes)}
        logit = functional_call(utility.model, {**params, **utility.buffers}, tuple(r[None] for r in record[:-1]))
        return utility.record_losses(logit.reshape(()), record[-1])

    k = len(inputs) + 1  # the record's inputs and its label
    per_record = vmap(vmap(grad(one), in_dims=(None, *[0] * k)), in_dims=(0, *[None] * k))
    with torch.no_grad():
        losses = utility.record_losses(utility.logits(theta, inputs), y)
    return losses, per_record(theta.detach(), *inputs, y)


def record_gradients(flow: ParameterFlow, utility: BatchedUtility, batch: torch.Tensor, z: torch.Tensor,
                     temperature: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(tau/m sum_j l_i(theta_j) per record, {"shift": (b, D), "log_scale": (b, D)} its gradients), for the records
    ``batch`` (indices into the utility's records) and base draws ``z`` (m, D)."""
    if flow.layers or flow.shift is None:
        raise ValueError("closed-form per-record gradients need the affine-only flow (gaussian_parameter_flow)")
    tau, m = temperature / 2, len(z)
    with torch.no_grad():
        theta, _ = flow.push(z)
        centred = theta - flow.shift                                     # d theta_j / d rho
        inputs, y = tuple(t[batch] for t in utility.inputs), utility.y[batch]
        if type(utility.model) is LogisticRegression:
            logits = utility.logits(theta, inputs)                        # (m, b)
            p = torch.sigmoid(logits)
            losses = utility.record_losses(logits, y)
            c = (p - y) * (2 * p * (1 - p) if utility.loss == "l2" else 1.0) * (tau / m)  # d l_ij / d logit
            x = torch.cat([inputs[0], inputs[0].new_ones(len(y), 1)], 1)  # (b, D): weight then bias
            grads = {"shift": c.sum(0)[:, None] * x, "log_scale": x * (c.T @ centred)}
        else:
            losses, s = _scores(utility, theta, inputs, y)               # (m, b), (m, b, D)
            grads = {"shift": s.sum(0) * (tau / m), "log_scale": torch.einsum("mbd,md->bd", s, centred) * (tau / m)}
    return losses.mean(0) * tau, grads


def shared_gradients(flow: ParameterFlow, z: torch.Tensor, temperature: float,
                     l1: float) -> dict[str, torch.Tensor]:
    """grad of 1/m sum_j [log q(theta_j) + tau lambda ||theta_j||_1] in (shift, log_scale): no record enters it."""
    tau = temperature / 2
    with torch.no_grad():
        theta, _ = flow.push(z)
        sign = torch.sign(theta) * (tau * l1 / len(z))
        return {"shift": sign.sum(0), "log_scale": (sign * (theta - flow.shift)).sum(0) - 1.0}


def _steps(flow: ParameterFlow, utility: BatchedUtility, hp: DPExpMHyperparameters, plan: ReleasePlan,
           noise: NoiseSource, optimizer: torch.optim.Optimizer):
    device = utility.y.device
    sampler = noise.torch_generator("sampling")
    draws = noise.torch_generator("draws", device)
    generator = noise.torch_generator("noise", device)
    named = {"shift": flow.shift, "log_scale": flow.log_scale}
    while True:
        batch = poisson_indices(plan, sampler, utility.n).to(device)
        z = torch.randn(hp.draws, flow.dim, generator=draws, device=device) * flow.base_sigma
        losses, grads = record_gradients(flow, utility, batch, z, hp.temperature)
        sums, _ = clipped_sum(grads, plan.max_grad_norm)
        set_noised_gradients({p: sums[k] for k, p in named.items()}, plan, generator)
        for k, g in shared_gradients(flow, z, hp.temperature, hp.l1).items():
            named[k].grad += g / plan.n
        optimizer.step()
        yield float(losses.mean()) if len(batch) else 0.0, len(batch)


def train_dp_expm(utility: BatchedUtility, hp: DPExpMHyperparameters, plan: ReleasePlan,
                  noise: NoiseSource | None = None, progress=None) -> tuple[ParameterFlow, list[dict]]:
    """The DP-trained flow after exactly the plan's T steps (in eval mode; checked) and its loss curve (tau times
    the mean loss of the sampled records: an exact statistic of private batches, never to be written out)."""
    noise = noise if noise is not None else NoiseSource.secret()
    flow = gaussian_parameter_flow(utility.dim, hp.init_scale).to(utility.y.device)
    flow.train()
    optimizer = torch.optim.Adam([flow.shift, flow.log_scale], lr=hp.learning_rate)
    history = run_steps(_steps(flow, utility, hp, plan, noise, optimizer), plan.steps,
                        max(plan.steps // 10, 1), progress, "loss")
    taken = optimizer.state[flow.shift]["step"] if flow.shift in optimizer.state else 0
    if int(taken) != plan.steps:
        raise RuntimeError(f"the flow took {int(taken)} noised steps, its plan accounts for {plan.steps}")
    return flow.eval(), history


def flow_mean(flow: ParameterFlow) -> torch.Tensor:
    """The mean (and mode) of the released Gaussian flow: the classifier a bundle ships (post-processing)."""
    return flow.shift.detach().clone()
