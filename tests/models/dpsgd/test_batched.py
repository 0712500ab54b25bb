"""DP-SGD of a group of releases as one batched model (models/dpsgd/batched.py): each member is the release the single
trainer would have made, with its own plan, sample, clipping and noise."""

import copy

import pytest
import torch

from privehr.models.classifiers.grud import GRUD
from privehr.models.classifiers.logistic_regression import LogisticRegression
from privehr.models.dpsgd.batched import train_dp_sgd_batched
from privehr.models.dpsgd.trainer import DPSGDHyperparameters, train_dp_sgd
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import ReleasePlan


def _records(n=120, hours=4, variables=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(n, hours, variables, generator=g) < 0.5).double()
    values = torch.randn(n, hours, variables, generator=g, dtype=torch.float64) * mask
    delta = torch.rand(n, hours, variables, generator=g, dtype=torch.float64) * 3
    y = (torch.rand(n, generator=g) < 0.3).double()
    return (values, mask, delta), y


# three releases unlike each other: epsilons, epochs (so T), batch sizes (so q), C, learning rates, weight decay
PLANS = [dict(batch_size=20, epochs=2, target_epsilon=1.0, max_grad_norm=1.0),
         dict(batch_size=30, epochs=2, target_epsilon=4.0, max_grad_norm=0.5),
         dict(batch_size=20, epochs=1, target_epsilon=8.0, max_grad_norm=2.0)]
HPS = [DPSGDHyperparameters(0.01, 0.0), DPSGDHyperparameters(0.03, 0.01), DPSGDHyperparameters(0.05, 0.0)]


@pytest.fixture(scope="module")
def plans():  # calibrated once for the module
    return [ReleasePlan.for_epochs(120, p["batch_size"], p["epochs"], target_epsilon=p["target_epsilon"], delta=1e-5,
                                   max_grad_norm=p["max_grad_norm"]) for p in PLANS]


@pytest.mark.parametrize("model,engine", [("grud", "ghost"), ("grud", "functorch"), ("logistic_regression", "ghost"),
                                          ("logistic_regression", "functorch")])
def test_each_member_is_the_release_the_single_trainer_makes(model, engine, plans):
    (values, mask, delta), y = _records()
    inputs = (values, mask, delta) if model == "grud" else (values.flatten(1),)
    build = (lambda: GRUD(4, 6)) if model == "grud" else (lambda: LogisticRegression(16))
    models = []
    for k in range(3):
        torch.manual_seed(k)
        models.append(build().double())
    alone = [copy.deepcopy(m) for m in models]
    assert len({p.steps for p in plans}) == 3 and len({p.sample_rate for p in plans}) == 2
    batched = train_dp_sgd_batched(models, inputs, y, HPS, plans, [NoiseSource.reproducible("t", k) for k in range(3)],
                                   per_sample=engine)
    for k, (trained, result) in enumerate(batched):
        single, reference = train_dp_sgd(alone[k], inputs, y, HPS[k], plans[k], NoiseSource.reproducible("t", k))
        for a, b in zip(trained.parameters(), single.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)  # same samples, clipping, noise and steps
        assert result.plan is plans[k] and len(result.history) == len(reference.history)
        for ours, theirs in zip(result.history, reference.history):  # the same records in every epoch
            assert ours == {**theirs, "train_loss": pytest.approx(theirs["train_loss"], rel=1e-12)}


def test_a_member_depends_on_its_own_noise_alone(plans):
    (values, mask, delta), y = _records()

    def run(sources):
        models = []
        for k in range(3):
            torch.manual_seed(k)
            models.append(GRUD(4, 6).double())
        return [m for m, _ in train_dp_sgd_batched(models, (values, mask, delta), y, HPS, plans, sources)]

    first = run([NoiseSource.reproducible("a", k) for k in range(3)])
    other = run([NoiseSource.reproducible("a", 0), NoiseSource.reproducible("b", 1), NoiseSource.reproducible("a", 2)])
    for k in (0, 2):  # members 0 and 2 kept their streams: batching with a different member 1 changes nothing
        for a, b in zip(first[k].parameters(), other[k].parameters()):  # (but the rounding of a padded product)
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert any(not torch.equal(a, b) for a, b in zip(first[1].parameters(), other[1].parameters()))


def test_os_entropy_members_differ_between_runs_and_from_each_other(plans):
    (values, mask, delta), y = _records()
    plan = plans[0]

    def run():
        models = []
        for _ in range(2):
            torch.manual_seed(0)  # the same initial weights for both members
            models.append(GRUD(4, 6).double())
        out = train_dp_sgd_batched(models, (values, mask, delta), y, HPS[:2], [plan, plan],
                                   [NoiseSource.secret(), NoiseSource.secret()])
        assert all(result.noise_source == "os_entropy" for _, result in out)
        return [torch.cat([p.detach().flatten() for p in m.parameters()]) for m, _ in out]

    one, two = run(), run()
    assert not torch.equal(one[0], one[1]) and not torch.equal(one[0], two[0])


def test_a_group_must_share_an_architecture_and_never_mix_records(plans):
    (values, mask, delta), y = _records(n=20)
    plan = plans[0]
    sources = [NoiseSource.reproducible("x", k) for k in range(2)]
    with pytest.raises(ValueError, match="one architecture"):
        train_dp_sgd_batched([GRUD(4, 6).double(), GRUD(4, 7).double()], (values, mask, delta), y, HPS[:2],
                             [plan, plan], sources)
    with pytest.raises(ValueError, match="batch norm"):
        train_dp_sgd_batched([GRUD(4, 6, batch_norm=True).double() for _ in range(2)], (values, mask, delta), y,
                             HPS[:2], [plan, plan], sources)
    with pytest.raises(ValueError, match="one of each per member"):
        train_dp_sgd_batched([GRUD(4, 6).double()], (values, mask, delta), y, HPS[:2], [plan], sources)


def test_a_stacked_group_refuses_layers_without_a_stacked_rule_and_differing_buffers():
    from privehr.models.classifiers.stacking import stack_models, stackable
    from privehr.models.nf.made import MaskedLinear

    assert stackable(GRUD(4, 6)) and stackable(LogisticRegression(16))
    masked = torch.nn.Sequential(MaskedLinear(torch.ones(3, 3)))
    assert not stackable(masked)  # the batched trainer takes its per-sample gradients by torch.func instead
    with pytest.raises(ValueError, match="has no stacked layer"):
        stack_models([masked, masked])
    other = GRUD(4, 6, x_mean=torch.ones(4))
    with pytest.raises(ValueError, match="'x_mean' .a buffer or frozen parameter. differs"):
        stack_models([GRUD(4, 6), other])
    frozen = [LogisticRegression(16), LogisticRegression(16)]  # a frozen weight is read from the first member alone
    for m in frozen:
        m.requires_grad_(False)
    with pytest.raises(ValueError, match="frozen parameter"):
        stack_models(frozen)


def test_a_padded_row_adds_nothing_and_a_member_with_an_empty_batch_still_takes_its_noised_step(plans):
    """Member 1 samples at a rate so small that its batches are empty: its rows are all padding; it still takes
    its T noised steps (an empty Poisson batch is a step of DP-SGD), exactly as the single trainer does."""
    from privehr.models.dpsgd.ghost_clipping import clipped_gradient_sum
    from privehr.models.classifiers.stacking import stack_models

    (values, mask, delta), y = _records()
    models = []
    for k in range(2):
        torch.manual_seed(k)
        models.append(GRUD(4, 6).double())
    stacked = stack_models(models)
    rows = torch.arange(6)
    batch = tuple(torch.cat([t[rows], torch.zeros_like(t[rows])]) for t in (values, mask, delta))
    target = torch.cat([y[rows], torch.zeros(6, dtype=y.dtype)])
    thresholds = torch.cat([torch.full((6,), 1.0), torch.zeros(6)]).double()
    losses_fn = lambda m, t, *xs: torch.nn.functional.binary_cross_entropy_with_logits(m(*xs), t, reduction="none")
    _, norms, sums = clipped_gradient_sum(stacked, losses_fn, (target, *batch), thresholds)
    _, alone_norms, alone = clipped_gradient_sum(models[0], losses_fn, (y[rows], *(t[rows] for t in (values, mask,
                                                                                                      delta))), 1.0)
    torch.testing.assert_close(norms[:6], alone_norms)  # member 0's rows: its own model's norms
    by_name = dict(stacked.named_parameters())
    for name, p in models[0].named_parameters():
        torch.testing.assert_close(sums[by_name[name]][0], alone[p])  # member 0: its own clipped sum
        assert not sums[by_name[name]][1].any()  # member 1: padding only, nothing


@pytest.mark.parametrize("model_name", ["grud", "logistic_regression"])
def test_each_members_per_sample_norms_in_a_stacked_group_are_torch_funcs_for_that_model_alone(model_name):
    """The norms that clip a stacked group's rows are, row by row, the norms of the per-sample gradients torch.func
    takes of that row's own member alone (float64: equal but for the ghost norm's rounding margin), for three members
    with different weights and different rows."""
    from torch.func import functional_call, grad, vmap

    from privehr.models.classifiers import build_classifier, classifier_inputs
    from privehr.models.dpsgd.ghost_clipping import clipped_gradient_sum
    from privehr.models.classifiers.stacking import stack_models

    (values, mask, delta), y = _records()
    inputs = tuple(x.double() for x in classifier_inputs(model_name, values, mask, delta))
    members = [build_classifier(model_name, 4, 4, seed=k, hidden_size=6).double() for k in range(3)]
    rows = [torch.arange(k * 7, k * 7 + 7) for k in range(3)]  # each member its own 7 records
    stacked = stack_models(members)
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    losses_fn = lambda m, t, *xs: bce(m(*xs), t, reduction="none")  # noqa: E731
    batch = tuple(torch.cat([x[r] for r in rows]) for x in inputs)
    _, norms, _ = clipped_gradient_sum(stacked, losses_fn, (torch.cat([y[r] for r in rows]), *batch),
                                       torch.ones(21, dtype=torch.float64))
    for k, model in enumerate(members):
        params = {n: p.detach() for n, p in model.named_parameters()}

        def loss(p, target, *xs, model=model):
            return bce(functional_call(model, p, tuple(x[None] for x in xs)), target[None])

        grads = vmap(grad(loss), in_dims=(None, 0, *[0] * len(inputs)))(params, y[rows[k]], *(x[rows[k]]
                                                                                             for x in inputs))
        expected = torch.sqrt(sum(g.flatten(1).square().sum(1) for g in grads.values()))
        torch.testing.assert_close(norms[k * 7:(k + 1) * 7], expected, rtol=1e-9, atol=1e-12)
