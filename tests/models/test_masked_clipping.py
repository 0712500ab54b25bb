"""Ghost clipping of masked layers: per-sample norms and the clipped sum equal torch.func's per-sample gradients."""

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from models.maf import MAF
from models.masked_clipping import clipped_gradient_sum, masked_layers


def _flow():
    torch.manual_seed(0)
    flow = MAF(5, blocks=3, hidden_size=12, hidden_layers=2)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for made in flow.blocks:
            made.output.weight.copy_(0.3 * torch.randn(made.output.weight.shape, generator=g))
    return flow


@pytest.mark.parametrize("clip", [0.5, 5.0, 1e6])
def test_norms_and_clipped_sum_match_torch_func(clip):
    flow = _flow()
    x = torch.randn(12, 5, generator=torch.Generator().manual_seed(2))
    params = {k: v.detach() for k, v in flow.named_parameters()}
    per_sample = vmap(grad(lambda p, xi: -functional_call(flow, p, (xi.unsqueeze(0),)).sum()),
                      in_dims=(None, 0))(params, x)
    names = [n for n, p in flow.named_parameters() if p.requires_grad]
    reference_norms = torch.sqrt(sum(per_sample[n].flatten(1).pow(2).sum(1) for n in names))
    losses, norms, sums = clipped_gradient_sum(flow, lambda m, xb: -m.log_prob(xb), x, clip)
    torch.testing.assert_close(norms, reference_norms, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(losses, -flow.log_prob(x).detach())
    factor = (clip / (reference_norms + 1e-6)).clamp(max=1.0)
    named = dict(flow.named_parameters())
    assert set(sums) == {named[n] for n in names}
    for n in names:
        expected = (factor.view(-1, *[1] * (per_sample[n].dim() - 1)) * per_sample[n]).sum(0)
        torch.testing.assert_close(sums[named[n]], expected, rtol=1e-4, atol=1e-5, msg=n)


def test_parameters_outside_masked_layers_are_refused():
    flow = _flow()
    flow.extra = nn.Linear(2, 2)  # would escape clipping
    with pytest.raises(ValueError, match="outside masked linear layers"):
        masked_layers(flow)


def test_an_empty_poisson_batch_gives_zero_sums():
    _, norms, sums = clipped_gradient_sum(_flow(), lambda m, xb: -m.log_prob(xb), torch.zeros(0, 5), 1.0)
    assert norms.numel() == 0 and all(torch.all(s == 0) for s in sums.values())
