"""Non-private fits of one cell trained together: each member takes the single trainer's steps (its own seed's
shuffles, its own learning rate and weight decay), in float64 to rounding; members never share a gradient; what cannot
stack (batch norm, different batch sizes or epoch counts) is refused, and the method then fits one at a time."""

import copy

import pytest
import torch

from privehr.models.classifiers import build_classifier, classifier_inputs
from privehr.models.classifiers.batched_training import fit_binary_classifiers_batched, fits_together
from privehr.models.classifiers.training import TrainingHyperparameters, fit_binary_classifier

from oracles.classifier_records import random_records


def _records(name):
    values, mask, delta, y = random_records()
    return tuple(t.double() for t in classifier_inputs(name, values, mask, delta)), y.double(), values.shape


@pytest.mark.parametrize("loss", ["bce", "l2"])
@pytest.mark.parametrize("name", ["logistic_regression", "grud"])
@pytest.mark.parametrize("k_models", [1, 3])
def test_members_trained_together_equal_each_trained_alone(name, k_models, loss):
    x, y, shape = _records(name)
    models = [build_classifier(name, shape[2], shape[1], seed=k, hidden_size=6).double() for k in range(k_models)]
    hps = [TrainingHyperparameters(learning_rate=0.01 * (k + 1), weight_decay=0.05 * k, batch_size=16, max_epochs=3,
                                   seed=10 + k) for k in range(k_models)]
    alone = [copy.deepcopy(m) for m in models]
    for model, hp in zip(alone, hps):
        single = fit_binary_classifier(model, x, y, hp=hp, loss=loss)
    together = [copy.deepcopy(m) for m in models]
    calls = []
    results = fit_binary_classifiers_batched(together, x, y, hps, loss, lambda done, total: calls.append(done))
    assert calls == [1, 2, 3] and [r.epochs_run for r in results] == [3] * k_models
    assert results[-1].history[-1]["train_loss"] == pytest.approx(single.history[-1]["train_loss"], rel=1e-10)
    for start, a, b in zip(models, alone, together):
        for p0, pa, pb in zip(start.parameters(), a.parameters(), b.parameters()):
            assert torch.allclose(pa, pb, rtol=0, atol=1e-12)
            assert not torch.equal(p0, pb)  # trained


def test_a_member_sees_only_its_own_rows():
    """A member whose learning rate is zero ends exactly where it started while the others train beside it: no
    gradient and no optimizer state crosses between members."""
    x, y, shape = _records("grud")
    models = [build_classifier("grud", shape[2], shape[1], seed=k, hidden_size=6).double() for k in range(3)]
    start = copy.deepcopy(models[1])
    hps = [TrainingHyperparameters(learning_rate=lr, weight_decay=0.0, batch_size=16, max_epochs=2, seed=k)
           for k, lr in enumerate([0.05, 0.0, 0.05])]
    fit_binary_classifiers_batched(models, x, y, hps)
    assert all(torch.equal(a, b) for a, b in zip(start.parameters(), models[1].parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(start.parameters(), models[0].parameters()))


def test_what_cannot_stack_is_refused():
    x, y, shape = _records("grud")
    plain = [build_classifier("grud", shape[2], shape[1], seed=k, hidden_size=6) for k in range(2)]
    normed = [build_classifier("grud", shape[2], shape[1], seed=k, hidden_size=6, batch_norm=True) for k in range(2)]
    hp = TrainingHyperparameters(batch_size=16, max_epochs=2)
    assert fits_together(plain, [hp, hp])
    assert not fits_together(normed, [hp, hp])  # batch norm mixes the rows of a batch
    assert not fits_together(plain, [hp, TrainingHyperparameters(batch_size=32, max_epochs=2)])
    assert not fits_together(plain, [hp, TrainingHyperparameters(batch_size=16, max_epochs=3)])
    with pytest.raises(ValueError, match="batch norm"):
        fit_binary_classifiers_batched(normed, x, y, [hp, hp])
