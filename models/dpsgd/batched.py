"""DP-SGD for a group of releases at once: K models of one architecture trained as one batched model.

A grid trains many small models on the same records: seeds x target epsilons of one (label, model, loss). Trained
one by one, a GRU-D fit of a few thousand weights is bound by Python and kernel launches (a DP-SGD step costs about
the same on a GPU whatever the batch), so a GPU is mostly idle. Here every step runs the K members together, in one
of two ways (``per_sample``):

* ``ghost`` (where every layer can be stacked: GRU-D, logistic regression): the members are stacked into one module
  (:mod:`privehr.models.classifiers.stacking`), their batches one after the other along the batch axis, and ghost
  clipping (:mod:`privehr.models.dpsgd.ghost_clipping`) gives every row's gradient norm from its layer inputs and
  output gradients and each member's clipped sum by one batched product per layer: the single trainer's
  computation, once for the group;
* ``functorch``: per-sample gradients of all K x B (member, record) pairs by a ``vmap`` over members of a ``vmap``
  over records of ``torch.func.grad``, materialised (in chunks of members below :data:`MAX_GRADIENT_ELEMENTS`).

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

What it costs: ghost clipping keeps the K x B rows' layer inputs and output gradients (as the single trainer keeps
B); torch.func materialises K x B x (parameters) floats per step. Measured (bench/batched_grid.py): on an H200 a demo
family of 12 GRU-D fits trains 5x faster than one by one, 110 fits 10x; on 2 CPU cores, as the pipeline runs fits
there, 1.5x for 12 GRU-D fits and 1.9x for 12 logistic regressions, but 0.8x for 48 GRU-D fits, whose intermediates
outgrow the caches: so on CPU the grid batches groups of at most 12 (``training.batched``).

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
from privehr.models.classifiers.stacking import MemberAdamW, same_architecture, stack_models, stackable, unstack_into
from privehr.models.dpsgd.ghost_clipping import clipped_gradient_sum
from privehr.models.dpsgd.trainer import DPSGDHyperparameters, DPSGDResult
from privehr.models.dpsgd.noisy_step import poisson_indices
from privehr.models.privacy.randomness import NoiseSource, gaussian_noise
from privehr.models.privacy.release_plan import ReleasePlan

__all__ = ["train_dp_sgd_batched", "PER_SAMPLE", "MAX_GRADIENT_ELEMENTS"]

#: how a batched group takes its per-sample gradient norms and clipped sums
PER_SAMPLE = ("auto", "ghost", "functorch")

#: the per-sample gradients of one chunk of members hold at most this many floats (256 Mi, 1 GiB in float32)
MAX_GRADIENT_ELEMENTS = 1 << 28


def _refuse_mixing(model: nn.Module) -> None:
    """A layer that mixes the records of a batch would leak across them: no per-sample gradient exists."""
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            raise ValueError(f"{type(model).__name__}.{name or 'model'} is a batch norm: it mixes the records of a "
                             "batch, so DP-SGD cannot clip per record")


def train_dp_sgd_batched(models: Sequence[nn.Module], x_train: tuple[torch.Tensor, ...], y_train: torch.Tensor,
                         hps: Sequence[DPSGDHyperparameters], plans: Sequence[ReleasePlan],
                         noises: Sequence[NoiseSource], loss: str = "bce",
                         progress: Callable[[int, int], None] | None = None,
                         per_sample: str = "auto") -> list[tuple[nn.Module, DPSGDResult]]:
    """Train the K ``models`` (one architecture, on one device) on the same records, member k by ``plans[k]`` with
    ``hps[k]`` and ``noises[k]``; return [(trained module, result)] in order (each module is trained in place).

    ``x_train`` are the models' positional inputs (batch first). ``progress(done, total)``, if given, is called after
    every epoch of the longest member's plan. ``per_sample``: "ghost" (the members stacked into one module,
    :mod:`privehr.models.classifiers.stacking`, clipped by ghost clipping), "functorch" (per-sample gradients by
    torch.func), or "auto": ghost where every layer can be stacked.
    """
    models = list(models)
    k_models = len(models)
    if not (k_models == len(hps) == len(plans) == len(noises)) or k_models == 0:
        raise ValueError(f"{k_models} models, {len(hps)} hyperparameters, {len(plans)} plans, {len(noises)} noises: "
                         "one of each per member")
    if per_sample not in PER_SAMPLE:
        raise ValueError(f"unknown per-sample gradients {per_sample!r}: one of {PER_SAMPLE}")
    if not same_architecture(models):
        raise ValueError("the models of a batched fit must share one architecture (class, parameter and buffer "
                         "names, shapes and dtypes)")
    for m in models:
        _refuse_mixing(m)
        m.train()
    x_train = x_train if isinstance(x_train, tuple) else (x_train,)
    if per_sample == "auto":
        per_sample = "ghost" if stackable(models[0]) else "functorch"
    engine = (_GhostEngine if per_sample == "ghost" else _FunctorchEngine)(models, x_train, y_train, loss)
    params, device, records = engine.params, y_train.device, len(y_train)
    dtype = next(iter(params.values())).dtype
    optimizer = MemberAdamW(params, [h.learning_rate for h in hps], [h.weight_decay for h in hps])
    clip = torch.tensor([p.max_grad_norm for p in plans], dtype=dtype, device=device)
    samplers = [nz.torch_generator("sampling") for nz in noises]
    generators = [nz.torch_generator("noise", device) for nz in noises]
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
        if widest:
            index = torch.zeros(k_models, widest, dtype=torch.long)
            valid = torch.zeros(k_models, widest, dtype=torch.bool)
            for k, b in enumerate(batches):
                index[k, :len(b)], valid[k, :len(b)] = b, True
            index, valid = index.to(device), valid.to(device)
            sums, losses = engine.clipped_sums(index, valid, clip, [len(b) for b in batches])
            loss_sums += torch.where(valid, losses, torch.zeros_like(losses)).sum(1)
        else:
            sums = {n: torch.zeros_like(v) for n, v in params.items()}
        gradient = {}
        for n in params:  # the noised mean gradient of every active member, its noise from its own stream
            rows = []
            for k in range(k_models):
                if not active[k]:
                    rows.append(torch.zeros_like(sums[n][k]))
                    continue
                std = plans[k].noise_multiplier * plans[k].max_grad_norm
                noise = gaussian_noise(sums[n][k].shape, std, generators[k], device, dtype)
                rows.append((sums[n][k] + noise) / (plans[k].sample_rate * plans[k].n))
            gradient[n] = torch.stack(rows)
        optimizer.step(gradient, torch.tensor(active, device=device))
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
    engine.write_back(models)
    return [(model, DPSGDResult(plan=plans[k], noise_source=noises[k].kind, history=history[k]))
            for k, model in enumerate(models)]


class _GhostEngine:
    """The members stacked into one module (member-major rows): norms and clipped sums by ghost clipping, per-sample
    thresholds C_k on member k's rows and 0 on padding rows, whose inputs are zeros."""

    def __init__(self, models, x_train, y_train, loss):
        self.stacked = stack_models(models)
        self.params = dict(self.stacked.named_parameters())
        self.x_train, self.y_train, self.members = x_train, y_train, len(models)
        loss_fn = per_sample_loss(loss)
        self.losses_fn = lambda m, target, *xs: loss_fn(m(*xs), target)
        self._rows: list[torch.Tensor | None] = [None] * (len(x_train) + 1)

    def _gather(self, index, lengths):
        """The K x widest member-major rows of every input and of the target, padding rows zero, gathered into
        buffers kept from step to step: a fresh tensor of tens of MB per step is fresh pages from the OS, and their
        faults cost a batched logistic regression half its step on CPU (bench/README.md)."""
        members, widest = index.shape
        flat = index.flatten()
        padding = torch.tensor([k * widest + j for k, n in enumerate(lengths) for j in range(n, widest)],
                               dtype=torch.long).to(flat.device)  # one index for all inputs: one kernel each
        out = []
        for i, source in enumerate((*self.x_train, self.y_train)):
            buffer = self._rows[i]
            if buffer is None or len(buffer) < len(flat):  # room for a wider step than this one (Poisson sizes vary)
                buffer = self._rows[i] = source.new_empty((len(flat) + len(flat) // 4 + members, *source.shape[1:]))
            rows = torch.index_select(source, 0, flat, out=buffer[:len(flat)])
            if len(padding):
                rows.index_fill_(0, padding, 0)
            out.append(rows)
        return out

    def clipped_sums(self, index, valid, clip, lengths):
        *batch, target = self._gather(index, lengths)
        thresholds = torch.where(valid, clip[:, None], torch.zeros_like(clip[:, None])).flatten()
        losses, _, sums = clipped_gradient_sum(self.stacked, self.losses_fn, (target, *batch), thresholds)
        names = {p: n for n, p in self.params.items()}
        return {names[p]: total for p, total in sums.items()}, losses.view(self.members, -1)

    def write_back(self, models):
        unstack_into(self.stacked, models)


class _FunctorchEngine:
    """Per-sample gradients of every (member, record) by a vmap over members of a vmap over records of
    ``torch.func.grad``, materialised, in chunks of members below :data:`MAX_GRADIENT_ELEMENTS`."""

    def __init__(self, models, x_train, y_train, loss):
        params, self.buffers = stack_module_state(models)
        self.params = {n: params[n].detach().clone() for n, p in models[0].named_parameters() if p.requires_grad}
        self.x_train, self.y_train = x_train, y_train
        base = copy.deepcopy(models[0]).to("meta")
        loss_fn = per_sample_loss(loss)

        def one(p, b, target, *xs):  # one record through one member: the single trainer's per-sample loss
            out = functional_call(base, (p, b), tuple(x[None] for x in xs))
            return loss_fn(out, target[None]).sum()

        self.per_sample = vmap(vmap(grad_and_value(one), in_dims=(None, None, 0, *[0] * len(x_train))),
                               in_dims=(0, 0, 0, *[0] * len(x_train)))
        self.per_member = sum(v[0].numel() for v in self.params.values())

    def clipped_sums(self, index, valid, clip, lengths):
        members, widest = index.shape
        sums = {n: torch.zeros_like(v) for n, v in self.params.items()}
        losses_out = torch.zeros(members, widest, dtype=clip.dtype, device=clip.device)
        chunk = max(1, MAX_GRADIENT_ELEMENTS // max(1, widest * self.per_member))
        for lo in range(0, members, chunk):
            hi = min(members, lo + chunk)
            idx = index[lo:hi]
            grads, losses = self.per_sample({n: v[lo:hi] for n, v in self.params.items()},
                                            {n: v[lo:hi] for n, v in self.buffers.items()},
                                            self.y_train[idx], *(x[idx] for x in self.x_train))
            norms = torch.sqrt(sum(torch.einsum("kbp,kbp->kb", f, f) for f in (g.flatten(2) for g in grads.values())))
            ok = valid[lo:hi] & torch.isfinite(norms)
            factor = torch.where(ok, (clip[lo:hi, None] / (norms + 1e-6)).clamp(max=1.0), torch.zeros_like(norms))
            finite = bool(torch.isfinite(norms).all())  # else a non-finite g_i would make 0 * inf a NaN
            for n, g in grads.items():
                if not finite:
                    g = torch.where(ok.view(*ok.shape, *[1] * (g.dim() - 2)), g, torch.zeros_like(g))
                sums[n][lo:hi] = torch.einsum("kb,kb...->k...", factor, g)
            losses_out[lo:hi] = losses.detach()
        return sums, losses_out

    def write_back(self, models):
        with torch.no_grad():
            for k, model in enumerate(models):
                for n, p in model.named_parameters():
                    if n in self.params:
                        p.copy_(self.params[n][k])
