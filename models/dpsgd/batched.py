"""DP-SGD for a group of releases at once: K models of one architecture trained as one batched model.

A grid trains many small models on the same records: seeds x target epsilons of one (label, model, loss). Trained
one by one, a GRU-D fit of a few thousand weights is bound by Python and kernel launches (a DP-SGD step costs about
the same on an H100 whatever the batch), so neither a GPU nor two CPU cores are used. Here the K models' parameters
are stacked along a leading axis (``torch.func.stack_module_state``) and every step runs them together: per-sample
gradients of all K x B (model, record) pairs by one ``vmap`` over models of a ``vmap`` over records of
``torch.func.grad`` (the same per-sample gradients the single trainer is tested against), clipping, noise and a
batched AdamW.

Nothing about a release changes; batching is how it is computed, not what is released. Each member k has

* its own plan (q_k, sigma_k, T_k, C_k): it takes exactly T_k steps, and after them its weights and optimizer state
  stay as they are while the others go on;
* its own Poisson sample, from its own sampling stream (one uniform per record, as
  :func:`privehr.models.dpsgd.noisy_step.poisson_indices` draws; the batches are padded to the largest of the step,
  and a padded row's weight is zero, so it adds nothing to any sum);
* its own per-sample clipping at C_k, and its own noise N(0, sigma_k^2 C_k^2 I) from its own noise stream, drawn as
  Opacus's secure mode draws it (:func:`privehr.models.privacy.randomness.gaussian_noise`), divided by the plan's
  expected batch q_k n_k, never by the realised one;
* its own learning rate and weight decay (decoupled, AdamW: post-processing).

With the same noise streams, K members take the same steps as K runs of
:func:`privehr.models.dpsgd.trainer.train_dp_sgd` (tested to float rounding), so the accounting of each member is the
single trainer's: the trainer checks that every member took exactly its plan's steps.

What it costs: the per-sample gradients are materialised, K x B_max x (parameters) floats per step (a demo GRU-D
group of 12 at batch 128: about 200 MB); records go through in chunks of members when that would exceed
:data:`MAX_GRADIENT_ELEMENTS`.

>>> from privehr.models.classifiers.logistic_regression import LogisticRegression
>>> from privehr.models.dpsgd.trainer import DPSGDHyperparameters
>>> x, y = torch.randn(200, 4), (torch.rand(200) < 0.5).float()
>>> plans = [ReleasePlan.for_epochs(200, batch_size=50, epochs=2, target_epsilon=e, delta=1e-5) for e in (1.0, 4.0)]
>>> fits = train_dp_sgd_batched([LogisticRegression(4), LogisticRegression(4)], (x,), y,
...                             [DPSGDHyperparameters(0.05, 0.0)] * 2, plans,
...                             [NoiseSource.reproducible("doctest", k) for k in range(2)])
>>> [(len(result.history), result.noise_source) for _, result in fits]
[(2, 'reproducible'), (2, 'reproducible')]
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

from privehr.models.classifiers.losses import per_sample_loss
from privehr.models.dpsgd.trainer import DPSGDHyperparameters, DPSGDResult
from privehr.models.dpsgd.noisy_step import poisson_indices
from privehr.models.privacy.randomness import NoiseSource, gaussian_noise
from privehr.models.privacy.release_plan import ReleasePlan

__all__ = ["train_dp_sgd_batched", "same_architecture", "MAX_GRADIENT_ELEMENTS", "BETAS", "EPS"]

#: the per-sample gradients of one chunk of members hold at most this many floats (256 Mi, 1 GiB in float32)
MAX_GRADIENT_ELEMENTS = 1 << 28
#: AdamW's defaults in torch.optim.AdamW (what the single trainer uses)
BETAS, EPS = (0.9, 0.999), 1e-8


def same_architecture(models: Sequence[nn.Module]) -> bool:
    """Whether ``models`` can be stacked: one class, and the same names, shapes and dtypes of parameters and buffers."""
    def signature(m):
        return type(m), [(k, v.shape, v.dtype, v.requires_grad if isinstance(v, nn.Parameter) else None)
                         for k, v in [*m.named_parameters(), *m.named_buffers()]]
    first = signature(models[0])
    return all(signature(m) == first for m in models[1:])


def _refuse_mixing(model: nn.Module) -> None:
    """A layer that mixes the records of a batch would leak across them: no per-sample gradient exists."""
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            raise ValueError(f"{type(model).__name__}.{name or 'model'} is a batch norm: it mixes the records of a "
                             "batch, so DP-SGD cannot clip per record")


def train_dp_sgd_batched(models: Sequence[nn.Module], x_train: tuple[torch.Tensor, ...], y_train: torch.Tensor,
                         hps: Sequence[DPSGDHyperparameters], plans: Sequence[ReleasePlan],
                         noises: Sequence[NoiseSource], loss: str = "bce",
                         progress: Callable[[int, int], None] | None = None) -> list[tuple[nn.Module, DPSGDResult]]:
    """Train the K ``models`` (one architecture, on one device) on the same records, member k by ``plans[k]`` with
    ``hps[k]`` and ``noises[k]``; return [(trained module, result)] in order (each module is trained in place).

    ``x_train`` are the models' positional inputs (batch first). ``progress(done, total)``, if given, is called after
    every epoch of the longest member's plan.
    """
    models = list(models)
    k_models = len(models)
    if not (k_models == len(hps) == len(plans) == len(noises)) or k_models == 0:
        raise ValueError(f"{k_models} models, {len(hps)} hyperparameters, {len(plans)} plans, {len(noises)} noises: "
                         "one of each per member")
    if not same_architecture(models):
        raise ValueError("the models of a batched fit must share one architecture (class, parameter and buffer "
                         "names, shapes and dtypes)")
    for m in models:
        _refuse_mixing(m)
        m.train()
    x_train = x_train if isinstance(x_train, tuple) else (x_train,)
    device, records = y_train.device, len(y_train)
    params, buffers = stack_module_state(models)
    names = [n for n, _ in models[0].named_parameters() if _.requires_grad]
    params = {n: params[n].detach().clone() for n in names}
    base = copy.deepcopy(models[0]).to("meta")
    loss_fn = per_sample_loss(loss)

    def one(p, b, target, *xs):  # one record through one member: the single trainer's per-sample loss
        out = functional_call(base, (p, b), tuple(x[None] for x in xs))
        return loss_fn(out, target[None]).sum()

    # grads and losses of every (member, record): vmap over members of a vmap over the member's records
    per_sample = vmap(vmap(grad_and_value(one), in_dims=(None, None, 0, *[0] * len(x_train))),
                      in_dims=(0, 0, 0, *[0] * len(x_train)))
    dtype = params[names[0]].dtype
    lr = torch.tensor([h.learning_rate for h in hps], dtype=dtype, device=device)
    wd = torch.tensor([h.weight_decay for h in hps], dtype=dtype, device=device)
    clip = torch.tensor([p.max_grad_norm for p in plans], dtype=dtype, device=device)
    exp_avg = {n: torch.zeros_like(v) for n, v in params.items()}
    exp_avg_sq = {n: torch.zeros_like(v) for n, v in params.items()}
    samplers = [nz.torch_generator("sampling") for nz in noises]
    generators = [nz.torch_generator("noise", device) for nz in noises]
    per_member = sum(v[0].numel() for v in params.values())
    steps = [p.steps for p in plans]
    taken = [0] * k_models
    history: list[list[dict]] = [[] for _ in range(k_models)]
    epoch_stats = [[0, 0] for _ in range(k_models)]  # records, empty batches this epoch
    loss_sums = torch.zeros(k_models, dtype=dtype, device=device)  # on the device: read once an epoch
    longest = max(range(k_models), key=lambda k: steps[k])
    per_epoch = plans[longest].steps_per_epoch
    epochs = -(-steps[longest] // per_epoch)
    for t in range(max(steps)):
        active = [t < s for s in steps]
        batches = [poisson_indices(plans[k], samplers[k], records) if active[k]
                   else torch.zeros(0, dtype=torch.long) for k in range(k_models)]
        widest = max(len(b) for b in batches)
        sums = {n: torch.zeros_like(v) for n, v in params.items()}
        if widest:
            index = torch.zeros(k_models, widest, dtype=torch.long)
            valid = torch.zeros(k_models, widest, dtype=torch.bool)
            for k, b in enumerate(batches):
                index[k, :len(b)], valid[k, :len(b)] = b, True
            index, valid = index.to(device), valid.to(device)
            chunk = max(1, MAX_GRADIENT_ELEMENTS // max(1, widest * per_member))
            for lo in range(0, k_models, chunk):
                hi = min(k_models, lo + chunk)
                idx = index[lo:hi]
                grads, losses = per_sample({n: v[lo:hi] for n, v in params.items()},
                                           {n: v[lo:hi] for n, v in buffers.items()},
                                           y_train[idx], *(x[idx] for x in x_train))
                norms = torch.sqrt(sum(torch.einsum("kbp,kbp->kb", f, f) for f in (g.flatten(2) for g in grads.values())))
                ok = valid[lo:hi] & torch.isfinite(norms)
                factor = torch.where(ok, (clip[lo:hi, None] / (norms + 1e-6)).clamp(max=1.0),
                                     torch.zeros_like(norms))
                finite = bool(torch.isfinite(norms).all())  # else a non-finite g_i would make 0 * inf a NaN
                for n, g in grads.items():
                    if not finite:
                        g = torch.where(ok.view(*ok.shape, *[1] * (g.dim() - 2)), g, torch.zeros_like(g))
                    sums[n][lo:hi] = torch.einsum("kb,kb...->k...", factor, g)
                loss_sums[lo:hi] += torch.where(valid[lo:hi], losses.detach(), torch.zeros_like(losses)).sum(1)
        gradient = {}
        for n in names:  # the noised mean gradient of every active member, its noise from its own stream
            rows = []
            for k in range(k_models):
                if not active[k]:
                    rows.append(torch.zeros_like(sums[n][k]))
                    continue
                std = plans[k].noise_multiplier * plans[k].max_grad_norm
                noise = gaussian_noise(sums[n][k].shape, std, generators[k], device, dtype)
                rows.append((sums[n][k] + noise) / (plans[k].sample_rate * plans[k].n))
            gradient[n] = torch.stack(rows)
        _adamw_step(params, gradient, exp_avg, exp_avg_sq, lr, wd, t + 1,
                    torch.tensor(active, device=device))
        for k in range(k_models):
            if active[k]:
                taken[k] += 1
                epoch_stats[k][0] += len(batches[k])
                epoch_stats[k][1] += len(batches[k]) == 0
                if taken[k] % plans[k].steps_per_epoch == 0 or taken[k] == steps[k]:
                    seen, empty = epoch_stats[k]
                    history[k].append({"epoch": len(history[k]) + 1, "train_loss": float(loss_sums[k]) / max(seen, 1),
                                       "examples": seen, "empty_batches": empty})
                    epoch_stats[k], loss_sums[k] = [0, 0], 0.0
        if progress is not None and active[longest] and ((t + 1) % per_epoch == 0 or t + 1 == steps[longest]):
            progress(-(-(t + 1) // per_epoch), epochs)
    if taken != steps:
        raise RuntimeError(f"the batched trainer took {taken} steps, the plans {steps}")
    out = []
    with torch.no_grad():
        for k, model in enumerate(models):
            for n, p in model.named_parameters():
                if n in params:
                    p.copy_(params[n][k])
            out.append((model, DPSGDResult(plan=plans[k], noise_source=noises[k].kind, history=history[k])))
    return out


def _adamw_step(params, grads, exp_avg, exp_avg_sq, lr, wd, step: int, active: torch.Tensor) -> None:
    """torch.optim.AdamW's update (decoupled weight decay, bias corrections) of every active member, each at its own
    learning rate and weight decay; inactive members (their plan's steps taken) keep their weights and state. All
    active members are at the same step count: every member starts at step 1 and stops at its T."""
    beta1, beta2 = BETAS
    correction1, correction2 = 1 - beta1 ** step, 1 - beta2 ** step
    for n, p in params.items():
        shape = (-1, *[1] * (p.dim() - 1))
        on = active.view(shape)
        g = grads[n]
        new_p = p * (1 - lr * wd).view(shape)
        m = exp_avg[n].lerp(g, 1 - beta1)
        v = exp_avg_sq[n] * beta2 + (1 - beta2) * g * g
        denom = (v.sqrt() / math.sqrt(correction2)) + EPS
        new_p = new_p - (lr / correction1).view(shape) * m / denom
        params[n] = torch.where(on, new_p, p)
        exp_avg[n] = torch.where(on, m, exp_avg[n])
        exp_avg_sq[n] = torch.where(on, v, exp_avg_sq[n])
