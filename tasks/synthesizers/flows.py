"""Flow synthesizers: DP-NF (a MAF, Su et al. 2023) and DP-HFlow (Lee et al. 2022), trained by DP-SGD on a
job's training patients; the released flow is sampled for the tables (post-processing).

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.
    Lee, Kim, Jeong, Ro (2022). Differentially Private Normalizing Flows for Synthetic Tabular Data Generation. AAAI.
"""

from __future__ import annotations

import json
from abc import abstractmethod

import numpy as np
import torch

from privehr.core.config import Budget, DPNFConfig, HFlowConfig, SynthesisConfig
from privehr.models.budget_kinds import budget_kind
from privehr.models.classifiers import seeded_build
from privehr.models.column_codec import TableCodec
from privehr.models.device import resolve_device
from privehr.models.dp_nf import DensityHyperparameters, mean_log_likelihood, train_density
from privehr.models.hflow import HFlow
from privehr.models.maf import MAF
from privehr.models.privacy_ledger import LedgerEntry
from privehr.models.release_plan import ReleasePlan, rate_batch
from privehr.models.table_scaling import AffineScaling
from privehr.tasks.progress import progress_artifact
from privehr.tasks.synthesizers.base import SynthesisJob, SynthesisMethod, Synthesized, register_synthesizer

__all__ = ["FlowSynthesizer", "DPNF", "DPHFlow", "density_hyperparameters"]


def density_hyperparameters(nf: DPNFConfig | HFlowConfig, n: int, seed: int) -> DensityHyperparameters:
    """A flow's optimiser settings; the non-private flow's minibatch is the plans' expected batch b, and it stops
    early on held-out training patients."""
    return DensityHyperparameters(learning_rate=nf.learning_rate, batch_size=rate_batch(n, nf.sample_rate),
                                  steps=nf.steps, seed=seed, validation_fraction=nf.validation_fraction,
                                  patience=nf.patience)


class FlowSynthesizer(SynthesisMethod):
    """A normalizing flow fitted by DP-SGD (or without noise for the non-private column)."""

    @abstractmethod
    def settings(self, config: SynthesisConfig) -> DPNFConfig | HFlowConfig:
        """The flow's section of the config (steps, rate, clipping norm, ...)."""

    @abstractmethod
    def fit(self, x_frame, test, attributes, spec, config, plan, noise, seed, target, job_id):
        """Train on ``x_frame``: (flow, density release, held-out log-likelihood, sample(rows, generator),
        scaling record, model settings)."""

    def plan(self, config, job, n) -> ReleasePlan | None:
        budget = Budget(**job["budget"])
        nf: DPNFConfig | HFlowConfig = self.settings(config)
        return budget_kind(budget.kind).plan(n, nf.sample_rate, nf.steps, budget.value, delta=config.privacy.delta,
                                             max_grad_norm=nf.max_grad_norm)

    def planned_entry(self, config, job, n, guarantee) -> LedgerEntry:
        plan = self.plan(config, job, n)
        return LedgerEntry("", "", "non_private", what=self.what) if plan is None else \
            plan.ledger_entry(guarantee, self.what)

    def synthesize(self, job: SynthesisJob) -> Synthesized:
        config, job_id = job.config, job.job["job_id"]
        plan = self.plan(config, job.job, len(job.train))
        flow, release, held_out, sample, scaling, model = self.fit(
            job.train, job.test, job.attributes, job.spec, config, plan, job.noise, job.seed,
            resolve_device(job.device), job_id)
        guarantee = "non_private" if plan is None else job.noise.guarantee
        job.record(self.planned_entry(config, job.job, len(job.train), guarantee))  # at once: no entry is lost
        job.flows_dir.mkdir(parents=True, exist_ok=True)
        torch.save(flow.state_dict(), job.flows_dir / f"{job_id}.pt")
        # the loss curve is a statistic of the private training batches: kept with the patient-level files
        (job.flows_dir / f"{job_id}.history.json").write_text(json.dumps(release.history))
        generator = torch.Generator().manual_seed(job.seed + 7919)
        tables = [sample(job.rows, generator) for _ in range(config.releases)]
        extra = {"flow": str(job.flows_dir / f"{job_id}.pt"),
                 **({"early_stopping": release.early_stopping} if release.early_stopping else {})}
        return Synthesized(guarantee, tables, release.as_dict(), held_out, scaling, model, extra)


@register_synthesizer
class DPNF(FlowSynthesizer):
    """DP-NF: every column continuous, affinely scaled (by the bounds, or the training statistics)."""

    name, what = "maf", "DP-NF flow"

    def needs_bounds(self, config: SynthesisConfig) -> bool:
        return config.scaling == "bounds"

    def settings(self, config):
        return config.dpnf

    def fit(self, x_frame, test, attributes, spec, config, plan, noise, seed, target, job_id):
        bounds = {a: spec.bounds()[a].code_range() for a in attributes}
        scaling = AffineScaling(bounds if config.scaling == "bounds" else None).fit(x_frame[attributes])  # train
        x = torch.tensor(scaling.transform(x_frame), dtype=torch.float32, device=target)
        nf = config.dpnf
        flow = seeded_build(lambda: MAF(len(attributes), nf.blocks, nf.hidden_size, nf.hidden_layers),
                            seed).to(target)
        release = train_density(flow, x, density_hyperparameters(nf, len(x), seed), plan, noise,
                                progress=progress_artifact(f"DP-NF {job_id}: DP-SGD steps"))
        x_test = torch.tensor(scaling.transform(test), dtype=torch.float32, device=target)
        held_out = mean_log_likelihood(flow, x_test) - float(np.log(scaling.scale_).sum())
        sample = lambda rows, generator: scaling.inverse_transform(  # noqa: E731
            flow.sample(rows, generator).cpu().numpy())
        model = {"synthesizer": "maf", "blocks": nf.blocks, "hidden_size": nf.hidden_size,
                 "hidden_layers": nf.hidden_layers, "steps": nf.steps}
        return flow, release, held_out, sample, {"kind": config.scaling, "inside_guarantee": not scaling.private_}, \
            model


@register_synthesizer
class DPHFlow(FlowSynthesizer):
    """DP-HFlow: continuous columns scaled by the bounds, discrete columns as codes (dequantized in the flow)."""

    name, what = "hflow", "DP-HFlow flow"

    def settings(self, config):
        return config.hflow

    def fit(self, x_frame, test, attributes, spec, config, plan, noise, seed, target, job_id):
        codec = TableCodec.from_spec(spec, attributes)
        hf = config.hflow
        x = torch.tensor(codec.flow_inputs(x_frame), dtype=torch.float32, device=target)
        flow = seeded_build(lambda: HFlow(len(codec.continuous), codec.cardinalities, blocks=hf.blocks,
                                          hidden_size=hf.hidden_size, hidden_layers=hf.hidden_layers, bins=hf.bins,
                                          rank=hf.rank, dequantization=hf.dequantization), seed).to(target)
        hp = density_hyperparameters(hf, len(x), seed)
        release = train_density(flow, x, hp, plan, noise, clipping=hf.clipping, sparsity=hf.sparsity,
                                progress=progress_artifact(f"DP-HFlow {job_id}: DP-SGD steps"))
        x_test = torch.tensor(codec.flow_inputs(test), dtype=torch.float32, device=target)
        _, scale = codec.affine()
        held_out = mean_log_likelihood(flow, x_test) - float(np.log(scale).sum())
        sample = lambda rows, generator: codec.from_flow(flow.sample(rows, generator).cpu().numpy())  # noqa: E731
        model = {"synthesizer": "hflow", **hf.model_dump()}
        return flow, release, held_out, sample, {"kind": "bounds", "inside_guarantee": True}, model
