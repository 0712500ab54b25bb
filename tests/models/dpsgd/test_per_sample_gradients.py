"""Opacus's per-sample gradients equal a torch.func vmap(grad) reference, for every model and loss."""

import pytest
import torch
from opacus import GradSampleModule
from torch.func import functional_call, grad, vmap

import privehr.models.dpsgd.rules  # noqa: F401
from privehr.models.classifiers.grud import GRUD
from privehr.models.classifiers.logistic_regression import LogisticRegression
from privehr.models.classifiers.losses import binary_loss


def _inputs(model_name, batch, generator):
    if model_name == "logistic_regression":
        return LogisticRegression(7), (torch.randn(batch, 7, generator=generator),)
    mask = (torch.rand(batch, 5, 4, generator=generator) < 0.5).float()
    delta = torch.randint(0, 6, (batch, 5, 4), generator=generator).float()
    model = GRUD(4, 3, x_mean=torch.randn(4, generator=generator))
    return model, (torch.randn(batch, 5, 4, generator=generator), mask, delta)


@pytest.mark.parametrize("model_name", ["logistic_regression", "grud"])
@pytest.mark.parametrize("loss", ["bce", "l2"])
@pytest.mark.parametrize("mode", ["hooks", "functorch"])
def test_opacus_per_sample_gradients_match_torch_func(model_name, loss, mode):
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    batch = 6
    model, inputs = _inputs(model_name, batch, g)
    y = (torch.rand(batch, generator=g) < 0.5).float()
    loss_fn = binary_loss(loss)
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v for k, v in model.named_buffers()}

    def sample_loss(p, *sample):
        *xs, target = sample
        out = functional_call(model, (p, buffers), tuple(x.unsqueeze(0) for x in xs))
        return loss_fn(out, target.unsqueeze(0))

    reference = vmap(grad(sample_loss), in_dims=(None,) + (0,) * (len(inputs) + 1))(params, *inputs, y)

    wrapped = GradSampleModule(model, batch_first=True, loss_reduction="mean", force_functorch=(mode == "functorch"))
    loss_fn(wrapped(*inputs), y).backward()
    for name, p in wrapped._module.named_parameters():
        assert p.grad_sample.shape == (batch, *p.shape), name
        torch.testing.assert_close(p.grad_sample, reference[name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("mode", ["hooks", "functorch"])
def test_maf_per_sample_gradients_match_torch_func(mode):
    """The masked linear rule (and Opacus's functorch fallback) against vmap(grad) of the per-sample NLL."""
    from privehr.models.nf.maf import MAF

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    flow = MAF(5, blocks=3, hidden_size=12, hidden_layers=2)
    with torch.no_grad():
        for made in flow.blocks:
            made.output.weight.copy_(0.3 * torch.randn(made.output.weight.shape, generator=g))
    x = torch.randn(8, 5, generator=g)
    params = {k: v.detach() for k, v in flow.named_parameters()}
    reference = vmap(grad(lambda p, xi: -functional_call(flow, p, (xi.unsqueeze(0),)).mean()),
                     in_dims=(None, 0))(params, x)
    wrapped = GradSampleModule(flow, batch_first=True, loss_reduction="mean", force_functorch=(mode == "functorch"))
    (-wrapped(x).mean()).backward()
    trainable = [(n, p) for n, p in wrapped._module.named_parameters() if p.requires_grad]
    assert len(trainable) == 3 * 3 * 2  # weight and bias of 3 masked layers per block; masks are frozen
    for name, p in trainable:
        torch.testing.assert_close(p.grad_sample, reference[name], rtol=1e-5, atol=1e-6, msg=name)
        if name.endswith("weight"):  # masked-out weights get exactly zero per-sample gradient
            mask = dict(wrapped._module.named_parameters())[name.replace("weight", "mask")]
            assert torch.all(p.grad_sample[:, mask == 0] == 0)
