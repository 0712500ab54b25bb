"""One harness for every per-layer rule (as Opacus's grad_sample tests share one): each rule registered in
``privehr.models.dpsgd.rules`` is checked on its own ``example()`` against ``torch.func``'s per-sample gradients of
that layer: every sample's gradient norm, the clipped sum, and the per-sample gradients where the rule materialises
them. A new rule is checked by being registered (a rule without an example fails here)."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, jacrev

from privehr.models.dpsgd.ghost_clipping import clipped_gradient_sum, collect_calls
from privehr.models.dpsgd.rules import GHOST_RULES, rule_of

RULES = sorted({type(rule) for rule in GHOST_RULES.values()}, key=lambda r: r.__name__)


def _losses(module, *inputs):
    """A per-sample loss that reaches every output of the layer with a different weight per entry."""
    out = module(*inputs)
    weights = torch.linspace(-1.0, 2.0, out[0].numel(), dtype=out.dtype).view(out.shape[1:])
    return (torch.tanh(out) * weights).flatten(1).sum(1) + out.square().flatten(1).mean(1)


def _torch_func_per_sample(module, inputs):
    """{name: (batch, *shape)}: the Jacobian of the per-sample losses of the whole batch with respect to the
    parameters (row i is sample i's gradient, samples do not interact: the rules' premise). One batch, not one sample
    at a time, so that a stacked group's rows meet their own member's weights as in training."""
    params = {k: v.detach() for k, v in module.named_parameters() if v.requires_grad}
    fixed = {k: v.detach() for k, v in module.named_parameters() if not v.requires_grad} | dict(module.named_buffers())
    return jacrev(lambda p: _losses(lambda *a: functional_call(module, (p, fixed), a), *inputs))(params)


@pytest.mark.parametrize("rule", RULES, ids=[r.__name__ for r in RULES])
def test_every_registered_rule_gives_torch_funcs_per_sample_norms_and_clipped_sums(rule):
    torch.manual_seed(0)  # the example's weights and inputs (no privacy claim here)
    module, inputs = rule.example()
    exact = _torch_func_per_sample(module, inputs)
    norms_exact = torch.cat([g.flatten(1) for g in exact.values()], 1).norm(dim=1)
    clip = float(norms_exact.median())  # some samples clipped, some not
    _, norms, sums = clipped_gradient_sum(module, _losses, inputs, clip)
    assert torch.allclose(norms, norms_exact, rtol=1e-6), rule.__name__  # the Gram bound's margin is ~1e-12 here
    assert bool((norms >= norms_exact * (1 - 1e-12)).all())  # never below the true norm: clipping is never weaker
    scale = (clip / (norms + 1e-6)).clamp(max=1.0)
    named = dict(module.named_parameters())
    for name, g in exact.items():
        expected = torch.einsum("b,b...->...", scale, g)
        assert torch.allclose(sums[named[name]], expected, rtol=1e-6, atol=1e-9), (rule.__name__, name)


@pytest.mark.parametrize("rule", RULES, ids=[r.__name__ for r in RULES])
def test_rules_that_materialise_per_sample_gradients_give_torch_funcs(rule):
    torch.manual_seed(1)
    module, inputs = rule.example()
    _, _, calls = collect_calls(module, _losses, inputs)
    ((layer, call),) = calls.items()
    try:
        mine = rule_of(layer).per_sample_gradients(layer, call)
    except NotImplementedError as flat:  # a stacked group: clipped flat, one threshold per member, and it says so
        assert "clipped flat" in str(flat) and "Stacked" in rule.__name__
        return
    exact = _torch_func_per_sample(module, inputs)
    named = dict(module.named_parameters())
    for name, g in exact.items():
        assert torch.allclose(mine[named[name]], g, rtol=1e-6, atol=1e-10), (rule.__name__, name)


def test_a_rule_without_an_example_is_refused_by_the_harness():
    from privehr.models.dpsgd.rules import GhostRule

    with pytest.raises(NotImplementedError, match="has no example"):
        type("Unchecked", (GhostRule,), {}).example()
