"""DP-trained ExpM flows: per-record gradients against torch.func, the shared term against autograd, clipping bounds
one record's influence, training follows the plan with fresh noise, and the flow approaches the ExpM target."""

import math

import pytest
import torch
from torch.func import grad
from torch.nn.functional import binary_cross_entropy_with_logits

from privehr.models.classifiers import build_classifier, classifier_inputs
from privehr.models.classifiers.logistic_regression import LogisticRegression
from privehr.models.dpsgd.noisy_step import clipped_sum, poisson_indices
from privehr.models.expm.batched_utility import BatchedUtility
from privehr.models.expm import dp_trained
from privehr.models.expm.dp_trained import (DPExpMHyperparameters, batches_together, gaussian_parameter_flow,
                                            record_gradients, shared_gradients, train_dp_expm, train_dp_expm_many)
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


def _family(utility, k_flows):
    """K flows of one family as the grid trains them: epsilons, chosen C, temperatures, L1 weights, learning rates and
    step counts all differ."""
    plans = [ReleasePlan.for_epochs(utility.n, batch_size=40, epochs=2 + k % 2, target_epsilon=(0.5, 2.0, 8.0)[k % 3],
                                    delta=1e-5).clipped_at(0.2 + 0.3 * k) for k in range(k_flows)]
    hps = [DPExpMHyperparameters(temperature=5.0 + 10 * k, learning_rate=0.02 * (1 + k % 2), draws=3, init_scale=0.1,
                                 l1=1e-3 * (k % 2)) for k in range(k_flows)]
    return plans, hps


@pytest.mark.parametrize("extreme", [1e200, math.inf, math.nan])
@pytest.mark.parametrize("loss", ["l2", "bce"])
@pytest.mark.parametrize("k_flows", [1, 4])
def test_flows_trained_together_equal_each_trained_alone(k_flows, loss, extreme):
    """Under reproducible noise, K flows trained together (the factored norms and sums, a padded batch per flow) end
    where train_dp_expm takes each alone, in float64 to rounding: the same samples, draws, clipping and noise, every
    flow its own plan, step count and hyperparameters. Two records are extreme (a gradient norm that overflows, or a
    feature that is inf or NaN; one of them record 0, whose row the padding copies): both paths give them no weight,
    and no flow turns NaN."""
    utility, _ = _simulated(n=300)
    x = utility.inputs[0].double()
    x[7] = extreme
    x[0, 1] = extreme  # record 0 too: padding rows copy it
    utility = BatchedUtility(LogisticRegression(x.shape[1]).double(), (x,), utility.y.double(), l1=1e-3, loss=loss)
    plans, hps = _family(utility, k_flows)
    noises = lambda: [NoiseSource.reproducible("family", k) for k in range(k_flows)]  # noqa: E731
    calls = []
    together = train_dp_expm_many(utility, hps, plans, noises(), lambda step, total: calls.append((step, total)))
    alone = [train_dp_expm(utility, hp, plan, noise)[0] for hp, plan, noise in zip(hps, plans, noises())]
    assert batches_together(utility, hps) and calls[-1] == (max(p.steps for p in plans),) * 2
    assert len({p.steps for p in plans}) == min(k_flows, 2)
    sampler = NoiseSource.reproducible("family", 0).torch_generator("sampling")
    assert any(7 in poisson_indices(plans[0], sampler, utility.n).tolist() for _ in range(plans[0].steps))
    for a, b in zip(together, alone):
        assert not a.training and torch.isfinite(a.shift).all()
        assert torch.allclose(a.shift, b.shift, rtol=0, atol=1e-12)
        assert torch.allclose(a.log_scale, b.log_scale, rtol=0, atol=1e-12)
        assert float(a.shift.detach().abs().max()) > 1e-3  # trained, not both at the start


def test_flows_trained_together_draw_fresh_noise_each():
    """K identical flows (one plan, one configuration) trained together on the same records release K different
    flows: each has its own sample, draws and noise from OS entropy, and none is another's copy."""
    utility, _ = _simulated(n=300)
    plan = ReleasePlan.for_epochs(utility.n, batch_size=40, epochs=2, target_epsilon=1.0, delta=1e-5)
    hp = DPExpMHyperparameters(temperature=10.0, learning_rate=0.05, draws=2, init_scale=0.1)
    flows = train_dp_expm_many(utility, [hp] * 3, [plan] * 3, [NoiseSource.secret() for _ in range(3)])
    shifts = [f.shift.detach() for f in flows]
    assert all(not torch.equal(shifts[i], shifts[j]) for i in range(3) for j in range(i + 1, 3))
    assert all(float((s - shifts[0]).abs().max()) > 1e-4 for s in shifts[1:])


def test_a_family_that_cannot_step_together_trains_one_flow_at_a_time():
    """GRU-D's record gradients go through torch.func, and flows with different draw counts cannot share a step's
    products: each trains as train_dp_expm trains it."""
    utility, flow, _ = _problem("grud")
    plan = ReleasePlan.for_epochs(utility.n, batch_size=20, epochs=1, target_epsilon=2.0, delta=1e-5)
    hps = [DPExpMHyperparameters(temperature=5.0, learning_rate=0.05, draws=d, init_scale=0.1) for d in (2, 3)]
    assert not batches_together(utility, hps[:1])
    lr, _ = _simulated(n=100)
    assert not batches_together(lr, hps) and batches_together(lr, hps[:1])
    utility = BatchedUtility(utility.model.float(), tuple(t.float() for t in utility.inputs), utility.y.float())
    together = train_dp_expm_many(utility, hps, [plan] * 2, [NoiseSource.reproducible("g", k) for k in range(2)])
    alone = [train_dp_expm(utility, hp, plan, NoiseSource.reproducible("g", k))[0] for k, hp in enumerate(hps)]
    assert all(torch.equal(a.shift, b.shift) for a, b in zip(together, alone))


def test_one_record_moves_the_flows_clipped_sums_by_at_most_their_c():
    """The attack on the batched path's clipping (float32, as it trains): in every flow's batch one record with a huge
    feature whose coefficients are chosen so that every sum in its gradient cancels (sum_j c_ij, sum_j c_ij cen_jd and
    the bias's), a form an expanded norm's rounding would report as zero. Each flow's clipped sums with and without
    that record differ by at most its C, and the sums equal those of the per-record gradients clipped one by one."""
    from privehr.models.expm.dp_trained import clipped_record_sums

    g = torch.Generator().manual_seed(11)
    k, m, features, width = 6, 4, 3, 5
    centred = torch.randn(k, m, features + 1, generator=g, dtype=torch.float64) * 0.05
    x = torch.randn(k, width, features, generator=g, dtype=torch.float64)
    x[:, 0] = 0.0
    x[:, 0, 0] = 1e6  # row 0 of each flow: one huge feature
    c = torch.randn(k, m, width, generator=g, dtype=torch.float64) * 0.3
    constraints = torch.cat([torch.ones(k, 1, m, dtype=torch.float64), centred[:, None, :, 0],
                             centred[:, None, :, features]], 1)
    c[:, :, 0] = torch.linalg.svd(constraints).Vh[:, -1] * 2.0  # every sum of row 0's gradient zero in exact terms
    x, c, centred = x.float(), c.float(), centred.float()
    clip = torch.tensor([0.1, 0.5, 1.0, 2.0, 5.0, 10.0])
    valid = torch.ones(k, width, dtype=torch.bool)
    with_it = clipped_record_sums(x, x.square().sum(2), c, centred, clip, valid)
    without = clipped_record_sums(x, x.square().sum(2), c, centred, clip, valid & (torch.arange(width) > 0))
    moved = torch.sqrt(sum((a.double() - b.double()).square().sum(1) for a, b in zip(with_it, without)))
    assert (moved <= clip * (1 + 1e-4)).all(), (moved / clip).max()
    for flow in range(k):  # against record_gradients' per-record gradients clipped by clipped_sum, flow by flow
        a = torch.cat([x[flow], torch.ones(width, 1)], 1)
        grads = {"shift": c[flow].sum(0)[:, None] * a, "log_scale": a * (c[flow].T @ centred[flow])}
        expected, _ = clipped_sum(grads, float(clip[flow]))
        assert torch.allclose(with_it[0][flow], expected["shift"], rtol=1e-4, atol=1e-4 * float(clip[flow]))
        assert torch.allclose(with_it[1][flow], expected["log_scale"], rtol=1e-4, atol=1e-4 * float(clip[flow]))


@pytest.mark.parametrize("chunk_values", [1, 700, dp_trained.CHUNK_VALUES])
def test_flows_gathered_a_chunk_at_a_time_in_float32_end_where_each_trains_alone(monkeypatch, chunk_values):
    """As the pipeline trains them (float32, 120 steps), with the flows' batches gathered a chunk of flows at a time:
    chunks of one flow, of one to three of the four as each step's widest batch varies (a last chunk narrower than
    the others), or all four. Each flow ends where it ends trained alone, to float32 rounding (measured 2.4e-7 here;
    bench/README.md: 1e-4 on the demo's 7,488 features)."""
    utility, _ = _simulated(n=300)
    plans = [ReleasePlan.for_epochs(utility.n, batch_size=40, epochs=15, target_epsilon=(0.5, 2.0, 8.0)[k % 3],
                                    delta=1e-5).clipped_at(0.2 + 0.3 * k) for k in range(4)]
    hps = [DPExpMHyperparameters(temperature=5.0 + 10 * k, learning_rate=0.02 * (1 + k % 2), draws=3, init_scale=0.1,
                                 l1=1e-3 * (k % 2)) for k in range(4)]
    gathered, sizes = dp_trained._gathered, []

    def spy(x_all, index, buffers):
        sizes.append(index.shape[0])
        return gathered(x_all, index, buffers)

    monkeypatch.setattr(dp_trained, "CHUNK_VALUES", chunk_values)
    monkeypatch.setattr(dp_trained, "_gathered", spy)
    noises = lambda: [NoiseSource.reproducible("family", k) for k in range(4)]  # noqa: E731
    together = train_dp_expm_many(utility, hps, plans, noises())
    alone = [train_dp_expm(utility, hp, plan, noise)[0] for hp, plan, noise in zip(hps, plans, noises())]
    assert utility.y.dtype == torch.float32 and min(p.steps for p in plans) >= 110
    assert set(sizes) == {1: {1}, 700: {1, 2, 3}}.get(chunk_values, {4}), sorted(set(sizes))
    for a, b in zip(together, alone):
        assert float(a.shift.detach().abs().max()) > 0.5  # trained
        assert torch.allclose(a.shift, b.shift, rtol=0, atol=1e-5)
        assert torch.allclose(a.log_scale, b.log_scale, rtol=0, atol=1e-5)
