"""Non-private minibatch training of a binary classifier.

Minimises the mean loss (BCE or l2, :mod:`privehr.models.classifiers.losses`) with AdamW (decoupled weight decay).
With dev data it keeps the parameters of the epoch with the best dev score and stops after
``patience`` epochs without improvement; the score is the dev AUROC (``early_stopping="auroc"``) or
minus the dev loss, the training loss on the dev rows (``"loss"``, a proper scoring rule over every
dev row: far less noisy than the AUROC when the dev split holds a few dozen positives). Without dev
data it trains for exactly ``max_epochs`` (the final fit on train+dev, with the epoch count chosen
on dev).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from privehr.core.config import NonPrivateConfig
from privehr.models.classifiers.losses import binary_loss
from privehr.models.evaluation.metrics import binary_metrics

__all__ = ["TrainingHyperparameters", "TrainingResult", "fit_binary_classifier", "predict_proba", "predict_logits",
           "Inputs"]

Inputs = tuple[torch.Tensor, ...]  # the model's positional inputs, each with the batch first


_DEFAULTS = NonPrivateConfig()  # the defaults live in the config, once


@dataclass(frozen=True)
class TrainingHyperparameters:
    learning_rate: float = _DEFAULTS.learning_rate
    weight_decay: float = _DEFAULTS.weight_decay
    batch_size: int = _DEFAULTS.batch_size
    max_epochs: int = _DEFAULTS.max_epochs
    patience: int = _DEFAULTS.patience
    seed: int = 0
    early_stopping: str = _DEFAULTS.early_stopping  # "auroc" | "loss"

    def __post_init__(self):
        if self.early_stopping not in ("auroc", "loss"):
            raise ValueError(f"early_stopping must be 'auroc' or 'loss', not {self.early_stopping!r}")


@dataclass
class TrainingResult:
    best_epoch: int
    best_dev_auroc: float  # at best_epoch, whichever criterion chose it
    epochs_run: int
    history: list[dict] = field(default_factory=list)


def _as_inputs(x) -> Inputs:
    return x if isinstance(x, tuple) else (x,)


@torch.no_grad()
def predict_logits(model: nn.Module, x, batch_size: int = 4096) -> torch.Tensor:
    """model(x) in eval mode for inputs ``x`` (a tensor or a tuple of tensors), in batches, without a graph."""
    x = _as_inputs(x)
    model.eval()
    out = [model(*(t[i:i + batch_size] for t in x)) for i in range(0, len(x[0]), batch_size)]
    return torch.cat(out) if out else torch.empty(0, device=x[0].device)


def predict_proba(model: nn.Module, x, batch_size: int = 4096) -> np.ndarray:
    """sigma(model(x)) for inputs ``x`` (a tensor or a tuple of tensors), in batches."""
    return torch.sigmoid(predict_logits(model, x, batch_size)).cpu().numpy()


def fit_binary_classifier(model: nn.Module, x_train, y_train: torch.Tensor, x_dev=None,
                          y_dev: torch.Tensor | None = None, hp: TrainingHyperparameters = TrainingHyperparameters(),
                          loss: str = "bce", progress=None) -> TrainingResult:
    """Train ``model`` (returning logits) in place; with dev data it ends holding the best-dev parameters.

    ``progress(done, total)``, if given, is called after every epoch."""
    x_train = _as_inputs(x_train)
    generator = torch.Generator().manual_seed(hp.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=hp.learning_rate, weight_decay=hp.weight_decay)
    loss_fn = binary_loss(loss)
    best = (-np.inf, 0, None, float("nan"))  # (score, epoch, parameters, dev AUROC)
    history, stale = [], 0
    n = len(x_train[0])
    for epoch in range(1, hp.max_epochs + 1):
        model.train()
        order = torch.randperm(n, generator=generator).to(x_train[0].device)
        total = 0.0
        for start in range(0, n, hp.batch_size):
            idx = order[start:start + hp.batch_size]
            optimizer.zero_grad(set_to_none=True)
            batch_loss = loss_fn(model(*(t[idx] for t in x_train)), y_train[idx])
            batch_loss.backward()
            optimizer.step()
            total += float(batch_loss.detach()) * len(idx)
        record = {"epoch": epoch, "train_loss": total / n}
        if x_dev is not None:
            logits = predict_logits(model, x_dev)
            record["dev_auroc"] = binary_metrics(y_dev.cpu().numpy(), torch.sigmoid(logits).cpu().numpy())["auroc"]
            record["dev_loss"] = float(loss_fn(logits, y_dev))
            if hp.early_stopping == "auroc" and np.isfinite(record["dev_auroc"]):
                score = record["dev_auroc"]
            else:  # the loss, or a one-class dev split where the AUROC is undefined
                score = -record["dev_loss"] if np.isfinite(record["dev_loss"]) else -record["train_loss"]
            if score > best[0]:
                state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                best, stale = (score, epoch, state, record["dev_auroc"]), 0
            else:
                stale += 1
        history.append(record)
        if progress is not None:
            progress(epoch, hp.max_epochs)
        if x_dev is not None and stale >= hp.patience:
            break
    if best[2] is not None:
        model.load_state_dict(best[2])
        return TrainingResult(best_epoch=best[1], best_dev_auroc=float(best[3]), epochs_run=len(history),
                              history=history)
    return TrainingResult(best_epoch=len(history), best_dev_auroc=float("nan"), epochs_run=len(history),
                          history=history)
