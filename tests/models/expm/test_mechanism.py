"""ExpM+NF: flow layers (invertibility, log-det), the batched utility, and closeness to the exact mechanism."""

import numpy as np
import pytest
import torch
from torch import nn
from torch.func import jacrev

from privehr.models.expm.batched_utility import BatchedUtility, flat_parameters
from privehr.models.classifiers import build_classifier, classifier_inputs
from oracles.classifier_records import random_records
from oracles.expm_grid import grid_log_density, grid_samples, ks_marginals, mmd2
from privehr.models.expm.mechanism import (ExpMNFHyperparameters, draw_probabilities, draw_utilities, fit_gap, map_index,
                            posterior_predictive, sample_parameters, train_expm_nf)
from privehr.models.nf.parameter_flow import ParameterFlow
from privehr.models.nf.planar import PlanarFlow
from privehr.models.nf.sylvester import SylvesterFlow


def _autograd_log_det(layer, z):
    jac = torch.stack([jacrev(lambda v: layer(v[None])[0][0])(zi) for zi in z])
    return torch.linalg.slogdet(jac.double())[1]


@pytest.mark.parametrize("make", [lambda g: PlanarFlow(5, init_scale=1.0, generator=g),
                                  lambda g: SylvesterFlow(5, m=3, reflections=3, init_scale=1.0, generator=g)])
def test_log_det_equals_autograd(make):
    g = torch.Generator().manual_seed(0)
    layer = make(g).double()
    with torch.no_grad():  # push the layer far from the identity
        for p in layer.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    z = torch.randn(7, 5, generator=g, dtype=torch.float64)
    _, log_det = layer(z)
    assert torch.allclose(log_det, _autograd_log_det(layer, z), atol=1e-8)


def test_planar_reparametrisation_makes_it_invertible():
    g = torch.Generator().manual_seed(1)
    layer = PlanarFlow(4, init_scale=1.0, generator=g).double()
    with torch.no_grad():
        layer.u.copy_(-3 * layer.w / layer.w.norm() ** 2 * 5)  # raw w^T u = -15 < -1: not invertible as is
    assert float((layer.w @ layer.u_hat()).detach()) > -1
    z = 3 * torch.randn(50, 4, generator=g, dtype=torch.float64)
    y, log_det = layer(z)
    assert torch.isfinite(log_det).all()
    assert torch.allclose(layer.inverse(y), z, atol=1e-8)


def test_sylvester_never_builds_a_dense_q_and_q_is_orthonormal():
    layer = SylvesterFlow(1000, m=4, reflections=3, generator=torch.Generator().manual_seed(0))
    assert sum(p.numel() for p in layer.parameters()) < 3 * 1000 + 4 * 4 * 2 + 12 + 1
    eye = layer.q(torch.eye(4))  # columns of Q
    assert torch.allclose(eye @ eye.T, torch.eye(4), atol=1e-5)
    z = torch.randn(6, 1000)
    assert torch.allclose(layer.q_t(z), z @ eye.T, atol=1e-4)
    r1, r2 = layer.triangular()
    assert (torch.diagonal(r1) * torch.diagonal(r2) > -1).all()


@pytest.mark.parametrize("name", ["logistic_regression", "grud"])
def test_batched_utility_equals_a_per_theta_loop(name):
    values, mask, delta, y = random_records()
    model = build_classifier(name, 3, 6, seed=0, hidden_size=4).double()
    x = tuple(t.double() for t in classifier_inputs(name, values, mask, delta))
    u = BatchedUtility(model, x, y.double(), l1=0.01)
    assert u.dim == flat_parameters(model).numel()
    theta = 0.3 * torch.randn(9, u.dim, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    loop = []
    for th in theta:
        nn.utils.vector_to_parameters(th, model.parameters())
        with torch.no_grad():
            p = torch.sigmoid(model(*x).reshape(-1))
        loop.append(-(p - y.double()).pow(2).sum() - 0.01 * th.abs().sum())
    assert torch.allclose(u(theta), torch.stack(loop), atol=1e-5)
    assert torch.allclose(u.logits(theta), u.logits(theta, generic=True), atol=1e-10)  # fast path == vmap
    if name == "grud":  # records in blocks (a small budget here: 9 draws x 6 hours x 12 = 648 elements a record)
        model.BATCHED_ELEMENTS = 648 * 5
        assert torch.allclose(u.logits(theta), u.logits(theta, generic=True), atol=1e-10)
    batch = torch.arange(0, 64, 4)  # n/B-scaled minibatch estimate
    scaled = -(64 / 16) * (torch.sigmoid(u.logits(theta, tuple(t[batch] for t in x))) - y.double()[batch]).pow(2).sum(1)
    assert torch.allclose(u(theta, batch), scaled - 0.01 * theta.abs().sum(1), atol=1e-8)


def test_utility_refuses_what_breaks_the_sensitivity_bound():
    x = (torch.randn(10, 3),)
    with pytest.raises(ValueError, match="targets must lie in"):
        BatchedUtility(nn.Linear(3, 1), x, torch.full((10,), 2.0))
    with pytest.raises(ValueError, match="dropout"):
        BatchedUtility(nn.Sequential(nn.Dropout(0.5), nn.Linear(3, 1)), x, torch.zeros(10))
    with pytest.raises(ValueError, match="batch norm"):
        BatchedUtility(nn.Sequential(nn.BatchNorm1d(3), nn.Linear(3, 1)), x, torch.zeros(10))


def _two_parameter_utility():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(40).astype(np.float32)
    y = (rng.random(40) < 1 / (1 + np.exp(-(2 * x - 0.5)))).astype(np.float32)
    return BatchedUtility(nn.Linear(1, 1), (torch.tensor(x)[:, None],), torch.tensor(y), l1=0.5)


def test_flow_approaches_the_exact_mechanism_in_two_dimensions():
    u = _two_parameter_utility()
    axes = (np.linspace(-15, 15, 241), np.linspace(-15, 15, 241))
    results = {}
    for eps in (0.5, 8.0):
        hp = ExpMNFHyperparameters(epsilon=eps, flow="planar", layers=8, steps=300, samples=128,
                                   learning_rate=2e-2, base_sigma=1.0)
        theta, log_q = sample_parameters(train_expm_nf(u, hp).flow, 800, 3)
        log_p = grid_log_density(u, eps, axes)
        results[eps] = theta.numpy(), log_p
        ks = ks_marginals(theta.numpy(), log_p, axes)
        assert max(ks) < 0.2, (eps, ks)
        assert mmd2(theta.numpy(), grid_samples(log_p, axes, 800)) < 0.05
        assert fit_gap(eps, u.sensitivity, draw_utilities(u, theta), log_q)["gap_std"] < 1.0
    # the comparison discriminates: the eps = 8 flow is far from the eps = 0.5 mechanism
    assert max(ks_marginals(results[8.0][0], results[0.5][1], axes)) > 0.3


def test_release_modes():
    values, mask, delta, y = random_records(n=200)
    model = build_classifier("logistic_regression", 3, 6, seed=0)
    x = classifier_inputs("logistic_regression", values, mask, delta)
    u = BatchedUtility(model, x, y, l1=0.01)
    flow = train_expm_nf(u, ExpMNFHyperparameters(epsilon=50.0, steps=150, samples=32, learning_rate=2e-2,
                                                  base_sigma=0.1)).flow
    theta, _ = sample_parameters(flow, 64, 0)
    probabilities = draw_probabilities(u, theta, x, chunk=10)
    assert probabilities.shape == (64, 200)
    p = posterior_predictive(probabilities)
    assert p.shape == (200,) and ((0 <= p) & (p <= 1)).all()
    assert np.allclose(p, torch.sigmoid(u.logits(theta)).mean(0).numpy(), atol=1e-6)
    utilities = draw_utilities(u, theta, chunk=10)
    assert np.isclose(float(u(theta[map_index(utilities)][None])[0]), float(u(theta).max()), atol=1e-4)
    assert torch.equal(sample_parameters(flow, 64, 0)[0], theta)  # seeded draws


def test_flow_weights_depend_on_the_seed_only():
    a, b = ParameterFlow(6, seed=4), ParameterFlow(6, seed=4)
    torch.rand(100)  # the global generator is not used
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_the_default_schedule_reaches_the_targets_width_at_every_eps():
    """Where no record constrains a weight (its feature is 0 everywhere), the target exp(eps~ u / 2s) is a Laplace of
    scale b = 2s / (eps~ lambda) and the reverse-KL Gaussian for it has standard deviation b (pi / 2)^0.5. The
    default schedule must get the flow there at each eps~: the schedule used before (80 steps at lr 3e-3 from
    sigma 0.01) left every weight's scale near 0.013 whatever eps~, so every eps~ released the same classifier."""
    g = torch.Generator().manual_seed(0)
    x = torch.zeros(120, 40)
    x[:, :5] = torch.randn(120, 5, generator=g)  # 35 features never observed
    y = (torch.rand(120, generator=g) < torch.sigmoid(x[:, 0] * 2)).float()
    model = build_classifier("logistic_regression", 1, 1, seed=0)
    model.linear = nn.Linear(40, 1)
    from privehr.core.config import ExpMNFConfig
    lam = ExpMNFConfig().l1
    for eps in (1.0, 10.0):
        u = BatchedUtility(model, (x,), y, l1=lam)
        flow = train_expm_nf(u, ExpMNFHyperparameters(epsilon=eps)).flow
        scale = (flow.base_sigma * flow.log_scale.detach().exp())[5:40]  # the unconstrained weights
        expected = 2 / (eps * lam) * (np.pi / 2) ** 0.5
        assert 0.5 < float(scale.median()) / expected < 2, (eps, float(scale.median()), expected)


@pytest.mark.parametrize("model", ["logistic_regression", "grud"])
def test_flows_trained_together_are_the_flows_trained_alone(model):
    """train_expm_nf_many shares one pass over the records between K flows; each flow (its own epsilon, draws per
    step, L1 weight, seed and number of steps) ends as train_expm_nf leaves it alone, and the records were read once
    a step for all of them."""
    from privehr.models.expm.mechanism import train_expm_nf_many

    values, mask, delta, y = random_records(n=120)
    x = classifier_inputs(model, values, mask, delta)
    members = [(0.5, 8, 0.01, 0, 12), (4.0, 16, 0.0, 1, 20), (20.0, 8, 0.1, 2, 16)]
    utilities = [BatchedUtility(build_classifier(model, 3, 6, seed=s, hidden_size=4), x, y, l1=l1)
                 for _, _, l1, s, _ in members]
    hps = [ExpMNFHyperparameters(epsilon=e, flow="sylvester", layers=2, m=2, reflections=2, samples=n, steps=t,
                                 learning_rate=2e-2, base_sigma=0.1, seed=s) for e, n, _, s, t in members]
    alone = [train_expm_nf(u, hp) for u, hp in zip(utilities, hps)]
    passes = []
    data_utility = utilities[0].data_utility
    utilities[0].data_utility = lambda theta, batch=None: passes.append(len(theta)) or data_utility(theta, batch)
    together = train_expm_nf_many(utilities, hps)
    assert passes == [32] * 12 + [24] * 4 + [16] * 4  # all three flows' draws in one pass, then those still training
    for a, b, hp in zip(alone, together, hps):
        assert len(b.history) == hp.steps
        assert np.allclose(a.history, b.history, rtol=1e-4, atol=1e-4)
        for p, q in zip(a.flow.parameters(), b.flow.parameters()):
            assert torch.allclose(p, q, rtol=1e-4, atol=1e-5)
