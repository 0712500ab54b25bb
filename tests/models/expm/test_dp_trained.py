"""DP-trained ExpM flows: per-record gradients against torch.func, the shared term against autograd, clipping bounds
one record's influence, training follows the plan with fresh noise, and the flow approaches the ExpM target."""

import math

import pytest
import torch
from torch.func import grad
from torch.nn.functional import binary_cross_entropy_with_logits

from privehr.models.classifiers import build_classifier, classifier_inputs
from privehr.models.classifiers.logistic_regression import LogisticRegression
from privehr.models.dpsgd.noisy_step import clipped_sum
from privehr.models.expm.batched_utility import BatchedUtility
from privehr.models.expm.dp_trained import (DPExpMHyperparameters, gaussian_parameter_flow, record_gradients,
                                            shared_gradients, train_dp_expm)
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import ReleasePlan

from oracles.classifier_records import random_records



def _problem(name, loss="l2"):
    values, mask, delta, y = random_records()
    model = build_classifier(name, 3, 6, seed=0, hidden_size=4).double()
    x = tuple(t.double() for t in classifier_inputs(name, values, mask, delta))
    utility = BatchedUtility(model, x, y.double(), l1=0.01, loss=loss)
    flow = gaussian_parameter_flow(utility.dim, 0.3).double()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # a flow away from its start, so that every term of the gradient matters
        flow.shift.copy_(0.2 * torch.randn(utility.dim, generator=g, dtype=torch.float64))
        flow.log_scale.copy_(0.3 * torch.randn(utility.dim, generator=g, dtype=torch.float64))
    z = torch.randn(5, utility.dim, generator=g, dtype=torch.float64) * flow.base_sigma
    return utility, flow, z


@pytest.mark.parametrize("loss", ["l2", "bce"])
@pytest.mark.parametrize("name", ["logistic_regression", "grud"])
def test_per_record_gradients_equal_torch_func_through_the_flow(name, loss):
    """g_i = grad over (shift, log_scale) of tau/m sum_j l_i(F(z_j)), by torch.func on the flow itself; the closed
    form (logistic regression: two GEMMs; GRU-D: torch.func scores) must agree for every record, for either loss."""
    utility, flow, z = _problem(name, loss)
    temperature, batch = 3.0, torch.tensor([0, 5, 17, 40, 63])
    losses, grads = record_gradients(flow, utility, batch, z, temperature)
    params = {k: v.detach() for k, v in flow.named_parameters()}

    def loss_i(p, i):
        theta = p["shift"] + torch.exp(p["log_scale"]) * z  # the flow's push, z already at the base scale
        logits = utility.logits(theta, tuple(t[i:i + 1] for t in utility.inputs))[:, 0]
        target = utility.y[i].to(logits.dtype).expand_as(logits)
        error = ((torch.sigmoid(logits) - target).pow(2) if loss == "l2"
                 else binary_cross_entropy_with_logits(logits, target, reduction="none"))
        return temperature / 2 * error.mean()

    for row, i in enumerate(batch.tolist()):
        expected = grad(loss_i)(params, i)
        assert torch.allclose(grads["shift"][row], expected["shift"], atol=1e-10)
        assert torch.allclose(grads["log_scale"][row], expected["log_scale"], atol=1e-10)
        assert math.isclose(float(losses[row]), float(loss_i(params, i)), rel_tol=1e-10)


def test_the_shared_term_is_the_gradient_of_the_entropy_and_the_penalty():
    utility, flow, z = _problem("logistic_regression")
    params = {k: v.detach() for k, v in flow.named_parameters()}
    temperature, l1 = 4.0, 0.05

    def shared(p):
        theta = p["shift"] + torch.exp(p["log_scale"]) * z
        log_q = flow.base_log_prob(z) - p["log_scale"].sum()
        return (log_q + temperature / 2 * l1 * theta.abs().sum(1)).mean()

    expected = grad(shared)(params)
    mine = shared_gradients(flow, z, temperature, l1)
    for k in ("shift", "log_scale"):
        assert torch.allclose(mine[k], expected[k], atol=1e-10)


def test_one_extreme_record_moves_the_clipped_sum_by_at_most_c():
    utility, flow, z = _problem("logistic_regression")
    batch = torch.arange(20)
    _, grads = record_gradients(flow, utility, batch, z, 1e4)  # a huge temperature: every record clipped
    c = 0.5
    with_all, norms = clipped_sum(grads, c)
    without, _ = clipped_sum({k: v[1:] for k, v in grads.items()}, c)
    moved = torch.sqrt(sum((with_all[k] - without[k]).pow(2).sum() for k in grads))
    assert (norms > c).all() and float(moved) <= c * (1 + 1e-6)


def _simulated(n=400, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.linspace(-1.5, 1.5, d)
    y = (torch.rand(n, generator=g) < torch.sigmoid(x @ w)).float()
    return BatchedUtility(LogisticRegression(d), (x,), y, l1=1e-3), w


def test_training_takes_the_plans_steps_with_fresh_noise_unless_reproducible():
    utility, _ = _simulated()
    plan = ReleasePlan.for_epochs(utility.n, batch_size=50, epochs=2, target_epsilon=2.0, delta=1e-5)
    hp = DPExpMHyperparameters(temperature=10.0, learning_rate=0.05, draws=2, init_scale=0.01)
    calls = []
    first, history = train_dp_expm(utility, hp, plan, NoiseSource.secret(), lambda step, total: calls.append(step))
    second, _ = train_dp_expm(utility, hp, plan, NoiseSource.secret())
    assert calls[-1] == plan.steps and history[-1]["step"] == plan.steps
    assert not torch.equal(first.shift, second.shift)  # fresh OS entropy every release
    a, _ = train_dp_expm(utility, hp, plan, NoiseSource.reproducible("x"))
    b, _ = train_dp_expm(utility, hp, plan, NoiseSource.reproducible("x"))
    assert torch.equal(a.shift, b.shift) and torch.equal(a.log_scale, b.log_scale)


def test_a_dp_trained_flow_finds_the_signal_and_its_spread_shrinks_with_the_temperature():
    """At a generous epsilon the flow's mean recovers the simulated weights' signs, and a hotter target (smaller
    eps~) leaves a wider flow: the temperature shapes the density, the plan the privacy."""
    utility, w = _simulated(n=2000)
    plan = ReleasePlan.for_epochs(utility.n, batch_size=200, epochs=8, target_epsilon=8.0, delta=1e-5)
    scales = {}
    for temperature in (2.0, 50.0):
        hp = DPExpMHyperparameters(temperature=temperature, learning_rate=0.05, draws=4, init_scale=0.5)
        flow, _ = train_dp_expm(utility, hp, plan, NoiseSource.reproducible("fit", temperature))
        weights = flow.shift[:-1]
        assert (torch.sign(weights[[0, 1, 4, 5]]) == torch.sign(w[[0, 1, 4, 5]])).all(), temperature
        scales[temperature] = float((torch.exp(flow.log_scale.detach()) * flow.base_sigma).median())
    assert scales[50.0] < scales[2.0]
