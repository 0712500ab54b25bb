"""DP-NF training: it learns, it takes exactly its plan, its noise is fresh unless asked to be reproducible,
and the release records what the accountants say."""

import pytest
import torch

from privehr.models.dpsgd.density import DensityHyperparameters, mean_log_likelihood, train_density
from privehr.models.privacy.gdp import gdp_epsilon, gdp_mu
from privehr.models.nf.maf import MAF
from privehr.models.privacy.accounting import epsilon_spent
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import ReleasePlan


def _data(n, seed):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, 3, generator=g)
    return torch.stack([z[:, 0], 0.9 * z[:, 0] + 0.3 * z[:, 1], torch.tanh(z[:, 2]) + 0.5 * z[:, 0]], 1)


def _flow(seed=0):
    torch.manual_seed(seed)
    return MAF(3, blocks=2, hidden_size=16)


HP = DensityHyperparameters(learning_rate=3e-3, batch_size=50, steps=250, seed=0, validation_fraction=0.0)


def _plan(n, sigma, steps=250):
    return ReleasePlan.for_noise(n, 50 / n, steps, noise_multiplier=sigma, delta=1e-5)


def test_dp_training_learns_and_records_its_cost():
    train, test = _data(500, 0), _data(500, 1)
    flow = _flow()
    before = mean_log_likelihood(flow, test)
    release = train_density(flow, train, HP, _plan(500, 0.8))
    assert mean_log_likelihood(flow, test) > before + 0.5
    r = release.as_dict()
    assert release.mechanism == "dp_sgd" and r["steps"] == 250 and r["sample_rate"] == pytest.approx(0.1)
    spend = epsilon_spent(0.8, 0.1, 250, 1e-5)
    assert r["epsilon_prv"] == spend.epsilon_prv and r["epsilon_rdp"] == spend.epsilon_rdp
    assert r["epsilon_pld"] == spend.epsilon_pld and spend.epsilon_pld_lower <= spend.epsilon_pld <= spend.epsilon_rdp
    assert r["mu"] == pytest.approx(gdp_mu(0.8, 0.1, 250))
    assert r["epsilon_gdp"] == pytest.approx(gdp_epsilon(r["mu"], 1e-5))
    assert r["epsilon"] == spend.epsilon_prv and r["noise_source"] == "os_entropy"
    assert "n" not in r and "expected_batch" not in r  # no count of private records in the record


def test_more_noise_learns_less_and_non_private_has_no_epsilon():
    train, test = _data(500, 0), _data(500, 1)
    scores = {}
    for sigma in (None, 0.8, 20.0):
        flow = _flow()
        release = train_density(flow, train, HP, None if sigma is None else _plan(500, sigma))
        scores[sigma] = mean_log_likelihood(flow, test)
        assert (release.epsilon is None) == (sigma is None)
    assert scores[None] > scores[20.0] and scores[0.8] > scores[20.0]


@pytest.mark.parametrize("mode", ["ghost", "hooks"])
def test_noise_is_fresh_unless_reproducible(mode):
    train = _data(200, 0)
    plan = _plan(200, 1.0, steps=20)
    flows = {k: _flow() for k in ("r1", "r2", "s1", "s2")}
    for k, flow in flows.items():
        noise = NoiseSource.reproducible("job", 5) if k.startswith("r") else NoiseSource.secret()
        release = train_density(flow, train, HP, plan, noise, grad_sample_mode=mode)
        assert release.noise_source == noise.kind
    same = lambda a, b: all(torch.equal(p, q) for p, q in zip(flows[a].parameters(), flows[b].parameters()))  # noqa: E731
    assert same("r1", "r2")  # reproducible noise: the same flow (not DP, for tests)
    assert not same("s1", "s2") and not same("r1", "s1")  # OS entropy: another release, another flow


@pytest.mark.parametrize("mode", ["ghost", "hooks"])
def test_a_plan_from_a_noisy_count_samples_the_data_at_its_rate(mode):
    """A plan built from a released count (100) trains over the 200 records there are: Poisson sampling at the
    plan's q (0.5), for exactly the plan's T steps (a plan never sees the exact count; the trainer does not ask)."""
    plan = _plan(100, 1.0, steps=40)
    release = train_density(_flow(), _data(200, 0), HP, plan, grad_sample_mode=mode, log_every=1)
    assert len(release.history) == plan.steps and plan.sample_rate == 0.5 and release.plan["steps"] == 40


def test_the_non_private_flow_stops_early_at_its_best_held_out_fit():
    """40 records, a wide flow and many steps: trained to the end it overfits (held-out log-likelihood falls); with
    a validation split it stops, returns its best state, and says when."""
    train, test = _data(40, 2), _data(500, 3)
    wide = DensityHyperparameters(learning_rate=2e-2, batch_size=20, steps=600, seed=0, validation_fraction=0.0)
    scores = {}
    for fraction in (0.0, 0.25):
        torch.manual_seed(0)
        flow = MAF(3, blocks=3, hidden_size=32)
        release = train_density(flow, train, DensityHyperparameters(**{**wide.__dict__,
                                                                      "validation_fraction": fraction}))
        scores[fraction] = mean_log_likelihood(flow, test)
        if fraction == 0.0:
            assert release.early_stopping is None
        else:
            stopped = release.early_stopping
            assert stopped["stopped_early"] and stopped["best_step"] < stopped["steps_taken"] < 600
            assert stopped["best_step"] % wide.eval_every == 0
    assert scores[0.25] > scores[0.0] + 0.2, scores  # measured: -3.02 against -3.32
