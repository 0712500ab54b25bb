"""Train: fit a model on the training split with early stopping on dev; save it in the run."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from prefect import task

from models.device import resolve_device
from models.logistic_regression import LogisticRegression
from models.training import TrainingHyperparameters, fit_binary_classifier
from privehr.config import LogisticRegressionConfig
from tasks.features import linear_inputs
from tasks.run_logging import run_logger

__all__ = ["train_logistic_regression", "load_logistic_regression"]


@task(name="train-logistic-regression")
def train_logistic_regression(features_dir: str, label: str, config: LogisticRegressionConfig,
                              run_dir: str, device: str = "auto") -> str:
    """Non-private LR for ``label``; writes ``models/logistic_regression_<label>.pt`` and its training log."""
    dev = resolve_device(device)
    x_tr, y_tr = linear_inputs(features_dir, "train", label)
    x_dev, y_dev = linear_inputs(features_dir, "dev", label)
    torch.manual_seed(config.seed)
    model = LogisticRegression(x_tr.shape[1]).to(dev)
    hp = TrainingHyperparameters(**config.model_dump())
    result = fit_binary_classifier(model, torch.as_tensor(x_tr, device=dev), torch.as_tensor(y_tr, device=dev),
                                   torch.as_tensor(x_dev, device=dev), torch.as_tensor(y_dev, device=dev), hp)
    out_dir = Path(run_dir) / "models"
    out_dir.mkdir(exist_ok=True)
    path = out_dir / f"logistic_regression_{label}.pt"
    torch.save({"model": "logistic_regression", "label": label, "n_features": x_tr.shape[1],
                "state_dict": {k: v.cpu() for k, v in model.state_dict().items()},
                "hyperparameters": config.model_dump(), "privacy": "none (non-private baseline)"}, path)
    (out_dir / f"logistic_regression_{label}.log.json").write_text(json.dumps(
        {"best_epoch": result.best_epoch, "best_dev_auroc": result.best_dev_auroc,
         "epochs_run": result.epochs_run, "device": str(dev), "history": result.history}, indent=1))
    run_logger().info("train LR %s: %d epochs on %s, best dev AUROC %.3f at epoch %d", label,
                      result.epochs_run, dev, result.best_dev_auroc, result.best_epoch)
    return str(path)


def load_logistic_regression(path: str) -> LogisticRegression:
    saved = torch.load(path, map_location="cpu", weights_only=True)
    model = LogisticRegression(saved["n_features"])
    model.load_state_dict(saved["state_dict"])
    return model
