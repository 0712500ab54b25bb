"""Non-private minibatch training of a binary classifier with early stopping on dev AUROC.

Minimises the mean binary cross-entropy  L(theta) = -1/B sum_i [y_i log p_i + (1 - y_i) log(1 - p_i)]
with Adam and decoupled weight decay (AdamW), keeps the parameters of the epoch with the best dev
AUROC, and stops after ``patience`` epochs without improvement.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from models.metrics import binary_metrics

__all__ = ["TrainingHyperparameters", "TrainingResult", "fit_binary_classifier", "predict_proba"]


@dataclass(frozen=True)
class TrainingHyperparameters:
    learning_rate: float = 1e-3
    weight_decay: float = 1e-2
    batch_size: int = 128
    max_epochs: int = 50
    patience: int = 8
    seed: int = 0


@dataclass
class TrainingResult:
    best_epoch: int
    best_dev_auroc: float
    epochs_run: int
    history: list[dict] = field(default_factory=list)


@torch.no_grad()
def predict_proba(model: nn.Module, x: torch.Tensor, batch_size: int = 4096) -> np.ndarray:
    model.eval()
    out = [torch.sigmoid(model(x[i:i + batch_size])) for i in range(0, len(x), batch_size)]
    return torch.cat(out).cpu().numpy() if out else np.empty(0)


def fit_binary_classifier(model: nn.Module, x_train: torch.Tensor, y_train: torch.Tensor,
                          x_dev: torch.Tensor, y_dev: torch.Tensor,
                          hp: TrainingHyperparameters) -> TrainingResult:
    """Train ``model`` (returning logits) in place; on return it holds the best-dev-AUROC parameters."""
    generator = torch.Generator().manual_seed(hp.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=hp.learning_rate, weight_decay=hp.weight_decay)
    loss_fn = nn.BCEWithLogitsLoss()
    best = (-np.inf, 0, {k: v.detach().clone() for k, v in model.state_dict().items()})
    history, stale = [], 0
    y_dev_np = y_dev.cpu().numpy()
    for epoch in range(1, hp.max_epochs + 1):
        model.train()
        order = torch.randperm(len(x_train), generator=generator).to(x_train.device)
        total = 0.0
        for start in range(0, len(order), hp.batch_size):
            idx = order[start:start + hp.batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x_train[idx]), y_train[idx])
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(idx)
        dev = binary_metrics(y_dev_np, predict_proba(model, x_dev))
        dev_auroc = dev["auroc"] if np.isfinite(dev["auroc"]) else -total  # no dev positives: use loss
        history.append({"epoch": epoch, "train_loss": total / len(order), "dev_auroc": dev["auroc"]})
        if dev_auroc > best[0]:
            best, stale = (dev_auroc, epoch, {k: v.detach().clone() for k, v in model.state_dict().items()}), 0
        else:
            stale += 1
            if stale >= hp.patience:
                break
    model.load_state_dict(best[2])
    return TrainingResult(best_epoch=best[1], best_dev_auroc=float(best[0]), epochs_run=len(history),
                          history=history)
