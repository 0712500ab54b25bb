"""Ghost clipping: per-sample norms and clipped sums equal torch.func's per-sample gradients (MAF, GRU-D, logistic
regression, both losses), and a DP-SGD step by ghost clipping equals one by Opacus's hooks with the same randomness."""

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from privehr.models.dpsgd.trainer import DPSGDHyperparameters, train_dp_sgd
from privehr.models.dpsgd.ghost_clipping import clipped_gradient_sum, clipped_layers
from privehr.models.classifiers.grud import GRUD
from privehr.models.classifiers.logistic_regression import LogisticRegression
from privehr.models.classifiers.losses import per_sample_loss
from privehr.models.nf.maf import MAF
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import ReleasePlan


def _flow():
    torch.manual_seed(0)
    flow = MAF(5, blocks=3, hidden_size=12, hidden_layers=2)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for made in flow.blocks:
            made.output.weight.copy_(0.3 * torch.randn(made.output.weight.shape, generator=g))
    return flow


def _classifier(name, batch, seed=0):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    if name == "logistic_regression":
        return LogisticRegression(7), (torch.randn(batch, 7, generator=g),)
    # F = 8, H = 6, T = 8: the input gates (16 -> 18, used at 8 hours) take the Gram path, 8 (16 + 18) <= 16 * 18,
    # the hidden decay and the recurrent layers the materialised one, so both norm formulas are exercised; delta
    # spans both sides of the decays' relu
    mask = (torch.rand(batch, 8, 8, generator=g) < 0.4).float()
    delta = torch.randint(0, 6, (batch, 8, 8), generator=g).float() * (1 - mask)
    model = GRUD(8, 6, x_mean=torch.randn(8, generator=g))
    with torch.no_grad():
        model.input_decay.bias.copy_(torch.linspace(-0.45, 0.25, 8))  # none at the kink
        model.hidden_decay.bias.add_(-0.2)
    return model, (torch.randn(batch, 8, 8, generator=g) * mask, mask, delta)


def _reference(model, loss_of_one, inputs):
    """Per-sample gradients by vmap(grad) of a single sample's loss."""
    params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}
    frozen = {k: v.detach() for k, v in model.named_parameters() if not v.requires_grad}
    buffers = dict(model.named_buffers())

    def one(p, *sample):
        return loss_of_one(lambda *xs: functional_call(model, ({**p, **frozen}, buffers), xs), *sample)

    return params, vmap(grad(one), in_dims=(None,) + (0,) * len(inputs))(params, *inputs)


def _check(model, losses_fn, inputs, reference, clip):
    names = list(reference)
    reference_norms = torch.sqrt(sum(reference[n].flatten(1).pow(2).sum(1) for n in names))
    losses, norms, sums = clipped_gradient_sum(model, losses_fn, inputs, clip)
    torch.testing.assert_close(norms, reference_norms, rtol=1e-4, atol=1e-5)
    factor = (clip / (reference_norms + 1e-6)).clamp(max=1.0)
    named = dict(model.named_parameters())
    assert set(sums) == {named[n] for n in names}
    for n in names:
        expected = (factor.view(-1, *[1] * (reference[n].dim() - 1)) * reference[n]).sum(0)
        torch.testing.assert_close(sums[named[n]], expected, rtol=1e-4, atol=1e-5, msg=n)
    assert bool((factor < 1).any()) == (clip < 1e3)  # the small clips really clip
    return losses


@pytest.mark.parametrize("clip", [0.05, 5.0, 1e6])
def test_maf_norms_and_clipped_sum_match_torch_func(clip):
    flow = _flow()
    x = torch.randn(12, 5, generator=torch.Generator().manual_seed(2))
    _, reference = _reference(flow, lambda f, xi: -f(xi.unsqueeze(0)).sum(), (x,))
    losses = _check(flow, lambda m, xb: -m.log_prob(xb), (x,), reference, clip)
    torch.testing.assert_close(losses, -flow.log_prob(x).detach())


@pytest.mark.parametrize("model_name", ["logistic_regression", "grud"])
@pytest.mark.parametrize("loss", ["bce", "l2"])
@pytest.mark.parametrize("clip", [0.01, 1e6])
def test_classifier_norms_and_clipped_sum_match_torch_func(model_name, loss, clip):
    model, inputs = _classifier(model_name, 9)
    y = (torch.rand(9, generator=torch.Generator().manual_seed(3)) < 0.5).float()
    loss_fn = per_sample_loss(loss)
    _, reference = _reference(model, lambda f, target, *xs: loss_fn(f(*(x.unsqueeze(0) for x in xs)),
                                                                     target.unsqueeze(0)).sum(), (y, *inputs))
    assert len(reference) == (2 if model_name == "logistic_regression" else 10)  # every trainable tensor
    _check(model, lambda m, target, *xs: loss_fn(m(*xs), target), (y, *inputs), reference, clip)


def test_parameters_outside_ruled_layers_are_refused():
    flow = _flow()
    flow.extra = nn.Parameter(torch.zeros(2))  # would escape clipping
    with pytest.raises(ValueError, match="without a ghost-clipping rule"):
        clipped_layers(flow)
    with pytest.raises(ValueError, match="batch norm couples"):  # batch norm mixes samples, even without parameters
        clipped_layers(GRUD(3, 4, batch_norm=True))
    frozen = GRUD(3, 4)
    frozen.norm = nn.BatchNorm1d(4, affine=False)
    with pytest.raises(ValueError, match="batch norm couples"):
        clipped_layers(frozen)
    tied = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    tied[1].weight = tied[0].weight  # one parameter, two owners: their clipped sums would overwrite each other
    with pytest.raises(ValueError, match="shared by several layers"):
        clipped_layers(tied)


class _Tokens(nn.Module):
    """Per-sample loss sum_k (W a_k) . v_k: the layer's output gradient at token k is exactly v_k."""

    def __init__(self, dim: int):
        super().__init__()
        self.linear = nn.Linear(dim, dim, bias=False)

    def forward(self, a, v):
        return (self.linear(a) * v).sum((1, 2))


def test_cancelling_tokens_cannot_slip_under_the_clip():
    """An attack on the Gram norm: two hours whose terms v a^T cancel to 1e-6 of their size. The true per-sample
    gradient (in float64, of the same float32 inputs) is tiny, the float32 Gram sum's rounding is not; without the
    rounding margin the computed norm could be far below the true one and the record would add several C. With
    it, every record's clipped contribution stays within C."""
    g = torch.Generator().manual_seed(0)
    batch, dim, clip = 64, 8, 1.0
    a1 = torch.randn(batch, 1, dim, generator=g) * 300
    v1 = torch.randn(batch, 1, dim, generator=g) * 300
    a = torch.cat([a1, a1 * (1 + 1e-6 * (1 + torch.rand(batch, 1, 1, generator=g)))], 1)
    v = torch.cat([v1, -v1], 1)
    model = _Tokens(dim)
    assert 2 * (dim + dim) <= dim * dim  # the Gram path
    _, norms, _ = clipped_gradient_sum(model, lambda m, x, w: m(x, w), (a, v), clip)
    true = torch.einsum("bko,bki->boi", v.double(), a.double()).flatten(1).norm(dim=1)
    assert bool((true > 1e-3).all())  # not zero: the cancellation leaves a real gradient
    scale = (clip / (norms.double() + 1e-6)).clamp(max=1.0)
    assert bool((scale * true <= clip * (1 + 1e-6)).all()), float((scale * true).max())
    assert bool((norms.double() >= true * (1 - 1e-6)).all())


def test_a_layer_must_see_the_batch_first():
    model = _Tokens(4)
    time_major = lambda m, x, w: m(x.transpose(0, 1), w.transpose(0, 1))  # noqa: E731  (T, B, d) into the layer
    with pytest.raises(ValueError, match="batch first"):
        clipped_gradient_sum(model, time_major, (torch.randn(5, 3, 4), torch.randn(5, 3, 4)), 1.0)


def test_a_masked_layer_is_clipped_by_its_true_norm_with_any_mask_and_token_count():
    from privehr.models.nf.made import MaskedLinear

    torch.manual_seed(0)
    layer = MaskedLinear(torch.tensor([[2.0, 0.0, 1.0], [0.5, 3.0, 0.0]]))
    for shape in ((6, 3), (6, 4, 3)):  # one token (the closed form) and four (materialised with the mask)
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
        _, reference = _reference(layer, lambda f, xi: f(xi.unsqueeze(0)).square().sum(), (x,))
        _check(layer, lambda m, xb: m(xb).square().flatten(1).sum(1), (x,), reference, 1e6)
        _check(layer, lambda m, xb: m(xb).square().flatten(1).sum(1), (x,), reference, 0.05)


class _SharedConditioner(nn.Module):
    """DP-HFlow's conditioner: one MADE with a block context, called once per block (3 tokens per sample)."""

    def __init__(self):
        super().__init__()
        from privehr.models.nf.conditional_made import ConditionalMADE
        self.net = ConditionalMADE(5, 3, 7, hidden_size=16)
        with torch.no_grad():
            self.net.output.weight.copy_(0.3 * torch.randn(self.net.output.weight.shape,
                                                           generator=torch.Generator().manual_seed(4)))

    def forward(self, x):
        eye = torch.eye(3, dtype=x.dtype)
        out = sum(self.net(torch.tanh(x + j), eye[j].expand(len(x), 3)) for j in range(3))
        return out.square().sum((1, 2))


@pytest.mark.parametrize("clip", [0.05, 1e6])
def test_a_made_used_by_several_blocks_takes_the_grouped_grams_and_matches_torch_func(clip):
    """A MADE's mask has one row per degree: its norms come from K x K Grams per group of rows (DP-HFlow's
    conditioner, 3 blocks), and they and the clipped sums equal torch.func's per-sample gradients."""
    from privehr.models.dpsgd.rules.masked_linear import masked_grams_pay

    model = _SharedConditioner()
    for layer in (model.net.hidden[0], model.net.output):
        out, inn = layer.mask.shape
        assert masked_grams_pay(3, len(torch.unique(layer.mask, dim=0)), inn, out)
    x = torch.randn(10, 5, generator=torch.Generator().manual_seed(2))
    _, reference = _reference(model, lambda f, xi: f(xi.unsqueeze(0)).sum(), (x,))
    _check(model, lambda m, xb: m(xb), (x,), reference, clip)


def test_cancelling_tokens_cannot_slip_under_the_clip_of_a_masked_layer():
    """The cancellation attack on the grouped Grams of a MADE mask: two tokens whose terms cancel to 1e-6."""
    from privehr.models.nf.made import MaskedLinear, made_masks

    g = torch.Generator().manual_seed(0)
    batch, clip = 64, 1.0
    mask = made_masks(6, [32])[0]  # 32 x 6, 5 distinct rows
    a1 = torch.randn(batch, 1, 6, generator=g) * 300
    v1 = torch.randn(batch, 1, 32, generator=g) * 300
    a = torch.cat([a1, a1 * (1 + 1e-6 * (1 + torch.rand(batch, 1, 1, generator=g)))], 1)
    v = torch.cat([v1, -v1], 1)
    from privehr.models.dpsgd.rules.masked_linear import masked_grams_pay

    assert masked_grams_pay(2, len(torch.unique(mask, dim=0)), 6, 32)  # the grouped Grams are what is attacked
    layer = MaskedLinear(mask)
    layer.bias.requires_grad_(False)
    _, norms, _ = clipped_gradient_sum(layer, lambda m, x, w: (m(x) * w).sum((1, 2)), (a, v), clip)
    true = (torch.einsum("bko,bki->boi", v.double(), a.double()) * mask.double()).flatten(1).norm(dim=1)
    assert bool((true > 1e-3).all())
    scale = (clip / (norms.double() + 1e-6)).clamp(max=1.0)
    assert bool((scale * true <= clip * (1 + 1e-6)).all()), float((scale * true).max())


@pytest.mark.parametrize("a_scale, b_scale", [(2e-23, 3e18), (3e19, 1e-19)])
def test_a_masked_layers_grams_survive_float32s_range_edges(a_scale, b_scale):
    """Found by an attack on the grouped Grams: float32 inputs whose squares underflow (the norm came out 1.5 times
    too small) or overflow (inf - inf: a NaN norm that made the whole clipped sum NaN). The Grams are formed in
    float64: the norm is never below the true one, and the clipped sum stays finite and within C."""
    from privehr.models.nf.made import MaskedLinear, made_masks

    g = torch.Generator().manual_seed(0)
    batch, clip = 16, 1e-4
    a1 = torch.randn(batch, 1, 6, generator=g) * a_scale
    v1 = torch.randn(batch, 1, 32, generator=g) * b_scale
    a = torch.cat([a1, a1 * (1 + torch.rand(batch, 1, 6, generator=g))], 1)
    v = torch.cat([v1, -v1], 1)
    layer = MaskedLinear(made_masks(6, [32])[0])
    losses_fn = lambda m, x, w: (m(x) * w).sum((1, 2))  # noqa: E731
    _, norms, sums = clipped_gradient_sum(layer, losses_fn, (a, v), clip)
    weight = torch.einsum("bko,bki->boi", v.double(), a.double()) * layer.mask.double()
    true = torch.sqrt(weight.flatten(1).square().sum(1) + v.double().sum(1).square().sum(1))
    assert bool(torch.isfinite(norms).all()) and all(bool(torch.isfinite(s).all()) for s in sums.values())
    assert bool((norms.double() >= true * (1 - 1e-6)).all())
    assert float(torch.cat([s.double().flatten() for s in sums.values()]).norm()) <= batch * clip * (1 + 1e-5)


def test_an_empty_poisson_batch_gives_zero_sums():
    _, norms, sums = clipped_gradient_sum(_flow(), lambda m, xb: -m.log_prob(xb), (torch.zeros(0, 5),), 1.0)
    assert norms.numel() == 0 and all(torch.all(s == 0) for s in sums.values())


@pytest.mark.parametrize("model_name", ["logistic_regression", "grud"])
def test_every_ghost_step_is_the_clipped_mean_of_a_poisson_batch_plus_the_noise(model_name, monkeypatch):
    """The trainer's gradient at each step, rebuilt independently: the batch from the release's sampling stream
    (one uniform per record, kept below q), torch.func's per-sample gradients clipped to C and summed, the
    four-Gaussian noise from the noise stream, all over q n. Opacus's hooks path samples the same way but its
    DataLoader draws a base seed from the generator first, so its batches are others (and as random)."""
    from privehr.models.privacy.randomness import gaussian_noise

    n, steps = 30, 4
    model, inputs = _classifier(model_name, n, seed=4)
    start = {k: v.detach().clone() for k, v in model.named_parameters()}
    y = (torch.rand(n, generator=torch.Generator().manual_seed(5)) < 0.5).float()
    plan = ReleasePlan.for_noise(n, 0.2, steps, noise_multiplier=0.7, max_grad_norm=0.1, delta=1e-5)
    seen = []
    original = torch.optim.AdamW.step

    def record(self, *args, **kwargs):
        seen.append({p: p.grad.clone() for group in self.param_groups for p in group["params"]})
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", record)
    hp = DPSGDHyperparameters(learning_rate=1e-9)  # the parameters barely move: every step is checked at start
    trained, _ = train_dp_sgd(model, inputs, y, hp, plan, NoiseSource.reproducible("ghost-step"))
    assert len(seen) == steps
    source = NoiseSource.reproducible("ghost-step")
    sampler, noise = source.torch_generator("sampling"), source.torch_generator("noise")
    loss_fn = per_sample_loss("bce")
    fresh, _ = _classifier(model_name, n, seed=4)
    _, reference = _reference(fresh, lambda f, target, *xs: loss_fn(f(*(x.unsqueeze(0) for x in xs)),
                                                                     target.unsqueeze(0)).sum(), (y, *inputs))
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in reference.values()))
    factor = (plan.max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
    assert bool((factor < 1).all())
    named = dict(trained.named_parameters())
    for grads in seen:
        keep = torch.rand(n, generator=sampler) < plan.sample_rate
        for name, g in reference.items():
            clipped = (factor[keep].view(-1, *[1] * (g.dim() - 1)) * g[keep]).sum(0)
            expected = (clipped + gaussian_noise(g.shape[1:], plan.noise_multiplier * plan.max_grad_norm, noise)) / (
                plan.sample_rate * n)
            torch.testing.assert_close(grads[named[name]], expected, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")
        assert torch.allclose(named["output.weight" if model_name == "grud" else "linear.weight"],
                              start["output.weight" if model_name == "grud" else "linear.weight"], atol=1e-7)
