"""DP-HFlow (Lee et al. 2022): the spline, the low-rank linear flow and the dequantizers are exact bijections with the
right log-dets, the flow's density integrates to one, its per-sample gradients (every parameter, uniform and
variational dequantization) equal torch.func's, sampling gives valid codes, and short non-private and DP fits run
and learn."""

import math

import pytest
import torch
from torch.func import functional_call, grad, vmap

from privehr.models.nf.dequantization import VariationalDequantizer, discrete_to_flow, flow_to_discrete
from privehr.models.dpsgd.density import DensityHyperparameters, mean_log_likelihood, train_density
from privehr.models.dpsgd.ghost_clipping import clipped_gradient_sum, clipped_layers
from privehr.models.nf.hflow import HFlow
from privehr.models.nf.low_rank_linear import LowRankLinear
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import ReleasePlan
from privehr.models.nf.rq_spline import rational_quadratic_spline


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/models/conftest.py


def _randomise(flow, seed=1, scale=0.3):
    """Move every parameter off its identity start (the zero output layers, B = 0) so every term is exercised."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in flow.named_parameters():
            if p.requires_grad:
                p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return flow


def _flow(dequantization="uniform", dtype=torch.float64, **kwargs):
    torch.manual_seed(0)
    kwargs = {"blocks": 3, "hidden_size": 10, "bins": 5, "rank": 2, **kwargs}
    return _randomise(HFlow(2, [2, 5], dequantization=dequantization, **kwargs)).to(dtype)


def _rows(n, seed=2, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    cont = torch.randn(n, 2, generator=g, dtype=dtype) * 1.2
    return torch.cat([cont, torch.randint(0, 2, (n, 1), generator=g).to(dtype),
                      torch.randint(0, 5, (n, 1), generator=g).to(dtype)], 1)


# --- the pieces ---------------------------------------------------------------------------------------------


def test_spline_is_invertible_with_the_autograd_log_det_and_identity_tails():
    g = torch.Generator().manual_seed(0)
    n, bins, bound = 400, 6, 3.0
    w = torch.randn(n, bins, generator=g, dtype=torch.float64) * 2
    h = torch.randn(n, bins, generator=g, dtype=torch.float64) * 2
    d = torch.randn(n, bins - 1, generator=g, dtype=torch.float64) * 2
    x = torch.linspace(-5, 5, n, dtype=torch.float64).requires_grad_(True)
    y, log_det = rational_quadratic_spline(x, w, h, d, bound)
    (dy,) = torch.autograd.grad(y.sum(), x)  # elementwise: the Jacobian is diagonal
    torch.testing.assert_close(log_det, dy.log(), rtol=1e-9, atol=1e-9)
    x_back, inverse_log_det = rational_quadratic_spline(y.detach(), w, h, d, bound, inverse=True)
    torch.testing.assert_close(x_back, x.detach(), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(inverse_log_det, -log_det.detach(), rtol=1e-9, atol=1e-9)
    outside = x.detach().abs() > bound
    assert bool(outside.any()) and torch.equal(y.detach()[outside], x.detach()[outside])
    assert torch.all(log_det.detach()[outside] == 0)
    one = [t[:1].expand(n, -1) for t in (w, h, d)]  # a single spline on a fine grid: increasing, continuous at +-B
    y_one, _ = rational_quadratic_spline(x.detach(), *one, bound)
    assert bool((y_one[1:] > y_one[:-1]).all())
    near = torch.tensor([-bound - 1e-9, -bound + 1e-9, bound - 1e-9, bound + 1e-9], dtype=torch.float64)
    y_near, _ = rational_quadratic_spline(near, *[t[:4] for t in one], bound)
    torch.testing.assert_close(y_near, near, rtol=0, atol=1e-8)
    # the knots map -B -> -B and B -> B
    ends, _ = rational_quadratic_spline(torch.tensor([-bound, bound], dtype=torch.float64), w[:2], h[:2], d[:2], bound)
    torch.testing.assert_close(ends, torch.tensor([-bound, bound], dtype=torch.float64))


def test_low_rank_linear_is_w_x_plus_b_with_lemma_log_det_and_woodbury_inverse():
    torch.manual_seed(0)
    layer = _randomise(LowRankLinear(5, rank=2), scale=0.5).double()
    x = torch.randn(7, 5, dtype=torch.float64)
    z, log_det = layer.transform(x)
    w = layer.weight()
    torch.testing.assert_close(z, x @ w.T + layer.bias)
    torch.testing.assert_close(log_det, torch.linalg.slogdet(w).logabsdet.expand(7))
    torch.testing.assert_close(layer.inverse(z), x)
    assert bool((layer.log_scale.exp() > 0).all())


def test_variational_posterior_log_q_is_the_density_of_u():
    """log q(u | x) = log N(eps) - log|det du/deps| (the map is autoregressive: a triangular Jacobian); u in (0, 1)."""
    torch.manual_seed(0)
    deq = _randomise(VariationalDequantizer([3, 4, 2], hidden_size=8, components=3)).double()
    codes = torch.tensor([[2.0, 0.0, 1.0]], dtype=torch.float64)
    eps = torch.randn(1, 3, dtype=torch.float64)
    u, log_q = deq(codes, eps)
    jac = torch.autograd.functional.jacobian(lambda e: deq(codes, e[None])[0][0], eps[0])
    assert torch.allclose(jac.triu(1), torch.zeros(3, 3, dtype=torch.float64))
    expected = (-0.5 * eps.square() - 0.5 * math.log(2 * math.pi)).sum() - torch.linalg.slogdet(jac).logabsdet
    torch.testing.assert_close(log_q[0], expected)
    many, _ = deq(codes.expand(500, 3), torch.randn(500, 3, dtype=torch.float64))
    assert bool(((many > 0) & (many < 1)).all())


def test_discrete_columns_map_into_the_continuous_range_and_back():
    k = [2, 5, 300]
    codes = torch.tensor([[0.0, 0.0, 0.0], [1.0, 4.0, 299.0], [1.0, 2.0, 150.0]])
    for u in (0.0, 0.5, 0.999):
        y, log_det = discrete_to_flow(codes + u, k)
        assert bool((y >= -2).all() and (y < 2).all())
        assert torch.equal(flow_to_discrete(y, k), codes)
        torch.testing.assert_close(log_det, torch.full((3,), sum(math.log(4 / kj) for kj in k)))
    assert torch.equal(flow_to_discrete(torch.tensor([[-9.0, 9.0, 9.0]]), k), torch.tensor([[0.0, 4.0, 299.0]]))


# --- the flow -----------------------------------------------------------------------------------------------


def test_transform_log_det_equals_the_autograd_jacobian():
    flow = _flow()
    y = torch.randn(3, 4, dtype=torch.float64) * 1.5
    _, log_det = flow.transform(y)
    for i in range(3):
        jac = torch.autograd.functional.jacobian(lambda row: flow.transform(row[None])[0][0], y[i])
        torch.testing.assert_close(log_det[i], torch.linalg.slogdet(jac).logabsdet)
    torch.testing.assert_close(flow.inverse(flow.transform(y)[0]), y)


@pytest.mark.parametrize("dims", [1, 2])
def test_continuous_density_integrates_to_one(dims):
    torch.manual_seed(0)
    flow = _randomise(HFlow(dims, [], blocks=3, hidden_size=8, bins=5, rank=1), scale=0.4).double()
    with torch.no_grad():  # keep every W well-conditioned, so the mass lies on the grid
        for linear in flow.linears:
            linear.right.mul_(0.3)
    points = 3001 if dims == 1 else 401  # a Riemann sum: the 2-D one converges slowly across the splines' knots
    grid = torch.linspace(-9, 9, points, dtype=torch.float64)
    step = grid[1] - grid[0]
    mesh = grid[:, None] if dims == 1 else torch.cartesian_prod(grid, grid)
    with torch.no_grad():
        mass = flow.log_prob(mesh).exp().sum() * step ** dims
    assert float(mass) == pytest.approx(1.0, abs=1e-3 if dims == 1 else 1e-2)


def test_a_discrete_column_gets_probability_mass_at_most_one():
    """Uniform dequantization: P(x) = int_0^1 p(x + u) du is a pmf up to the mass the flow puts outside [0, k)."""
    torch.manual_seed(0)
    flow = _randomise(HFlow(0, [6], blocks=2, hidden_size=8, bins=5), scale=0.4).double()
    u = (torch.arange(400, dtype=torch.float64) + 0.5) / 400
    codes = torch.arange(6, dtype=torch.float64)
    rows = codes.repeat_interleave(400)[:, None]
    with torch.no_grad():
        p = flow.log_prob(rows, noise=u.repeat(6)[:, None]).exp().view(6, 400).mean(1)
    assert 0.5 < float(p.sum()) <= 1.0 + 1e-6


def test_noise_fixes_the_draw_and_the_generator_reproduces_it():
    for dequantization in ("uniform", "variational"):
        flow, x = _flow(dequantization), _rows(6)
        noise = flow.dequantizer.draw(6, torch.Generator().manual_seed(3), like=x)
        a = flow.log_prob(x, noise=noise)
        torch.testing.assert_close(a, flow.log_prob(x, generator=torch.Generator().manual_seed(3)))
        torch.testing.assert_close(a, flow(x, noise))
        assert not torch.allclose(a, flow.log_prob(x, generator=torch.Generator().manual_seed(4)))


@pytest.mark.parametrize("dequantization", ["uniform", "variational"])
def test_sample_returns_scaled_continuous_values_and_valid_codes(dequantization):
    torch.manual_seed(0)
    flow = _randomise(HFlow(2, [2, 7, 300], dequantization=dequantization, hidden_size=8, bins=4), scale=0.5)
    rows = flow.sample(500, torch.Generator().manual_seed(0))
    assert rows.shape == (500, 5) and bool(torch.isfinite(rows).all())
    for j, k in enumerate([2, 7, 300]):
        codes = rows[:, 2 + j]
        assert torch.equal(codes, codes.floor()) and codes.min() >= 0 and codes.max() <= k - 1
    assert torch.equal(rows, flow.sample(500, torch.Generator().manual_seed(0)))


# --- per-sample gradients -----------------------------------------------------------------------------------


def _reference(model, x, noise):
    params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}
    frozen = {k: v.detach() for k, v in model.named_parameters() if not v.requires_grad}

    def one(p, xi, ni):
        return -functional_call(model, {**p, **frozen}, (xi[None], ni[None])).sum()

    return vmap(grad(one), in_dims=(None, 0, 0))(params, x, noise)


@pytest.mark.parametrize("dequantization", ["uniform", "variational"])
@pytest.mark.parametrize("clip", [0.05, 1e6])
def test_per_sample_gradients_of_every_parameter_match_torch_func(dequantization, clip):
    flow, x = _flow(dequantization), _rows(10)
    noise = flow.dequantizer.draw(10, torch.Generator().manual_seed(5), like=x)
    reference = _reference(flow, x, noise)
    named = {k: v for k, v in flow.named_parameters() if v.requires_grad}
    assert set(reference) == set(named)  # every trainable tensor, the dequantizer's included when variational
    assert any(n.startswith("dequantizer.") for n in named) == (dequantization == "variational")
    assert len(clipped_layers(flow)) == (2 + 3 + (2 if dequantization == "variational" else 0))
    reference_norms = torch.sqrt(sum(g.flatten(1).square().sum(1) for g in reference.values()))
    losses, norms, sums = clipped_gradient_sum(flow, lambda m, xb, nb: -m.log_prob(xb, noise=nb), (x, noise), clip)
    torch.testing.assert_close(losses, -flow.log_prob(x, noise=noise).detach())
    torch.testing.assert_close(norms, reference_norms, rtol=1e-7, atol=1e-9)
    factor = (clip / (reference_norms + 1e-6)).clamp(max=1.0)
    assert bool((factor < 1).any()) == (clip < 1)
    assert set(sums) == set(named.values())
    for name, g in reference.items():
        expected = (factor.view(-1, *[1] * (g.dim() - 1)) * g).sum(0)
        torch.testing.assert_close(sums[named[name]], expected, rtol=1e-7, atol=1e-9, msg=name)
        assert float(g.abs().max()) > 0, name  # every parameter really gets a gradient


def test_float32_per_sample_gradients_match_too():
    flow, x = _flow("variational", dtype=torch.float32), _rows(8, dtype=torch.float32)
    noise = flow.dequantizer.draw(8, torch.Generator().manual_seed(6), like=x)
    reference = _reference(flow, x, noise)
    _, norms, _ = clipped_gradient_sum(flow, lambda m, xb, nb: -m.log_prob(xb, noise=nb), (x, noise), 1e6)
    torch.testing.assert_close(norms, torch.sqrt(sum(g.flatten(1).square().sum(1) for g in reference.values())),
                               rtol=1e-4, atol=1e-5)


# --- fits ---------------------------------------------------------------------------------------------------


def _table(n, seed):
    """Two correlated continuous columns (a bimodal one), a binary column with frequency 0.3 that depends on
    them, and a 4-level categorical."""
    g = torch.Generator().manual_seed(seed)
    mode = (torch.rand(n, generator=g) < 0.5).float()
    a = (2 * mode - 1) * 1.0 + 0.35 * torch.randn(n, generator=g)
    b = 0.6 * a + 0.4 * torch.randn(n, generator=g)
    binary = (torch.rand(n, generator=g) < 0.15 + 0.3 * mode).float()  # overall 0.3
    category = torch.multinomial(torch.tensor([0.5, 0.2, 0.2, 0.1]), n, replacement=True, generator=g).float()
    return torch.stack([a, b, binary, category], 1)


def test_a_short_non_private_fit_learns_the_table():
    """About 2 s on one idle core."""
    train, test = _table(400, 0), _table(400, 1)
    torch.manual_seed(0)
    flow = HFlow(2, [2, 4], blocks=3, hidden_size=16, bins=8, rank=2)
    before = mean_log_likelihood(flow, test)
    release = train_density(flow, train, DensityHyperparameters(learning_rate=1e-2, batch_size=100, steps=300, seed=0,
                                                                   validation_fraction=0.0))
    after = mean_log_likelihood(flow, test)
    assert release.mechanism == "non_private" and after > before + 1.0, (before, after)
    rows = flow.sample(4000, torch.Generator().manual_seed(0))
    assert float(rows[:, 2].mean()) == pytest.approx(float(train[:, 2].mean()), abs=0.1)  # 0.31 in the data
    frequencies = torch.bincount(rows[:, 3].long(), minlength=4).float() / 4000
    truth = torch.bincount(train[:, 3].long(), minlength=4).float() / 400
    assert float((frequencies - truth).abs().max()) < 0.1
    assert float(torch.corrcoef(rows[:, :2].T)[0, 1]) > 0.6  # the linear dependence of b on a (0.83 in the data)


@pytest.mark.parametrize("clipping", ["flat", "per_layer", "per_unit", "sparsified"])
def test_a_short_dp_fit_runs_with_every_clipping_mode(clipping):
    train = _table(200, 0)
    torch.manual_seed(0)
    flow = HFlow(2, [2, 4], blocks=2, hidden_size=16, bins=6, dequantization="variational")
    start = {k: v.detach().clone() for k, v in flow.named_parameters() if v.requires_grad}
    plan = ReleasePlan.for_noise(200, 0.2, 15, noise_multiplier=1.0, delta=1e-5)
    release = train_density(flow, train, DensityHyperparameters(learning_rate=1e-2), plan,
                            NoiseSource.reproducible("hflow", clipping), log_every=5, clipping=clipping, sparsity=0.5)
    assert release.mechanism == "dp_sgd" and release.noise_source == "reproducible" and len(release.history) == 3
    assert all(math.isfinite(h["train_nll"]) for h in release.history)
    moved = {k for k, v in flow.named_parameters() if k in start and not torch.equal(v.detach(), start[k])}
    assert moved == set(start)  # every parameter got its noised update
    assert bool(torch.isfinite(flow.sample(50, torch.Generator().manual_seed(0))).all())


@pytest.mark.parametrize("mode", ["ghost", "hooks"])
@pytest.mark.parametrize("dequantization", ["uniform", "variational"])
def test_dp_training_draws_its_dequantization_noise_from_the_release_stream(mode, dequantization):
    """An attack on an earlier version: the dequantization noise came from torch's global generator, which the
    model's initialisation seeds from the public job id, so an attacker could replay which noise each record got
    (and removing a record shifted every later record's noise). Now DP training never touches the global
    generator: with the same release stream, any global state gives the same flow."""
    train = _table(120, 3)
    plan = ReleasePlan.for_noise(120, 0.25, 8, noise_multiplier=1.0, delta=1e-5)

    def fit(global_seed):
        torch.manual_seed(0)
        flow = HFlow(2, [2, 4], blocks=1, hidden_size=8, bins=4, dequantization=dequantization)
        torch.manual_seed(global_seed)
        state = torch.get_rng_state()
        train_density(flow, train, DensityHyperparameters(learning_rate=1e-2), plan,
                      NoiseSource.reproducible("dequantize-stream"), grad_sample_mode=mode)
        assert torch.equal(torch.get_rng_state(), state), "DP training drew from torch's global generator"
        return torch.cat([p.detach().flatten() for p in flow.parameters()])

    assert torch.equal(fit(1), fit(2))
