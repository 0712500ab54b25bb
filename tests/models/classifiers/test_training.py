import numpy as np
import pytest
import torch

from privehr.models.classifiers.logistic_regression import LogisticRegression
from privehr.models.evaluation.metrics import binary_metrics
from privehr.models.classifiers.training import TrainingHyperparameters, fit_binary_classifier, predict_proba


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


def test_early_stopping_on_dev_loss_keeps_the_epoch_of_least_dev_loss():
    # 60 training rows and 200 features: the model overfits within a few epochs; the dev loss turns up
    # (epoch 4) before the dev AUROC does (epoch 6), as on the demo's small dev split
    g = torch.Generator().manual_seed(3)
    x = torch.randn(460, 200, generator=g)
    y = (torch.rand(460, generator=g) < torch.sigmoid(2 * x[:, 0] - 1.0)).float()
    (xt, yt), (xd, yd) = (x[:60], y[:60]), (x[60:], y[60:])
    results = {}
    for criterion in ("loss", "auroc"):
        torch.manual_seed(0)
        model = LogisticRegression(200)
        hp = TrainingHyperparameters(learning_rate=0.003, weight_decay=0.0, batch_size=16, max_epochs=60, patience=4,
                                     early_stopping=criterion)
        results[criterion] = result = fit_binary_classifier(model, xt, yt, xd, yd, hp)
        assert result.epochs_run - result.best_epoch == 4  # stopped after `patience` epochs without improvement
        assert result.best_dev_auroc == result.history[result.best_epoch - 1]["dev_auroc"]
        if criterion == "loss":
            losses = [h["dev_loss"] for h in result.history]
            assert result.best_epoch == int(np.argmin(losses)) + 1
            kept = torch.nn.functional.binary_cross_entropy(torch.as_tensor(predict_proba(model, xd)), yd)
            assert abs(float(kept) - min(losses)) < 1e-5  # the model holds that epoch's parameters
        else:
            assert result.best_epoch == int(np.argmax([h["dev_auroc"] for h in result.history])) + 1
    assert results["loss"].best_epoch < results["auroc"].best_epoch
    with pytest.raises(ValueError, match="early_stopping"):
        TrainingHyperparameters(early_stopping="accuracy")
