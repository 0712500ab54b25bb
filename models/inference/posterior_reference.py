"""The exact posterior of a low-dimensional model, for comparison: Laplace approximation, then importance sampling.

theta_hat maximises log p(x | theta) + log p(theta) (L-BFGS, float64); H is the Hessian of the negative log
posterior there (``torch.func.hessian``). Draws come from a multivariate Student t (``df`` degrees of freedom)
centred at theta_hat with scale H^-1, heavier-tailed than the posterior, and are weighted by
p(theta | x) / t(theta). Self-normalised importance sampling is consistent for every posterior moment; the
effective sample size (sum w)^2 / sum w^2 says how much to trust it (a small ESS means the Laplace proposal
missed the posterior's shape: :attr:`ReferencePosterior.reliable` is then False, and the report says so).

This is the "original nonlinear model" column of Su, Wang, Schiavazzi, Liu (2023, arXiv:2302.05787), Tables 6-7.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from privehr.models.inference.dp_vi import posterior_summary
from privehr.models.inference.likelihood import Likelihood

__all__ = ["ReferencePosterior", "reference_posterior"]


@dataclass
class ReferencePosterior:
    mode: list[float]
    summary: dict            # mean, sd, correlation (importance-weighted)
    effective_sample_size: float
    draws: int

    @property
    def reliable(self) -> bool:
        """At least 10 % of the draws effective."""
        return self.effective_sample_size >= 0.1 * self.draws


def _maximise(likelihood: Likelihood, records: torch.Tensor, start: torch.Tensor, iterations: int) -> torch.Tensor:
    theta = start.clone().requires_grad_(True)
    optimizer = torch.optim.LBFGS([theta], lr=1.0, max_iter=iterations, line_search_fn="strong_wolfe",
                                  tolerance_grad=1e-10, tolerance_change=1e-14)

    def closure():
        optimizer.zero_grad()
        loss = -likelihood.total_log_posterior(theta[None], records)[0] / len(records)
        loss.backward()
        return loss

    optimizer.step(closure)
    return theta.detach()


def reference_posterior(likelihood: Likelihood, records: torch.Tensor, draws: int = 20000, df: float = 7.0,
                        start: torch.Tensor | None = None, generator: torch.Generator | None = None,
                        chunk: int = 500) -> ReferencePosterior:
    """Importance-sampled posterior moments of ``likelihood`` given ``records`` (float64 throughout)."""
    x = records.double()
    start = (torch.zeros(likelihood.dim, dtype=torch.float64, device=x.device) if start is None
             else start.double().to(x.device))
    mode = _maximise(likelihood, x, start, 500)
    hessian = torch.func.hessian(lambda t: -likelihood.total_log_posterior(t[None], x)[0])(mode)
    cov = torch.linalg.inv(0.5 * (hessian + hessian.T))
    chol = torch.linalg.cholesky(cov)
    d = likelihood.dim
    gen = generator if generator is not None else torch.Generator(device=x.device).manual_seed(0)
    normal = torch.randn(draws, d, generator=gen, device=x.device, dtype=torch.float64)
    chi2 = 2 * torch._standard_gamma(torch.full((draws,), df / 2, dtype=torch.float64, device=x.device))
    t = normal * torch.sqrt(df / chi2)[:, None]
    theta = mode + t @ chol.T
    log_t = -0.5 * (df + d) * torch.log1p(t.pow(2).sum(1) / df)   # up to a constant
    log_post = torch.cat([likelihood.total_log_posterior(theta[i:i + chunk], x) for i in range(0, draws, chunk)])
    log_w = log_post - log_t
    w = torch.exp(log_w - log_w.max())
    ess = float(w.sum() ** 2 / w.pow(2).sum())
    summary = posterior_summary(theta.cpu(), w.cpu())
    if not math.isfinite(ess):
        ess = 0.0
    return ReferencePosterior(mode.tolist(), summary, ess, draws)
