"""GRU-D: a GRU with trainable decays for irregularly observed series.

Che, Purushotham, Cho, Sontag, Liu, "Recurrent Neural Networks for Multivariate Time Series with
Missing Values", Scientific Reports 8, 2018 (arXiv:1606.01865). With mask m_t, time since the last
measurement delta_t, last observed value x_last and empirical training mean x_tilde:

    gamma_x = exp(-max(0, w_x * delta_t + b_x))               (diagonal: one w, b per feature)
    x_hat_t = m_t x_t + (1 - m_t)(gamma_x x_last + (1 - gamma_x) x_tilde)
    gamma_h = exp(-max(0, W_gh delta_t + b_gh)),   h_hat = gamma_h * h_{t-1}
    z = sigma(W_z x_hat + V_z m + U_z h_hat + b_z),  r = sigma(W_r x_hat + V_r m + U_r h_hat + b_r)
    h_tilde = tanh(W x_hat + V m + U (r * h_hat) + b),  h_t = (1 - z) h_hat + z h_tilde

The input side (x_hat, the mask terms and gamma_h) does not depend on h, so it is computed for all
hours at once: one ``nn.Linear`` over (B, T, 2F) gives the input parts of the three gates, and only
two small H -> H layers run inside the time loop. Opacus can clip its per-sample gradients: the top
module owns no parameters (only the x_tilde buffer), every weight sits in an ``nn.Linear`` or in the
elementwise :class:`InputDecay` submodule, and no module with parameters has buffers.
"""

from __future__ import annotations

import torch
from torch import nn

from privehr.models.classifiers.base import Classifier, register_classifier

__all__ = ["GRUD", "InputDecay", "GRUDClassifier"]


class InputDecay(nn.Module):
    """gamma_x = exp(-relu(w * delta + b)), elementwise over features (no dense F x F matrix)."""

    def __init__(self, n_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.full((n_features,), 0.05))
        self.bias = nn.Parameter(torch.zeros(n_features))

    def forward(self, delta: torch.Tensor) -> torch.Tensor:
        return torch.exp(-torch.relu(torch.addcmul(self.bias, delta, self.weight)))


class GRUD(nn.Module):
    """GRU-D classifier returning one logit per sequence.

    Args:
        n_features: F, variables per hour.
        hidden_size: H.
        x_mean: x_tilde, the per-feature mean of observed training inputs (zeros if standardised).
        dropout: dropout on the final hidden state (non-private use only).
        batch_norm: batch norm on the final hidden state; refused under DP (it mixes samples).
    Inputs: ``forward(x, mask, delta)``, each (B, T, F); ``x`` carries the last observed value at
    unobserved hours (forward-filled), ``delta`` the hours since the last measurement.

    >>> model = GRUD(3, 4)
    >>> model(torch.zeros(2, 5, 3), torch.ones(2, 5, 3), torch.zeros(2, 5, 3)).shape
    torch.Size([2])
    """

    def __init__(self, n_features: int, hidden_size: int = 32, x_mean: torch.Tensor | None = None,
                 dropout: float = 0.0, batch_norm: bool = False):
        super().__init__()
        self.hidden_size = hidden_size
        self.register_buffer("x_mean", torch.zeros(n_features) if x_mean is None
                             else torch.as_tensor(x_mean, dtype=torch.float32).clone())
        self.input_decay = InputDecay(n_features)
        self.hidden_decay = nn.Linear(n_features, hidden_size)
        self.input_gates = nn.Linear(2 * n_features, 3 * hidden_size)
        self.recurrent_gates = nn.Linear(hidden_size, 2 * hidden_size, bias=False)
        self.recurrent_candidate = nn.Linear(hidden_size, hidden_size, bias=False)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.norm = nn.BatchNorm1d(hidden_size) if batch_norm else nn.Identity()
        self.output = nn.Linear(hidden_size, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        gamma_x = self.input_decay(delta)
        # x_hat = m x + (1 - m)(gamma x + (1 - gamma) x_tilde) = (x - u) + u gamma with u = (1 - m)(x - x_tilde): u is
        # data only, so one product on the trainable path (and one in its backward) instead of five
        unobserved = (1 - mask) * (x - self.x_mean)
        x_hat = torch.addcmul(x - unobserved, unobserved, gamma_x)
        gamma_h = torch.exp(-torch.relu(self.hidden_decay(delta)))
        gates_in = self.input_gates(torch.cat([x_hat, mask], dim=-1))
        h = x.new_zeros(x.shape[0], self.hidden_size)
        hs = self.hidden_size
        # the hours unbound once: indexing gates_in[:, t] in the loop would make its backward write a zero tensor of
        # gates_in's full size per hour (T^2 work); unbind's backward stacks the T gradients once
        zr_in, candidate_in = gates_in.split([2 * hs, hs], dim=-1)
        for gamma_t, zr_t, candidate_t in zip(gamma_h.unbind(1), zr_in.unbind(1), candidate_in.unbind(1)):
            h_hat = gamma_t * h
            zr = torch.sigmoid(zr_t + self.recurrent_gates(h_hat))
            z, r = zr[:, :hs], zr[:, hs:]
            candidate = torch.tanh(candidate_t + self.recurrent_candidate(r * h_hat))
            h = (1 - z) * h_hat + z * candidate
        return self.output(self.norm(self.dropout(h))).squeeze(-1)

    #: elements of the largest (N, records, T, F or 3H) intermediate of :meth:`batched_logits`: records go through it
    #: in blocks below this (64 Mi floats, 256 MB), so memory does not grow with the number of records
    BATCHED_ELEMENTS = 1 << 26

    def batched_logits(self, params: dict[str, torch.Tensor], x: torch.Tensor, mask: torch.Tensor,
                       delta: torch.Tensor) -> torch.Tensor:
        """Logits (N, B) of N parameter sets at once (each tensor of ``params`` has a leading N axis):
        the forward above with batched products, sharing x, mask and delta across the N sets, over blocks of
        records that keep each intermediate below :attr:`BATCHED_ELEMENTS`.
        Dropout and batch norm are not supported here (the ExpM utility refuses both)."""
        n, (b, t, f) = len(params["output.weight"]), x.shape
        block = max(1, self.BATCHED_ELEMENTS // max(1, n * t * max(f, 3 * self.hidden_size)))
        if b <= block:
            return self._batched_block(params, x, mask, delta)
        return torch.cat([self._batched_block(params, x[i:i + block], mask[i:i + block], delta[i:i + block])
                          for i in range(0, b, block)], dim=1)

    def _batched_block(self, params, x, mask, delta):
        n, (b, t, f), hs = len(params["output.weight"]), x.shape, self.hidden_size
        gamma_x = torch.exp(-torch.relu(torch.addcmul(params["input_decay.bias"][:, None, None, :], delta,
                                                      params["input_decay.weight"][:, None, None, :])))  # (N, B, T, F)
        unobserved = (1 - mask) * (x - self.x_mean)  # as forward: x_hat = (x - u) + u gamma
        x_hat = torch.addcmul(x - unobserved, unobserved, gamma_x)
        w_hd = params["hidden_decay.weight"]                                                   # (N, H, F)
        gamma_h = torch.exp(-torch.relu((delta.reshape(b * t, f) @ w_hd.reshape(n * hs, f).T)
                                        .reshape(b, t, n, hs).permute(2, 0, 1, 3)
                                        + params["hidden_decay.bias"][:, None, None, :]))      # (N, B, T, H)
        w_in = params["input_gates.weight"]                                                    # (N, 3H, 2F)
        gates_in = torch.bmm(x_hat.reshape(n, b * t, f), w_in[:, :, :f].transpose(1, 2))
        gates_in = gates_in + (mask.reshape(b * t, f) @ w_in[:, :, f:].reshape(n * 3 * hs, f).T
                               ).reshape(b * t, n, 3 * hs).transpose(0, 1)
        gates_in = (gates_in + params["input_gates.bias"][:, None, :]).reshape(n, b, t, 3 * hs)
        w_rg = params["recurrent_gates.weight"].transpose(1, 2)                               # (N, H, 2H)
        w_rc = params["recurrent_candidate.weight"].transpose(1, 2)                           # (N, H, H)
        h = x.new_zeros(n, b, hs)
        zr_in, candidate_in = gates_in.split([2 * hs, hs], dim=-1)  # hours unbound once, as in forward
        for gamma_t, zr_t, candidate_t in zip(gamma_h.unbind(2), zr_in.unbind(2), candidate_in.unbind(2)):
            h_hat = gamma_t * h
            zr = torch.sigmoid(zr_t + torch.bmm(h_hat, w_rg))
            z, r = zr[..., :hs], zr[..., hs:]
            candidate = torch.tanh(candidate_t + torch.bmm(r * h_hat, w_rc))
            h = (1 - z) * h_hat + z * candidate
        return torch.bmm(h, params["output.weight"].transpose(1, 2)).squeeze(-1) + params["output.bias"]


@register_classifier
class GRUDClassifier(Classifier):
    """The grid's ``grud``: (values, mask, delta), each (stays, hours, variables). The values are standardised
    with training statistics, so the empirical training mean x_tilde is 0."""

    name = "grud"

    def inputs(self, values, mask, delta, device="cpu"):
        return tuple(torch.as_tensor(a, device=device) for a in (values, mask, delta))

    def construct(self, n_variables, n_hours, hidden_size, batch_norm, dropout):
        return GRUD(n_variables, hidden_size, dropout=dropout, batch_norm=batch_norm)
