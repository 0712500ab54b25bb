"""Non-private fits of one grid cell trained together: K models of one architecture (its seeds) stacked into one
module (:mod:`privehr.models.classifiers.stacking`), each on its own shuffled batches, each with its own AdamW state.

A final non-private fit trains a fixed number of epochs (the one its search chose on dev) on train+dev, one model per
seed; one at a time, a GRU-D of a few thousand weights is bound by Python and kernel launches. Here every step runs the
K members together: member k's batch (its own permutation of the records, drawn from its own seed as
:func:`~privehr.models.classifiers.training.fit_binary_classifier` draws it) occupies rows k b ... (k + 1) b - 1 of one
stacked forward, the loss is the sum of the members' batch means (a member's weights see only its own rows, so each
gets exactly its own gradient), and AdamW (decoupled weight decay, torch's defaults) updates every member at its own
learning rate and weight decay. With the same seeds, K = 1 takes the single trainer's steps to float rounding (tested).

What it does not do: early stopping on a dev split (each member would keep its own best state: the search does that,
one configuration at a time) and batch norm (it mixes the rows of a batch, so the members would mix too): both train
one model at a time (:func:`fits_together` says which).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from privehr.models.classifiers.losses import per_sample_loss
from privehr.models.classifiers.training import TrainingHyperparameters, TrainingResult
from privehr.models.classifiers.stacking import MemberAdamW, same_architecture, stack_models, stackable, unstack_into

__all__ = ["fits_together", "fit_binary_classifiers_batched"]


def fits_together(models: Sequence[nn.Module], hps: Sequence[TrainingHyperparameters]) -> bool:
    """Whether :func:`fit_binary_classifiers_batched` can train these models with these hyperparameters together:
    one architecture whose every layer stacks (no batch norm), one batch size and one epoch count."""
    return (same_architecture(models) and stackable(models[0])
            and not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in models[0].modules())
            and len({(hp.batch_size, hp.max_epochs) for hp in hps}) == 1)


def fit_binary_classifiers_batched(models: Sequence[nn.Module], x_train, y_train: torch.Tensor,
                                   hps: Sequence[TrainingHyperparameters], loss: str = "bce",
                                   progress: Callable[[int, int], None] | None = None) -> list[TrainingResult]:
    """Train the K ``models`` (returning logits) in place on the same records, member k with ``hps[k]`` (its seed
    shuffles its batches) for the shared ``max_epochs``, without a dev split; one result per member, in order.
    ``progress(done, total)``, if given, is called after every epoch."""
    models, hps = list(models), list(hps)
    if len(models) != len(hps) or not models:
        raise ValueError(f"{len(models)} models and {len(hps)} hyperparameters: one of each per member")
    if not fits_together(models, hps):
        raise ValueError("the members of a batched non-private fit need one stackable architecture without batch norm, "
                         "one batch size and one epoch count")
    x_train = x_train if isinstance(x_train, tuple) else (x_train,)
    k_models, n, device = len(models), len(y_train), y_train.device
    batch_size, epochs = hps[0].batch_size, hps[0].max_epochs
    stacked = stack_models(models).train()
    params = {name: p for name, p in stacked.named_parameters() if p.requires_grad}
    dtype = next(iter(params.values())).dtype
    optimizer = MemberAdamW(params, [hp.learning_rate for hp in hps], [hp.weight_decay for hp in hps])
    generators = [torch.Generator().manual_seed(hp.seed) for hp in hps]
    losses_of = per_sample_loss(loss)
    histories: list[list[dict]] = [[] for _ in range(k_models)]
    for epoch in range(1, epochs + 1):
        orders = torch.stack([torch.randperm(n, generator=g) for g in generators]).to(device)  # (K, n)
        totals = torch.zeros(k_models, dtype=dtype, device=device)
        for start in range(0, n, batch_size):
            rows = orders[:, start:start + batch_size].flatten()                                # member-major
            means = losses_of(stacked(*(t[rows] for t in x_train)), y_train[rows]).view(k_models, -1).mean(1)
            for p in params.values():
                p.grad = None
            means.sum().backward()  # member k's weights see only its rows: each its own batch-mean gradient
            optimizer.step({name: p.grad for name, p in params.items()})
            totals += means.detach() * (len(rows) // k_models)
        for k in range(k_models):
            histories[k].append({"epoch": epoch, "train_loss": float(totals[k]) / n})
        if progress is not None:
            progress(epoch, epochs)
    unstack_into(stacked, models)
    return [TrainingResult(best_epoch=epochs, best_dev_auroc=float("nan"), epochs_run=epochs, history=history)
            for history in histories]
