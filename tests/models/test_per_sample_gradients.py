"""Opacus's per-sample gradients equal a torch.func vmap(grad) reference, for every model and loss."""

import pytest
import torch
from opacus import GradSampleModule
from torch.func import functional_call, grad, vmap

import models.grad_samplers  # noqa: F401
from models.grud import GRUD
from models.logistic_regression import LogisticRegression
from models.losses import binary_loss


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
