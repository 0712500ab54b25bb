import numpy as np
import torch

from models.logistic_regression import LogisticRegression
from models.metrics import binary_metrics
from models.training import TrainingHyperparameters, fit_binary_classifier, predict_proba


def _data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 20, generator=g)
    w = torch.zeros(20)
    w[:3] = torch.tensor([2.0, -1.5, 1.0])
    y = (torch.rand(n, generator=g) < torch.sigmoid(x @ w - 1.0)).float()
    return x, y


def test_logistic_regression_learns_a_linear_signal():
    (xt, yt), (xd, yd), (xs, ys) = _data(800, 0), _data(200, 1), _data(400, 2)
    torch.manual_seed(0)
    model = LogisticRegression(20)
    result = fit_binary_classifier(model, xt, yt, xd, yd, TrainingHyperparameters(learning_rate=0.05,
                                                                                   max_epochs=30, patience=5))
    assert 1 <= result.best_epoch <= result.epochs_run <= 30
    auroc = binary_metrics(ys.numpy(), predict_proba(model, xs))["auroc"]
    assert auroc > 0.85
    # the returned model holds the best-dev epoch's parameters
    assert binary_metrics(yd.numpy(), predict_proba(model, xd))["auroc"] == result.best_dev_auroc


def test_metrics_with_one_class_are_nan_with_reason():
    m = binary_metrics(np.zeros(5), np.linspace(0, 1, 5))
    assert np.isnan(m["auroc"]) and m["note"] == "only one class present"
