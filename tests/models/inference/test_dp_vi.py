"""DP-NF-VI (Su et al. 2023, Algorithm 2): the likelihood, the variational flow, exact per-record gradients against
torch.func, clipping and noise, the reference posterior, and NF-VI recovering a posterior known in closed form."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal
from torch.func import functional_call, grad, vmap

from privehr.models.dpsgd.noisy_step import clipped_sum as _clipped_sum
from privehr.models.inference.dp_vi import VIHyperparameters, per_record_gradients, posterior_summary, train_vi, untemper
from privehr.models.inference.likelihood import LIKELIHOODS, Likelihood, get_likelihood
from privehr.models.inference.posterior_reference import reference_posterior
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import ReleasePlan
from privehr.models.inference.repeated_measures import TRUE_BETA, NonlinearRepeatedMeasures, mean_function, simulate_repeated_measures
from privehr.models.nf.variational import VariationalFlow


class LinearGaussian(Likelihood):
    """y_i = beta0 + beta1 u_i + e_i, e ~ N(0, s^2), flat prior: the posterior is N(b_hat, s^2 (X'X)^-1) exactly."""

    name = "linear_gaussian_test"
    parameter_names = ("beta0", "beta1")
    record_names = ("u", "y")
    noise_sd = 0.5

    def log_likelihood(self, theta, records):
        u, y = records[:, None, 0], records[:, None, 1]
        mean = theta[..., 0] + theta[..., 1] * u
        return -0.5 * ((y - mean) / self.noise_sd) ** 2 - math.log(self.noise_sd * math.sqrt(2 * math.pi))


class LinearGaussianPrior(LinearGaussian):
    """The same with a N(0, 2^2) prior on each coefficient: exercises the prior's share of every l_i."""

    def log_prior(self, theta):
        return -0.5 * (theta / 2.0).pow(2).sum(-1)


def _linear_data(n=400, seed=0):
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, generator=g, dtype=torch.float64) * 2
    y = 0.3 + 1.5 * u + LinearGaussian.noise_sd * torch.randn(n, generator=g, dtype=torch.float64)
    x = torch.stack([torch.ones(n, dtype=torch.float64), u], 1)
    cov = LinearGaussian.noise_sd ** 2 * torch.linalg.inv(x.T @ x)
    return torch.stack([u, y], 1), torch.linalg.solve(x.T @ x, x.T @ y), cov


def _random_flow(dim, blocks=2, seed=0):
    torch.manual_seed(seed)
    flow = VariationalFlow(dim, blocks=blocks, hidden_size=8).double()
    with torch.no_grad():
        for p in flow.parameters():
            if p.requires_grad:
                p.normal_(0, 0.2)
    return flow


def test_the_repeated_measures_likelihood_is_the_multivariate_normal_of_the_integrated_random_effect():
    model = NonlinearRepeatedMeasures()
    records = simulate_repeated_measures(30, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    theta = torch.tensor(TRUE_BETA, dtype=torch.float64) + 0.1 * torch.randn(4, 5, generator=torch.Generator()
                                                                              .manual_seed(1), dtype=torch.float64)
    ours = model.log_likelihood(theta, records).numpy()
    cov = 0.2 ** 2 * np.eye(5) + 0.2 ** 2 * np.ones((5, 5))
    reference = np.array([[multivariate_normal(np.full(5, float(mean_function(r[:4], t))), cov).logpdf(r[4:].numpy())
                           for t in theta] for r in records])
    np.testing.assert_allclose(ours, reference, rtol=1e-10, atol=1e-10)


def test_the_score_is_the_gradient_of_each_record_and_draw():
    model = NonlinearRepeatedMeasures()
    records = simulate_repeated_measures(6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    theta = torch.tensor([TRUE_BETA, [0.1, 0.9, 0.7, -1.0, 0.5]], dtype=torch.float64)
    score = model.score(theta, records)
    for i in range(len(records)):
        for j in range(len(theta)):
            t = theta[j].clone().requires_grad_(True)
            (expected,) = torch.autograd.grad(model.log_likelihood(t[None], records[i:i + 1])[0, 0], t)
            torch.testing.assert_close(score[i, j], expected)


def test_the_registry_names_the_model_and_refuses_unknown_ones():
    assert isinstance(get_likelihood("nonlinear_repeated_measures"), NonlinearRepeatedMeasures)
    assert "nonlinear_repeated_measures" in LIKELIHOODS
    with pytest.raises(ValueError, match="unknown model"):
        get_likelihood("no_such_model")


def test_the_flow_density_is_the_base_density_over_the_jacobian_determinant():
    flow = _random_flow(5)
    z = torch.randn(4, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    _, log_q = flow(z)
    for i in range(len(z)):
        jac = torch.autograd.functional.jacobian(lambda v: flow(v[None])[0][0], z[i])
        expected = -0.5 * z[i].pow(2).sum() - 2.5 * math.log(2 * math.pi) - torch.logdet(jac)
        torch.testing.assert_close(log_q[i], expected)


@pytest.mark.parametrize("temperature", [1.0, 0.3])
def test_per_record_gradients_equal_torch_func_references(temperature):
    """g_i = J^T s_i + shared term, against vmap(grad(l_i)) of Algorithm 2's per-record loss, every parameter."""
    model = NonlinearRepeatedMeasures()
    records = simulate_repeated_measures(12, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    flow = _random_flow(5)
    flow.loc.data += torch.tensor(TRUE_BETA, dtype=torch.float64)
    z = torch.randn(9, 5, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    n = 50
    losses, grads = per_record_gradients(flow, model, records, z, n, temperature)
    params = {k: v.detach() for k, v in flow.named_parameters() if v.requires_grad}

    def loss_i(p, x):
        theta, log_q = functional_call(flow, p, (z,))
        return (log_q.mean() - model.log_prior(theta).mean()) / n - temperature * model.log_likelihood(theta, x[None]).mean()

    reference = vmap(grad(loss_i), in_dims=(None, 0))(params, records)
    assert set(grads) == set(reference)
    for name in grads:
        torch.testing.assert_close(grads[name], reference[name], rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(losses, vmap(loss_i, in_dims=(None, 0))(params, records))


def test_per_record_gradients_carry_the_priors_share():
    model = LinearGaussianPrior()
    records, _, _ = _linear_data(n=10)
    flow = _random_flow(2)
    z = torch.randn(7, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    _, grads = per_record_gradients(flow, model, records, z, n=10)
    params = {k: v.detach() for k, v in flow.named_parameters() if v.requires_grad}

    def loss_i(p, x):
        theta, log_q = functional_call(flow, p, (z,))
        return (log_q.mean() - model.log_prior(theta).mean()) / 10 - model.log_likelihood(theta, x[None]).mean()

    reference = vmap(grad(loss_i), in_dims=(None, 0))(params, records)
    for name in grads:
        torch.testing.assert_close(grads[name], reference[name], rtol=1e-9, atol=1e-11)


def test_clipping_bounds_every_record_and_sums_the_clipped_gradients():
    g = {"a": torch.tensor([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0]]), "b": torch.zeros(3, 1)}
    sums, norms = _clipped_sum(g, max_norm=1.0)
    torch.testing.assert_close(norms, torch.tensor([5.0, 0.5, 10.0]))
    torch.testing.assert_close(sums["a"], torch.tensor([0.6 + 0.3 + 0.6, 0.8 + 0.4 + 0.8]), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("column, value", [(4, 1e6), (1, -5.0), (0, 200.0)])
def test_one_extreme_record_moves_the_clipped_sum_by_at_most_c(column, value):
    """The sensitivity the noise is calibrated to, attacked: neighbouring batches differ by one record with an
    absurd value: an enormous gradient (x = 1e6), a log of a negative number (w2 = -5: NaN), an overflowing
    exp (w1 = 200: inf). The clipped sums stay finite and differ by at most C."""
    model = NonlinearRepeatedMeasures()
    records = simulate_repeated_measures(20, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    outlier = records[:1].clone()
    outlier[0, column] = value
    flow = _random_flow(5)
    flow.loc.data += torch.tensor(TRUE_BETA, dtype=torch.float64)
    z = torch.randn(16, 5, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    c = 2.0
    _, without = per_record_gradients(flow, model, records, z, n=100)
    _, with_ = per_record_gradients(flow, model, torch.cat([records, outlier]), z, n=100)
    raw = torch.sqrt(sum(g[-1].pow(2).sum() for g in with_.values()))
    clipped_without, _ = _clipped_sum(without, c)
    clipped_with, _ = _clipped_sum(with_, c)
    moved = torch.sqrt(sum((clipped_with[k] - clipped_without[k]).pow(2).sum() for k in with_))
    assert not (raw <= 1e6)  # enormous or not finite
    assert torch.isfinite(moved) and float(moved) <= c * (1 + 1e-9)


def test_an_empty_poisson_batch_contributes_nothing():
    model = NonlinearRepeatedMeasures()
    flow = _random_flow(5)
    z = torch.randn(8, 5, dtype=torch.float64)
    losses, grads = per_record_gradients(flow, model, torch.zeros(0, 9, dtype=torch.float64), z, n=100)
    sums, _ = _clipped_sum(grads, 1.0)
    assert losses.shape == (0,) and all(float(s.abs().sum()) == 0 for s in sums.values())


def _dp_fit(noise, steps=5):
    model = NonlinearRepeatedMeasures()
    records = simulate_repeated_measures(120, generator=torch.Generator().manual_seed(0))
    plan = ReleasePlan.for_mu(len(records), 0.25, steps, mu=1.0, delta=1e-5, max_grad_norm=1.0)
    torch.manual_seed(0)
    flow = VariationalFlow(5)
    hp = VIHyperparameters(learning_rate=0.01, lr_decay=1.0, draws=8, steps=steps, batch_size=30,
                           optimizer="adam")
    release = train_vi(flow, model, records, hp, plan, noise, log_every=1)
    return flow, release, plan


def test_a_dp_fit_takes_the_plans_steps_and_its_noise_is_secret_unless_asked():
    flow_a, release, plan = _dp_fit(NoiseSource.reproducible("t", 0))
    flow_b, _, _ = _dp_fit(NoiseSource.reproducible("t", 0))
    flow_c, secret, _ = _dp_fit(NoiseSource.secret())
    assert [h["step"] for h in release.history] == list(range(1, plan.steps + 1))
    assert release.plan == plan.record() and release.noise_source == "reproducible"
    assert secret.noise_source == "os_entropy" and secret.epsilon == plan.epsilon
    assert torch.equal(flow_a.loc, flow_b.loc)         # the reproducible switch reproduces
    assert not torch.equal(flow_a.loc, flow_c.loc)     # OS entropy does not


def test_the_noise_dominates_a_tiny_budget():
    """sigma C / (q n) at mu 0.01 swamps the clipped signal: the fitted location wanders far from the posterior."""
    model = NonlinearRepeatedMeasures()
    records = simulate_repeated_measures(200, generator=torch.Generator().manual_seed(0))
    hp = VIHyperparameters(learning_rate=0.05, lr_decay=1.0, draws=16, steps=40, batch_size=50, optimizer="rmsprop")
    spread = {}
    for mu in (0.01, 50.0):
        plan = ReleasePlan.for_mu(len(records), 0.25, 40, mu=mu, delta=1e-5, max_grad_norm=1.0)
        locs = []
        for k in range(3):
            torch.manual_seed(0)
            flow = VariationalFlow(5)
            train_vi(flow, model, records, hp, plan, NoiseSource.reproducible("noise", mu, k))
            locs.append(flow.loc.detach().clone())
        spread[mu] = float(torch.stack(locs).std(0).mean())
    assert spread[0.01] > 5 * spread[50.0]


def test_the_reference_posterior_matches_a_closed_form_posterior():
    model = LinearGaussian()
    records, mean, cov = _linear_data()
    ref = reference_posterior(model, records, draws=20000, generator=torch.Generator().manual_seed(0))
    sd = cov.diagonal().sqrt()
    assert ref.reliable
    np.testing.assert_allclose(ref.summary["mean"], mean.numpy(), atol=0.05 * float(sd.min()))
    np.testing.assert_allclose(ref.summary["sd"], sd.numpy(), rtol=0.03)
    assert ref.summary["correlation"][0][1] == pytest.approx(float(cov[0, 1] / (sd[0] * sd[1])), abs=0.02)


def _linear_vi_draws(temperature: float = 1.0):
    """Non-private NF-VI on the linear model: (draws of the fitted flow, exact posterior mean, covariance)."""
    records, mean, cov = _linear_data()
    torch.manual_seed(0)
    flow = VariationalFlow(2, blocks=1, hidden_size=8).double()
    hp = VIHyperparameters(learning_rate=0.01, lr_decay=0.999, draws=200, steps=2500, batch_size=400,
                           optimizer="rmsprop", temperature=temperature)
    train_vi(flow, LinearGaussian(), records, hp)
    return flow.sample(20000, torch.Generator().manual_seed(1)), mean, cov


def test_non_private_nf_vi_recovers_a_closed_form_posterior():
    draws, mean, cov = _linear_vi_draws()
    fit = posterior_summary(draws)
    sd = cov.diagonal().sqrt()
    np.testing.assert_allclose(fit["mean"], mean.numpy(), atol=0.2 * float(sd.min()))
    np.testing.assert_allclose(fit["sd"], sd.numpy(), rtol=0.2)
    assert fit["correlation"][0][1] == pytest.approx(float(cov[0, 1] / (sd[0] * sd[1])), abs=0.1)


def test_tempered_training_fits_the_power_posterior_and_untempering_recovers_the_posterior():
    """tau = 0.25: the fitted flow has every SD doubled and the same correlation; shrunk back, the posterior."""
    draws, mean, cov = _linear_vi_draws(temperature=0.25)
    tempered, back = posterior_summary(draws), posterior_summary(untemper(draws, 0.25))
    sd, rho = cov.diagonal().sqrt(), float(cov[0, 1] / cov.diagonal().prod().sqrt())
    np.testing.assert_allclose(tempered["sd"], 2 * sd.numpy(), rtol=0.2)
    np.testing.assert_allclose(back["sd"], sd.numpy(), rtol=0.2)
    np.testing.assert_allclose(back["mean"], mean.numpy(), atol=0.3 * float(sd.min()))
    assert back["correlation"][0][1] == pytest.approx(rho, abs=0.1)


def test_untempering_a_power_posterior_restores_the_variances_and_keeps_the_correlation():
    g = torch.Generator().manual_seed(0)
    cov = torch.tensor([[1.0, 0.6], [0.6, 1.0]], dtype=torch.float64)
    tau = 0.1
    tempered = torch.randn(50000, 2, generator=g, dtype=torch.float64) @ torch.linalg.cholesky(cov / tau).T + 3.0
    back = posterior_summary(untemper(tempered, tau))
    np.testing.assert_allclose(back["sd"], [1.0, 1.0], rtol=0.02)
    np.testing.assert_allclose(back["mean"], [3.0, 3.0], atol=0.05)
    assert back["correlation"][0][1] == pytest.approx(0.6, abs=0.02)
