"""Evaluate: test-split AUROC and AUPRC of a saved model."""

from __future__ import annotations

import torch
from prefect import task

from models.metrics import binary_metrics
from models.training import predict_proba
from tasks.features import linear_inputs
from tasks.run_logging import run_logger
from tasks.train import load_logistic_regression

__all__ = ["evaluate_logistic_regression"]


@task(name="evaluate")
def evaluate_logistic_regression(features_dir: str, model_path: str, label: str) -> dict:
    """Aggregate test metrics (no per-patient output) for one label."""
    x, y = linear_inputs(features_dir, "test", label)
    scores = predict_proba(load_logistic_regression(model_path), torch.as_tensor(x))
    metrics = {"label": label, "model": "logistic_regression", "method": "non-private", "split": "test",
               **binary_metrics(y, scores)}
    run_logger().info("evaluate LR %s: test AUROC %.3f, AUPRC %.3f (n=%d)", label, metrics["auroc"],
                      metrics["auprc"], metrics["n"])
    return metrics
