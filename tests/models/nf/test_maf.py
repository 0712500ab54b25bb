"""MADE masks are autoregressive; MAF's log-determinant equals autograd's; sampling inverts the density map."""

import torch

from privehr.models.nf.made import MADE, made_masks
from privehr.models.nf.maf import MAF


def _perturbed(flow: MAF) -> MAF:
    """Move the zero-initialised output layers away from the identity map."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for made in flow.blocks:
            made.output.weight.copy_(0.4 * torch.randn(made.output.weight.shape, generator=g))
            made.output.bias.copy_(0.2 * torch.randn(made.output.bias.shape, generator=g))
    return flow


def test_made_output_d_depends_only_on_earlier_inputs():
    torch.manual_seed(0)
    made = MADE(5, hidden_size=12, hidden_layers=2)
    torch.nn.init.normal_(made.output.weight)
    x = torch.randn(1, 5, requires_grad=True)
    for d in range(5):
        mu, alpha = made(x)
        (grad_mu,) = torch.autograd.grad(mu[0, d], x, retain_graph=True)
        (grad_alpha,) = torch.autograd.grad(alpha[0, d], x)
        assert torch.all(grad_mu[0, d:] == 0) and torch.all(grad_alpha[0, d:] == 0), d
    masks = made_masks(5, [12, 12])
    assert masks[-1][0].sum() == 0  # the first output sees no input


def test_log_det_equals_autograd_jacobian():
    torch.manual_seed(1)
    flow = _perturbed(MAF(4, blocks=3, hidden_size=16, hidden_layers=2)).double()
    x = torch.randn(3, 4, dtype=torch.float64)
    _, log_det = flow.transform(x)
    for i in range(3):
        jac = torch.autograd.functional.jacobian(lambda v: flow.transform(v.unsqueeze(0))[0][0], x[i])
        torch.testing.assert_close(log_det[i], torch.linalg.slogdet(jac)[1])


def test_sampling_inverts_the_density_direction():
    torch.manual_seed(2)
    flow = _perturbed(MAF(6, blocks=3, hidden_size=16)).double()
    x = flow.sample(50, torch.Generator().manual_seed(7)).double()
    u, _ = flow.transform(x)
    base = torch.randn(50, 6, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    torch.testing.assert_close(u, base, rtol=1e-4, atol=1e-4)


def test_untrained_flow_is_the_standard_normal():
    flow = MAF(3, blocks=2, hidden_size=8)
    x = torch.randn(10, 3)
    expected = torch.distributions.Normal(0.0, 1.0).log_prob(x).sum(-1)
    torch.testing.assert_close(flow.log_prob(x), expected)
