"""A MADE with a context input: the conditioner of DP-HFlow's conditional spline flow and of its
variational dequantization (Lee, Kim, Jeong, Ro, "Differentially Private Normalizing Flows for
Synthetic Tabular Data Generation", AAAI 2022; MADE: Germain, Gregor, Murray, Larochelle, ICML 2015).

Inputs x (n, D) in their given order and a context c (n, C). Every layer of the network sees
[h, c]: its mask is MADE's (:func:`privehr.models.nf.made.made_masks`) on the h columns and all ones on the c
columns, so output d is a function of (x_{<d}, c). Feeding c into every layer, the output layer
included, matters for d = 1: in a MADE the first output sees no hidden unit, and only a direct
context connection lets its parameters depend on c. The network outputs P numbers per input
dimension, (n, D, P).

DP-HFlow uses one such network for all its J spline blocks, with c the one-hot code of the block
index j (the paper's theta^j = NN_nu(x, q(j)); each layer's weights on the c columns are the learned
embedding q(j), so no separate embedding layer is needed). The blocks share every weight: the
parameter count is that of one block, and DP-SGD's noise, one N(0, sigma^2 C^2) coordinate per
parameter, grows no further with J. The layers are :class:`~privehr.models.nf.made.MaskedLinear`; called once
per block, each layer is used J times per sample, which its ghost-clipping rule handles with J x J Grams per
group of identical mask rows (one group per MADE degree; :mod:`privehr.models.dpsgd.ghost_clipping`).

The output layer starts at zero (weights and bias): every output is 0 for any input until trained,
a data-independent start at which DP-HFlow's splines are the identity.
"""

from __future__ import annotations

import torch
from torch import nn

from privehr.models.nf.made import MaskedLinear, made_masks

__all__ = ["ConditionalMADE"]


class ConditionalMADE(nn.Module):
    """(x (n, D), c (n, C)) -> (n, D, P), output d a function of (x_{<d}, c) only.

    >>> net = ConditionalMADE(3, 2, 5, hidden_size=8)
    >>> net(torch.randn(4, 3), torch.eye(2)[[0, 1, 1, 0]]).shape
    torch.Size([4, 3, 5])
    """

    def __init__(self, features: int, context: int, outputs_per_feature: int, hidden_size: int = 64,
                 hidden_layers: int = 1):
        super().__init__()
        self.features, self.context, self.outputs_per_feature = features, context, outputs_per_feature
        masks = made_masks(features, [hidden_size] * hidden_layers)
        masks[-1] = masks[-1].repeat_interleave(outputs_per_feature, 0)  # rows d P .. d P + P - 1: dimension d
        with_context = [torch.cat([m, torch.ones(m.shape[0], context)], 1) for m in masks]
        self.hidden = nn.ModuleList(MaskedLinear(m) for m in with_context[:-1])
        self.output = MaskedLinear(with_context[-1], zero_init=True)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        h = x
        for layer in self.hidden:
            h = torch.relu(layer(torch.cat([h, c], -1)))
        out = self.output(torch.cat([h, c], -1))
        return out.reshape(*out.shape[:-1], self.features, self.outputs_per_feature)
