"""DP-NF training: it learns, it is reproducible, and the release records what the accountants say."""

import math

import pytest
import torch

from models.dp_nf import DensityHyperparameters, mean_log_likelihood, train_density
from models.gaussian_dp import gdp_epsilon, gdp_mu
from models.maf import MAF
from models.privacy_accounting import epsilon_spent


def _data(n, seed):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, 3, generator=g)
    return torch.stack([z[:, 0], 0.9 * z[:, 0] + 0.3 * z[:, 1], torch.tanh(z[:, 2]) + 0.5 * z[:, 0]], 1)


def _flow(seed=0):
    torch.manual_seed(seed)
    return MAF(3, blocks=2, hidden_size=16)


HP = DensityHyperparameters(learning_rate=3e-3, batch_size=50, steps=250, max_grad_norm=1.0, seed=0)


def test_dp_training_learns_and_records_its_cost():
    train, test = _data(500, 0), _data(500, 1)
    flow = _flow()
    before = mean_log_likelihood(flow, test)
    release = train_density(flow, train, HP, noise_multiplier=0.8, delta=1e-5)
    assert mean_log_likelihood(flow, test) > before + 0.5
    assert release.mechanism == "dp_sgd" and release.steps == 250 and release.sample_rate == pytest.approx(0.1)
    spend = epsilon_spent(0.8, 0.1, 250, 1e-5)
    assert release.epsilon_prv == spend.epsilon_prv and release.epsilon_rdp == spend.epsilon_rdp
    assert release.mu == pytest.approx(gdp_mu(0.8, 0.1, 250))
    assert release.epsilon_gdp == pytest.approx(gdp_epsilon(release.mu, 1e-5))
    assert release.as_dict()["epsilon"] == release.epsilon_prv


def test_more_noise_learns_less_and_non_private_is_marked_unbounded():
    train, test = _data(500, 0), _data(500, 1)
    scores = {}
    for sigma in (None, 0.8, 20.0):
        flow = _flow()
        release = train_density(flow, train, HP, noise_multiplier=sigma)
        scores[sigma] = mean_log_likelihood(flow, test)
        assert math.isinf(release.epsilon) == (sigma is None)
    assert scores[None] > scores[20.0] and scores[0.8] > scores[20.0]


def test_same_seed_same_flow():
    train = _data(200, 0)
    a, b = _flow(), _flow()
    assert train_density(a, train, HP, noise_multiplier=1.0, noise_seed=5).noise_source == "seeded"
    train_density(b, train, HP, noise_multiplier=1.0, noise_seed=5)
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), name
    c = _flow()  # by default the noise comes from OS entropy: another run, another flow
    assert train_density(c, train, HP, noise_multiplier=1.0).noise_source == "os_entropy"
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters()))
