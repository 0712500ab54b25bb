"""Fine-grained clipping (DP-HFlow): every mode's clipped sum equals one rebuilt from torch.func's per-sample gradients
with the mode's rule, every sample's clipped gradient stays within C however large its gradient, the thresholds split
C^2 exactly, stochastic sparsification is unbiased and reduces to per-layer clipping at s = 0, and the DP-SGD step
takes the mode (flat by default, unchanged)."""

import math

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from privehr.models.dpsgd.density import DensityHyperparameters, train_density
from privehr.models.dpsgd.fine_grained_clipping import (fine_grained_clipped_sum, layer_thresholds, per_sample_gradients,
                                          stochastic_sparsify)
from privehr.models.dpsgd.ghost_clipping import clipped_gradient_sum
from privehr.models.classifiers.grud import GRUD
from privehr.models.nf.hflow import HFlow
from privehr.models.nf.maf import MAF
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import ReleasePlan


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/models/conftest.py


def _hflow():
    torch.manual_seed(0)
    flow = HFlow(2, [3, 4], blocks=2, hidden_size=8, bins=4, rank=2, dequantization="variational")
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in flow.parameters():
            if p.requires_grad:
                p.add_(0.3 * torch.randn(p.shape, generator=g))
    flow = flow.double()
    n = 9
    g = torch.Generator().manual_seed(2)
    x = torch.cat([torch.randn(n, 2, generator=g, dtype=torch.float64), torch.randint(0, 3, (n, 1), generator=g),
                   torch.randint(0, 4, (n, 1), generator=g)], 1).double()
    noise = flow.dequantizer.draw(n, torch.Generator().manual_seed(3), like=x)

    def losses(m, xb, nb):
        return -m.log_prob(xb, noise=nb)

    def one(f, xi, ni):
        return -f(xi[None], ni[None]).sum()

    return flow, losses, one, (x, noise)


def _grud():
    """GRU-D: nn.Linear layers used at every hour and the input decays (the generic per-sample paths)."""
    g = torch.Generator().manual_seed(4)
    torch.manual_seed(4)
    mask = (torch.rand(7, 5, 6, generator=g) < 0.4).double()
    delta = torch.randint(0, 6, (7, 5, 6), generator=g).double() * (1 - mask)
    model = GRUD(6, 4, x_mean=torch.randn(6, generator=g)).double()
    with torch.no_grad():
        model.input_decay.bias.copy_(torch.linspace(-0.45, 0.25, 6))
    x = torch.randn(7, 5, 6, generator=g, dtype=torch.float64) * mask

    def losses(m, xb, mb, db):
        return m(xb, mb, db).reshape(len(xb), -1).square().sum(1)

    def one(f, xi, mi, di):
        return f(xi[None], mi[None], di[None]).square().sum()

    return model, losses, one, (x, mask, delta)


MODELS = {"hflow": _hflow, "grud": _grud}


def _reference(model, one, inputs):
    params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}
    frozen = {k: v.detach() for k, v in model.named_parameters() if not v.requires_grad}

    def loss(p, *sample):
        return one(lambda *xs: functional_call(model, {**p, **frozen}, xs), *sample)

    return vmap(grad(loss), in_dims=(None,) + (0,) * len(inputs))(params, *inputs)


def _by_layer(model, reference):
    """{layer module: {parameter name: (batch, *shape)}} from torch.func's per-sample gradients."""
    modules = dict(model.named_modules())
    layers: dict[nn.Module, dict] = {}
    for name, g in reference.items():
        layers.setdefault(modules[name.rpartition(".")[0]], {})[name] = g
    return layers


def _clip_rows(v, threshold):
    """Rows of v (batch, m) clipped to ``threshold`` (a float or (batch,) tensor), with the 1e-6 of the flat clip."""
    return v * (threshold / (v.norm(dim=1) + 1e-6)).clamp(max=1.0)[:, None]


def _reference_sums(model, reference, mode, clip, sparsity=0.0, generator=None):
    """{parameter name: sum_i clip(g_i)} written out plainly, sample by sample and unit by unit."""
    thresholds = layer_thresholds(model, clip)
    out = {}
    for layer, grads in _by_layer(model, reference).items():
        names = list(grads)
        batch = len(grads[names[0]])
        flat = torch.cat([grads[n].reshape(batch, -1) for n in names], 1)
        c = thresholds[layer]
        if mode == "per_layer":
            clipped = _clip_rows(flat, c)
        elif mode == "sparsified":
            free = torch.cat([(layer.mask != 0).reshape(-1) if n.endswith("weight") and hasattr(layer, "mask")
                              else torch.ones(grads[n][0].numel(), dtype=torch.bool) for n in names])
            gamma = torch.rand(flat.shape, generator=generator, dtype=flat.dtype)
            m = int(free.sum())
            k = max(1, math.ceil(m * (1 - sparsity) - 1e-9))
            sparse = torch.zeros_like(flat)
            for i in range(batch):
                tau = flat[i, free].abs().sort(descending=True).values[k - 1]
                for j in range(flat.shape[1]):
                    a = flat[i, j].abs()
                    if a > tau:
                        sparse[i, j] = flat[i, j]
                    elif a >= tau * gamma[i, j]:
                        sparse[i, j] = torch.sign(flat[i, j]) * tau
            clipped = _clip_rows(sparse, c)
        else:  # per_unit: unit u = index u along the first dimension of the layer's parameters of that leading size
            clipped = torch.zeros_like(flat)
            for i in range(batch):
                units = {}  # (leading size, u) -> list of (column range)
                start = 0
                for n in names:
                    shape = grads[n].shape[1:]
                    size = int(torch.tensor(shape).prod()) if len(shape) else 1
                    rows = shape[0] if len(shape) else 1
                    per = size // rows
                    for u in range(rows):
                        key = (rows if len(shape) else -1, u)
                        units.setdefault(key, []).extend(range(start + u * per, start + (u + 1) * per))
                    start += size
                l1 = {key: float(flat[i, cols].abs().sum()) for key, cols in units.items()}
                total = sum(l1.values())
                for key, cols in units.items():
                    c_unit = c * math.sqrt(l1[key] / total) if total > 0 else 0.0
                    clipped[i, cols] = _clip_rows(flat[i, cols][None], c_unit)[0]
        start = 0
        for n in names:
            size = grads[n][0].numel()
            out[n] = clipped[:, start:start + size].sum(0).reshape(grads[n].shape[1:])
            start += size
    return out


@pytest.mark.parametrize("model_name", ["hflow", "grud"])
@pytest.mark.parametrize("mode", ["per_layer", "per_unit", "sparsified"])
@pytest.mark.parametrize("clip", [0.05, 1e6])
def test_clipped_sums_equal_the_rule_applied_to_torch_func_gradients(model_name, mode, clip):
    model, losses_fn, one, inputs = MODELS[model_name]()
    reference = _reference(model, one, inputs)
    expected = _reference_sums(model, reference, mode, clip, 0.5, torch.Generator().manual_seed(7))
    losses, norms, sums = fine_grained_clipped_sum(model, losses_fn, inputs, clip, mode, sparsity=0.5,
                                                   generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(norms, torch.sqrt(sum(g.flatten(1).square().sum(1) for g in reference.values())))
    torch.testing.assert_close(losses, losses_fn(model, *inputs).detach())
    named = {k: v for k, v in model.named_parameters() if v.requires_grad}
    assert set(sums) == set(named.values())
    for name, value in expected.items():
        torch.testing.assert_close(sums[named[name]], value, rtol=1e-7, atol=1e-10, msg=name)


def test_flat_is_ghost_clipping_and_sparsity_zero_is_per_layer():
    model, losses_fn, _, inputs = _hflow()
    flat = fine_grained_clipped_sum(model, losses_fn, inputs, 0.1, "flat")
    ghost = clipped_gradient_sum(model, losses_fn, inputs, 0.1)
    for p in ghost[2]:
        assert torch.equal(flat[2][p], ghost[2][p])
    per_layer = fine_grained_clipped_sum(model, losses_fn, inputs, 0.1, "per_layer")
    sparse = fine_grained_clipped_sum(model, losses_fn, inputs, 0.1, "sparsified", sparsity=0.0,
                                      generator=torch.Generator().manual_seed(0))
    for p in per_layer[2]:
        torch.testing.assert_close(sparse[2][p], per_layer[2][p], rtol=1e-9, atol=1e-12)
    assert any(not torch.allclose(per_layer[2][p], flat[2][p]) for p in flat[2])  # the modes do differ


def test_thresholds_split_c_squared_first_between_networks_then_by_parameter_count():
    model, *_ = _hflow()
    thresholds = layer_thresholds(model, 2.0)
    assert sum(c ** 2 for c in thresholds.values()) == pytest.approx(4.0)
    names = {m: n for n, m in model.named_modules()}
    nets = {}
    for layer, c in thresholds.items():
        nets.setdefault(names[layer].split(".")[0], []).append((layer, c))
    assert set(nets) == {"conditioner", "linears", "dequantizer"}
    for net, layers in nets.items():
        assert sum(c ** 2 for _, c in layers) == pytest.approx(4.0 / 3)  # equal network shares
        counts = [sum(int(p.numel() if not n.endswith("weight") or not hasattr(layer, "mask") else layer.mask.sum())
                      for n, p in layer.named_parameters(recurse=False) if p.requires_grad) for layer, _ in layers]
        for (layer, c), count in zip(layers, counts):
            assert c ** 2 == pytest.approx(4.0 / 3 * count / sum(counts))  # masked-out weights not counted
    by_count = layer_thresholds(model, 2.0, network_shares="parameters")
    assert sum(c ** 2 for c in by_count.values()) == pytest.approx(4.0)
    assert layer_thresholds(model, 2.0, networks=lambda name: "all") == pytest.approx(by_count)


@pytest.mark.parametrize("mode", ["flat", "per_layer", "per_unit", "sparsified"])
def test_no_sample_exceeds_c_however_large_its_gradient(mode):
    """An adversary's records: losses scaled by up to 1e8 (and down to 1e-8), one sample at a time so that the clipped
    sum is that sample's clipped gradient; its norm (in float64) and every layer's part stay within C and C_l."""
    model, losses_fn, _, inputs = _hflow()
    scales = torch.tensor([1e8, -3e6, 1e4, 1.0, 1e-8, 5e7, -1e8, 2e5, 1e3], dtype=torch.float64)
    clip = 0.7
    thresholds = layer_thresholds(model, clip)
    for i in range(len(scales)):
        sample = tuple(t[i:i + 1] for t in inputs)
        _, norms, sums = fine_grained_clipped_sum(model, lambda m, *xs: scales[i] * losses_fn(m, *xs), sample, clip,
                                                  mode, sparsity=0.7, generator=torch.Generator().manual_seed(i))
        total = torch.sqrt(sum(s.double().square().sum() for s in sums.values()))
        assert float(total) <= clip * (1 + 1e-9), (mode, i, float(total))
        if float(norms[0]) > 10 * clip:
            assert float(total) > 0.5 * clip or mode != "flat"  # a huge gradient is scaled down, not zeroed
        if mode != "flat":
            for layer, c in thresholds.items():
                own = [p for p in layer.parameters(recurse=False) if p.requires_grad]
                part = torch.sqrt(sum(sums[p].square().sum() for p in own))
                assert float(part) <= c * (1 + 1e-9)


def test_stochastic_sparsification_is_unbiased_and_sparse():
    g = torch.Generator().manual_seed(0)
    v = torch.randn(1, 40, generator=g, dtype=torch.float64) * torch.logspace(-2, 1, 40, dtype=torch.float64)
    draws = 20000
    out = stochastic_sparsify(v.expand(draws, -1), 0.75, torch.Generator().manual_seed(1))
    tau = v.abs().sort(descending=True).values[0, 9]  # k = 40 (1 - 0.75) = 10
    big = v.abs() > tau
    assert torch.equal(out[:, big[0]], v[:, big[0]].expand(draws, -1))  # the top k pass untouched
    small = out[:, ~big[0]]
    assert bool(((small == 0) | (small.abs() == tau)).all())  # the rest: 0 or sign(x) tau
    assert torch.equal(torch.sign(small[small != 0]), torch.sign(v[:, ~big[0]].expand(draws, -1)[small != 0]))
    error = (out.mean(0) - v[0]).abs()
    assert bool((error <= 4 * tau / math.sqrt(draws)).all()), float(error.max())  # unbiased: E T(x) = x
    assert float((out != 0).double().mean()) < 0.5  # most of the small entries are zeroed
    assert torch.equal(stochastic_sparsify(v, 0.0, torch.Generator().manual_seed(2)), v)  # s = 0: identity
    with pytest.raises(ValueError):
        stochastic_sparsify(v, 1.0)


def test_the_sparsified_clipped_sum_is_unbiased_when_nothing_is_clipped():
    """With C large, E sum_i T(g_i) = sum_i g_i: averaged over repeated draws, the sparsified sums approach the plain
    sum (a small linear model, many draws)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)).double()
    x = torch.randn(6, 4, dtype=torch.float64)
    losses_fn = lambda m, xb: m(xb).square().sum(1)  # noqa: E731
    _, _, plain = clipped_gradient_sum(model, losses_fn, (x,), 1e9)
    generator = torch.Generator().manual_seed(0)
    draws = 800
    mean = {p: torch.zeros_like(p) for p in plain}
    for _ in range(draws):
        _, _, sums = fine_grained_clipped_sum(model, losses_fn, (x,), 1e9, "sparsified", sparsity=0.6,
                                              generator=generator)
        for p in mean:
            mean[p] += sums[p] / draws
    for p in plain:
        scale = float(plain[p].abs().max())
        assert float((mean[p] - plain[p]).abs().max()) < 0.05 * scale + 1e-12
        assert not torch.allclose(sums[p], plain[p])  # a single draw is not the plain sum


def test_per_sample_gradients_of_the_generic_rules_match_torch_func():
    from privehr.models.dpsgd.ghost_clipping import collect_calls

    model, losses_fn, one, inputs = _grud()
    reference = _reference(model, one, inputs)
    _, _, joined = collect_calls(model, losses_fn, inputs)
    names = {p: n for n, p in model.named_parameters()}
    for layer, call in joined.items():
        for p, g in per_sample_gradients(layer, call).items():
            torch.testing.assert_close(g, reference[names[p]], msg=names[p])


def test_the_dp_step_takes_the_mode_and_flat_stays_the_default():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(120, 3, generator=g)
    plan = ReleasePlan.for_noise(120, 0.25, 6, noise_multiplier=1.0, delta=1e-5)
    hp = DensityHyperparameters(learning_rate=1e-2)

    def fit(**kwargs):
        torch.manual_seed(0)
        flow = MAF(3, blocks=2, hidden_size=8)
        train_density(flow, x, hp, plan, NoiseSource.reproducible("fine-grained"), **kwargs)
        return torch.cat([p.detach().flatten() for p in flow.parameters()])

    default = fit()
    assert torch.equal(default, fit(clipping="flat"))
    for mode in ("per_layer", "per_unit", "sparsified"):
        assert not torch.equal(fit(clipping=mode), default)
    assert torch.equal(fit(clipping="sparsified", sparsity=0.3), fit(clipping="sparsified", sparsity=0.3))
    with pytest.raises(ValueError, match="needs grad_sample_mode='ghost'"):
        fit(clipping="per_layer", grad_sample_mode="hooks")
    with pytest.raises(ValueError, match="unknown clipping mode"):
        fit(clipping="per_neuron")


def test_an_empty_batch_gives_zero_sums_in_every_mode():
    model, losses_fn, _, inputs = _hflow()
    for mode in ("per_layer", "per_unit", "sparsified"):
        _, norms, sums = fine_grained_clipped_sum(model, losses_fn, tuple(t[:0] for t in inputs), 1.0, mode)
        assert norms.numel() == 0 and all(torch.all(s == 0) for s in sums.values())
