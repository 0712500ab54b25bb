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

import math
from dataclasses import dataclass

import torch
from torch.func import functional_call, grad, vmap

from privehr.models.classifiers.logistic_regression import LogisticRegression
from privehr.models.classifiers.stacking import MemberAdamW
from privehr.models.dpsgd.noisy_step import clipped_sum, poisson_indices, set_noised_gradients
from privehr.models.dpsgd.step_history import run_steps
from privehr.models.expm.batched_utility import BatchedUtility
from privehr.models.nf.parameter_flow import ParameterFlow
from privehr.models.privacy.randomness import NoiseSource, gaussian_noise
from privehr.models.privacy.release_plan import ReleasePlan

__all__ = ["DPExpMHyperparameters", "gaussian_parameter_flow", "record_gradients", "shared_gradients",
           "train_dp_expm", "train_dp_expm_many", "batches_together", "clipped_record_sums",
           "flow_mean", "CHUNK_VALUES"]


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
        z = torch.randn(hp.draws, flow.dim, generator=draws, device=device, dtype=flow.shift.dtype) * flow.base_sigma
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
    flow = gaussian_parameter_flow(utility.dim, hp.init_scale).to(utility.y.device, utility.inputs[0].dtype)
    flow.train()
    optimizer = torch.optim.Adam([flow.shift, flow.log_scale], lr=hp.learning_rate)
    history = run_steps(_steps(flow, utility, hp, plan, noise, optimizer), plan.steps,
                        max(plan.steps // 10, 1), progress, "loss")
    taken = optimizer.state[flow.shift]["step"] if flow.shift in optimizer.state else 0
    if int(taken) != plan.steps:
        raise RuntimeError(f"the flow took {int(taken)} noised steps, its plan accounts for {plan.steps}")
    return flow.eval(), history


#: a chunk of flows gathers at most this many feature values of its batches (floats): the passes of a step over them
#: then stay in the caches (12 flows' batches at once, 60 MB of a 7,488-feature regression, ran at 0.4x one by one)
CHUNK_VALUES = 1 << 21


def batches_together(utility: BatchedUtility, hps: list[DPExpMHyperparameters]) -> bool:
    """Whether :func:`train_dp_expm_many` trains flows of these hyperparameters on ``utility`` together: logistic
    regression (closed-form record gradients, a few products a step) with one draw count m."""
    return type(utility.model) is LogisticRegression and len({hp.draws for hp in hps}) == 1


def train_dp_expm_many(utility: BatchedUtility, hps: list[DPExpMHyperparameters], plans: list[ReleasePlan],
                       noises: list[NoiseSource], progress=None) -> list[ParameterFlow]:
    """K DP-trained flows on the records of ``utility``, flow k by ``plans[k]`` with ``hps[k]`` and ``noises[k]``, as
    :func:`train_dp_expm` trains each; returned in eval mode, in order (no loss curve: none is written out).

    Where :func:`batches_together` holds, the K flows step together: their Poisson batches are gathered (padded to the
    widest, a chunk of flows at a time: :data:`CHUNK_VALUES`) and every record's gradient norm and each flow's clipped
    sum come from a few batched products (:func:`clipped_record_sums`), the (b, D) gradient of the shift never formed.

    Each flow keeps its own plan (exactly T_k steps, then it stays as it is), its own Poisson sample, draws and noise
    streams (consumed in :func:`train_dp_expm`'s order, so reproducible noise gives the same flows to float rounding,
    tested), its own clipping norm, temperature, L1 weight and learning rate (Adam, no weight decay). A record whose
    norm is not finite, or a padding row, has clipping factor zero; a flow whose draws are not finite takes
    :func:`record_gradients`' path for the step. Otherwise (another model, several draw counts) the flows train one
    after another.
    """
    k_flows = len(hps)
    if not (k_flows == len(plans) == len(noises)) or k_flows == 0:
        raise ValueError(f"{k_flows} hyperparameters, {len(plans)} plans, {len(noises)} noises: one of each per flow")
    if not batches_together(utility, hps):
        return [train_dp_expm(utility, hp, plan, noise, progress)[0] for hp, plan, noise in zip(hps, plans, noises)]
    device, x_all, y_all = utility.y.device, utility.inputs[0], utility.y
    dtype, features, m = x_all.dtype, x_all.shape[1], hps[0].draws
    flows = [gaussian_parameter_flow(utility.dim, hp.init_scale).to(device, dtype) for hp in hps]
    params = {"shift": torch.stack([f.shift.detach() for f in flows]),
              "log_scale": torch.stack([f.log_scale.detach() for f in flows])}          # (K, D) each
    optimizer = MemberAdamW(params, [hp.learning_rate for hp in hps], [0.0] * k_flows)  # Adam: no weight decay
    vector = lambda values: torch.tensor(values, dtype=dtype, device=device)  # noqa: E731
    tau = vector([hp.temperature / 2 for hp in hps])
    clip = vector([p.max_grad_norm for p in plans])
    l1_term = tau * vector([hp.l1 for hp in hps]) / m
    samplers = [nz.torch_generator("sampling") for nz in noises]
    draw_streams = [nz.torch_generator("draws", device) for nz in noises]
    generators = [nz.torch_generator("noise", device) for nz in noises]
    steps = [p.steps for p in plans]
    longest, buffers = max(steps), {}
    row_squares = torch.linalg.vector_norm(x_all, dim=1).square()                        # ||x_i||^2, once
    for t in range(longest):
        active = [t < s for s in steps]
        batches = [poisson_indices(plans[k], samplers[k], utility.n).to(device) if active[k]
                   else torch.zeros(0, dtype=torch.long, device=device) for k in range(k_flows)]
        z = torch.stack([torch.randn(m, utility.dim, generator=draw_streams[k], device=device, dtype=dtype)
                         * flows[k].base_sigma if active[k] else torch.zeros(m, utility.dim, dtype=dtype, device=device)
                         for k in range(k_flows)])
        shift = params["shift"][:, None]
        theta = shift + torch.exp(params["log_scale"])[:, None] * z                     # (K, m, D): flow.push
        centred = theta - shift
        sums = {n: torch.zeros_like(v) for n, v in params.items()}
        widest = max(len(b) for b in batches)
        chunk = max(1, CHUNK_VALUES // max(1, widest * features))
        for lo in range(0, k_flows if widest else 0, chunk):
            members = range(lo, min(k_flows, lo + chunk))
            index = torch.zeros(len(members), widest, dtype=torch.long, device=device)
            valid = torch.zeros(len(members), widest, dtype=torch.bool, device=device)
            for row, k in enumerate(members):
                index[row, :len(batches[k])], valid[row, :len(batches[k])] = batches[k], True
            x = _gathered(x_all, index, buffers)                                            # (k, W, F)
            th, cen = theta[lo:lo + len(members)], centred[lo:lo + len(members)]
            logits = torch.baddbmm(th[..., features:], th[..., :features], x.transpose(1, 2))  # (k, m, W)
            prob, y = torch.sigmoid(logits), y_all[index][:, None]
            c = (prob - y) * (2 * prob * (1 - prob) if utility.loss == "l2" else 1.0)
            c = c * (tau[lo:lo + len(members)] / m)[:, None, None]
            sums["shift"][lo:lo + len(members)], sums["log_scale"][lo:lo + len(members)] = clipped_record_sums(
                x, row_squares[index], c, cen, clip[lo:lo + len(members)], valid, buffers)
        for k in range(k_flows):  # draws that are not finite: the per-record closed form, which zeroes such records
            if active[k] and widest and not bool(torch.isfinite(theta[k]).all()):
                flow = gaussian_parameter_flow(utility.dim, hps[k].init_scale).to(device, dtype)
                with torch.no_grad():
                    flow.shift.copy_(params["shift"][k])
                    flow.log_scale.copy_(params["log_scale"][k])
                _, grads = record_gradients(flow, utility, batches[k], z[k], hps[k].temperature)
                clipped, _ = clipped_sum(grads, plans[k].max_grad_norm)
                for n in sums:
                    sums[n][k] = clipped[n]
        sign = torch.sign(theta) * l1_term[:, None, None]                                # the records-free term
        shared = {"shift": sign.sum(1), "log_scale": (sign * centred).sum(1) - 1.0}
        gradient = {}
        for n in params:  # noised as set_noised_gradients does, from each flow's own stream, shift first
            rows = []
            for k in range(k_flows):
                if not active[k]:
                    rows.append(torch.zeros_like(sums[n][k]))
                    continue
                std, expected = plans[k].noise_multiplier * plans[k].max_grad_norm, plans[k].sample_rate * plans[k].n
                noised = (sums[n][k] + gaussian_noise(sums[n][k].shape, std, generators[k], device, dtype)) / expected
                rows.append(noised + shared[n][k] / plans[k].n)
            gradient[n] = torch.stack(rows)
        optimizer.step(gradient, torch.tensor(active, device=device))
        if progress is not None and ((t + 1) % max(longest // 10, 1) == 0 or t + 1 == longest):
            progress(t + 1, longest)
    with torch.no_grad():
        for k, flow in enumerate(flows):
            flow.shift.copy_(params["shift"][k])
            flow.log_scale.copy_(params["log_scale"][k])
    return [flow.eval() for flow in flows]


def clipped_record_sums(x: torch.Tensor, row_squares: torch.Tensor, c: torch.Tensor, centred: torch.Tensor,
                        clip: torch.Tensor, valid: torch.Tensor, buffers: dict | None = None) -> tuple[torch.Tensor,
                                                                                                    torch.Tensor]:
    """Each flow's clipped sums (shift, log_scale) of its records' gradients (:func:`record_gradients`, logistic
    regression) for k flows at once: ``x`` (k, W, F) the records' features, ``row_squares`` (k, W) their squared
    norms, ``c`` (k, m, W) tau/m d l_ij / d logit, ``centred`` (k, m, F + 1) theta_j - mu (the bias last), ``clip``
    (k,) each flow's C, ``valid`` (k, W) which rows are records (padding rows and records whose norm is not finite get
    factor zero). Returns ((k, F + 1), (k, F + 1)).

    g_i^mu = (sum_j c_ij) (x_i, 1) is never formed: its norm is |sum_j c_ij| (||x_i||^2 + 1)^1/2 and its clipped
    sum one product. g_i^rho = (x_i, 1) * a_i, a_i = sum_j c_ij cen_j, is formed once (into ``buffers``, kept by the
    caller from step to step): its norm and its clipped sum read the same computed vectors, so a record adds f_i times
    exactly the gradient whose norm set f_i (no expanded sum whose rounding could hide a cancelling record)."""
    buffers = {} if buffers is None else buffers
    c_sum = c.sum(1)                                                                        # (k, W)
    shape = (*valid.shape, centred.shape[2])
    if buffers.get("a") is None or buffers["a"].numel() < math.prod(shape):
        buffers["a"] = centred.new_empty(math.prod(shape) + math.prod(shape) // 4 + 8)
    a = torch.bmm(c.transpose(1, 2), centred, out=buffers["a"][:math.prod(shape)].view(shape))  # (k, W, F + 1)
    features = x.shape[2]
    torch.mul(a[..., :features], x, out=a[..., :features])                                 # g_i^rho, in place
    norms = torch.sqrt(c_sum.square() * (row_squares + 1) + torch.linalg.vector_norm(a, dim=2).square())
    ok = valid & torch.isfinite(norms)
    factor = torch.where(ok, (clip[:, None] / (norms + 1e-6)).clamp(max=1.0), torch.zeros_like(norms))
    if not bool(torch.isfinite(norms).all()):  # a record whose gradient is not finite adds zero, not 0 * inf
        a = torch.where(ok[..., None], a, torch.zeros_like(a))
        x = torch.where(ok[..., None], x, torch.zeros_like(x))  # its features too (padding rows copy record 0)
    weighted = torch.where(ok, factor * c_sum, torch.zeros_like(c_sum))
    shift = torch.cat([torch.bmm(weighted[:, None], x)[:, 0], weighted.sum(1, keepdim=True)], 1)
    return shift, torch.bmm(factor[:, None], a)[:, 0]


def _gathered(x_all: torch.Tensor, index: torch.Tensor, buffers: dict) -> torch.Tensor:
    """The rows ``index`` (k, W) of ``x_all``, (k, W, F), gathered into a buffer kept from step to step (fresh
    tensors of MBs every step are fresh pages from the OS, whose faults cost as much as the products)."""
    size = index.numel()
    if buffers.get("x") is None or len(buffers["x"]) < size:  # room for wider steps (Poisson sizes vary)
        buffers["x"] = x_all.new_empty((size + size // 4 + 8, x_all.shape[1]))
    return torch.index_select(x_all, 0, index.flatten(), out=buffers["x"][:size]).view(*index.shape, -1)


def flow_mean(flow: ParameterFlow) -> torch.Tensor:
    """The mean (and mode) of the released Gaussian flow: the classifier a bundle ships (post-processing)."""
    return flow.shift.detach().clone()
