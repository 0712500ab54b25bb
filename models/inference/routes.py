"""The two routes to a private posterior compared by Su et al. 2023, Section 4.

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.

(a) **DP-NF-VI** (:func:`private_posterior`): a variational flow over the parameters trained on the records by
    DP-SGD (:mod:`privehr.models.inference.dp_vi`, Algorithm 2), the released flow then sampled (post-processing).
(b) **VI on DP synthetic data** (:func:`synthetic_posterior`): a DP-NF density of the records (:mod:`privehr.models.dpsgd.density`,
    Algorithm 1), ``datasets`` synthetic tables drawn from it, ordinary NF-VI on each (post-processing: no
    further privacy cost), and the posteriors pooled by concatenating equally many draws of each (the mixture of
    the per-table posteriors, as multiple imputation pools).

Both return :func:`privehr.models.inference.dp_vi.posterior_summary` dictionaries (posterior mean, SD, correlation) and the
release record of the one DP release they make. Pure math: no files, no Prefect.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from privehr.models.classifiers import seeded_build  # initial weights: public, seeded under one lock across threads
from privehr.models.dpsgd.density import DensityHyperparameters, DensityRelease, train_density
from privehr.models.inference.dp_vi import VIHyperparameters, VIRelease, posterior_summary, train_vi, untemper
from privehr.models.inference.likelihood import Likelihood
from privehr.models.nf.maf import MAF
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import ReleasePlan
from privehr.models.nf.variational import VariationalFlow

__all__ = ["FlowShape", "private_posterior", "synthetic_posterior", "PosteriorFit"]


@dataclass(frozen=True)
class FlowShape:
    """As Su et al. 2023: one MADE with one hidden layer of 10 units."""

    blocks: int = 1
    hidden_size: int = 10
    hidden_layers: int = 1


@dataclass
class PosteriorFit:
    summary: dict                 # posterior mean, sd, correlation
    release: VIRelease | DensityRelease
    draws: torch.Tensor           # (summary_draws, d) draws of theta (pooled for route (b)), on the CPU
    parts: list[dict] | None = None  # route (b): the summary of each synthetic table's posterior


def _fit_vi(likelihood: Likelihood, records: torch.Tensor, hp: VIHyperparameters, shape: FlowShape, seed: int,
            summary_draws: int, plan: ReleasePlan | None = None, noise: NoiseSource | None = None):
    flow = seeded_build(lambda: VariationalFlow(likelihood.dim, shape.blocks, shape.hidden_size,
                                                shape.hidden_layers), seed)
    flow = flow.to(device=records.device, dtype=records.dtype)
    release = train_vi(flow, likelihood, records, hp, plan, noise)
    draws = flow.sample(summary_draws, torch.Generator().manual_seed(seed + 1))  # CPU draws, moved to the flow
    return untemper(draws, hp.temperature).cpu(), release


def private_posterior(likelihood: Likelihood, records: torch.Tensor, hp: VIHyperparameters, shape: FlowShape,
                      plan: ReleasePlan | None, noise: NoiseSource | None = None, seed: int = 0,
                      summary_draws: int = 20000) -> PosteriorFit:
    """Route (a), DP-NF-VI at ``plan`` (None: the non-private NF-VI)."""
    draws, release = _fit_vi(likelihood, records, hp, shape, seed, summary_draws, plan, noise)
    return PosteriorFit(posterior_summary(draws), release, draws)


def synthetic_posterior(likelihood: Likelihood, records: torch.Tensor, density: DensityHyperparameters,
                        density_shape: FlowShape, plan: ReleasePlan | None, hp: VIHyperparameters, shape: FlowShape,
                        datasets: int, rows: int, noise: NoiseSource | None = None, seed: int = 0,
                        summary_draws: int = 20000) -> PosteriorFit:
    """Route (b): DP-NF of the records at ``plan``, ``datasets`` tables of ``rows`` rows, NF-VI on each, pooled."""
    flow = seeded_build(lambda: MAF(records.shape[1], density_shape.blocks, density_shape.hidden_size,
                                    density_shape.hidden_layers), seed)
    flow = flow.to(device=records.device, dtype=records.dtype)
    release = train_density(flow, records, density, plan, noise)
    flow.eval()
    generator = torch.Generator().manual_seed(seed + 2)  # sampling the released flow: post-processing
    pooled, parts = [], []
    per_table = -(-summary_draws // datasets)
    for k in range(datasets):
        synthetic = likelihood.support(flow.sample(rows, generator).to(records.dtype))
        draws, _ = _fit_vi(likelihood, synthetic, hp, shape, seed + 10 * (k + 1), per_table)
        parts.append(posterior_summary(draws))
        pooled.append(draws)
    pooled = torch.cat(pooled)
    return PosteriorFit(posterior_summary(pooled), release, pooled, parts)
