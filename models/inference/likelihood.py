"""Likelihoods for posterior inference: per-record log-likelihoods of parameters, batched over draws and records.

A :class:`Likelihood` is the model half of variational inference (Su, Wang, Schiavazzi, Liu, "Differentially
Private Normalizing Flows for Density Estimation, Data Synthesis, and Variational Inference with Application to
Electronic Health Records", 2023, arXiv:2302.05787, Section 4). One *record* is everything one DP unit
contributed (one subject's covariates and repeated measurements), so the per-record log-likelihood
log p(x_i | theta) is what DP-NF-VI clips.

* :meth:`Likelihood.log_likelihood` maps parameter draws theta (m, d), or (b, m, d) for one draw set per record,
  and records (b, r) to log p(x_i | theta_j), shape (b, m);
* :meth:`Likelihood.score` is its gradient in theta for every (record, draw) pair, (b, m, d), by ``torch.func``;
* :meth:`Likelihood.log_prior` (default: flat, the paper's uniform prior), :meth:`Likelihood.support`
  (a public projection of records onto the design's support, for synthetic records) and, optionally,
  :meth:`Likelihood.simulate` (records from the model's reference design).

Implementations register by name in :data:`LIKELIHOODS`; the configuration's model names come from it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch.func import grad

from privehr.core.registry import Registry

__all__ = ["Likelihood", "LIKELIHOODS", "register_likelihood", "get_likelihood"]


class Likelihood(ABC):
    """log p(x_i | theta) for records x_i (rows) and parameter draws theta."""

    name: str = ""
    parameter_names: tuple[str, ...] = ()
    record_names: tuple[str, ...] = ()

    @property
    def dim(self) -> int:
        return len(self.parameter_names)

    @abstractmethod
    def log_likelihood(self, theta: torch.Tensor, records: torch.Tensor) -> torch.Tensor:
        """(b, m): log p(records[i] | theta[j]) for theta (m, d), or theta[i, j] for theta (b, m, d)."""

    def log_prior(self, theta: torch.Tensor) -> torch.Tensor:
        """log p(theta) up to a constant, (m,): flat (an improper uniform prior) unless overridden."""
        return theta.new_zeros(theta.shape[:-1])

    def support(self, records: torch.Tensor) -> torch.Tensor:
        """Records projected onto the model's public support (default: unchanged)."""
        return records

    def simulate(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """n records from the model's reference design (for demonstrations and tests); optional."""
        raise NotImplementedError(f"model {self.name!r} has no simulator")

    def score(self, theta: torch.Tensor, records: torch.Tensor) -> torch.Tensor:
        """(b, m, d): grad_theta log p(records[i] | theta[j]) for every record i and draw j.

        One ``torch.func.grad`` of the summed log-likelihood over a (b, m, d) copy of the draws: each
        copy enters exactly one term, so its gradient is that term's.
        """
        expanded = theta.detach().expand(len(records), *theta.shape[-2:]).contiguous()
        return grad(lambda t: self.log_likelihood(t, records).sum())(expanded)

    def total_log_posterior(self, theta: torch.Tensor, records: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
        """(m,): sum_i log p(x_i | theta_j) + log p(theta_j), summed over record chunks (bounded memory)."""
        total = self.log_prior(theta)
        for start in range(0, len(records), chunk):
            total = total + self.log_likelihood(theta, records[start:start + chunk]).sum(0)
        return total


#: likelihoods selectable by name (the configuration's ``model``); a class registers itself with its ``name``
LIKELIHOODS: Registry[Likelihood] = Registry("model")
register_likelihood = LIKELIHOODS.register
get_likelihood = LIKELIHOODS.create


import privehr.models.inference.repeated_measures  # noqa: E402,F401  (registers the built-in likelihoods)
