"""Flow synthesizers: DP-NF (a MAF, Su et al. 2023) and DP-HFlow (Lee et al. 2022), trained by DP-SGD on a
job's training patients; the released flow is sampled for the tables (post-processing).

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.
    Lee, Kim, Jeong, Ro (2022). Differentially Private Normalizing Flows for Synthetic Tabular Data Generation. AAAI.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np
import torch

from privehr.core.config import DPNFConfig, HFlowConfig
from privehr.models.privacy.budget_kinds import budget_kind
from privehr.models.classifiers import seeded_build
from privehr.models.synthesis.codec import TableCodec
from privehr.models.device import resolve_device
from privehr.models.dpsgd.density import DensityHyperparameters, mean_log_likelihood, train_density
from privehr.models.nf.hflow import HFlow
from privehr.models.nf.maf import MAF
from privehr.models.privacy.ledger import LedgerEntry
from privehr.models.privacy.release_plan import ReleasePlan, rate_batch
from privehr.models.synthesis.scaling import AffineScaling
from privehr.models.synthesis.synthesizers import SynthesisMethod, Synthesized, register_synthesizer

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
    def settings(self) -> DPNFConfig | HFlowConfig:
        """The flow's section of the config (steps, rate, clipping norm, ...)."""

    @abstractmethod
    def train(self, job: dict, data, plan, noise, target):
        """Train on ``data.train``: (flow, density release, held-out log-likelihood, sample(rows, generator),
        scaling record, model settings)."""

    def plan(self, job, n) -> ReleasePlan | None:
        budget = self.budget(job)
        nf: DPNFConfig | HFlowConfig = self.settings()
        return budget_kind(budget.kind).plan(n, nf.sample_rate, nf.steps, budget.value,
                                             delta=self.config.privacy.delta, max_grad_norm=nf.max_grad_norm)

    def entry(self, job, plan, guarantee) -> LedgerEntry:
        return LedgerEntry("", "", "non_private", what=self.what) if plan is None else \
            plan.ledger_entry(guarantee, self.what)

    def fit(self, job, data, plan, noise) -> Synthesized:
        flow, release, held_out, sample, scaling, model = self.train(job, data, plan, noise,
                                                                     resolve_device(self.device))
        guarantee = "non_private" if plan is None else noise.guarantee
        generator = torch.Generator().manual_seed(data.seed + 7919)
        tables = [sample(data.rows, generator) for _ in range(self.config.releases)]
        extra = {"early_stopping": release.early_stopping} if release.early_stopping else {}
        # the loss curve is a statistic of the private training batches: kept with the patient-level files
        return Synthesized(self.entry(job, plan, guarantee), guarantee, tables, release.as_dict(), held_out, scaling,
                           model, extra, state_={"flow": flow.state_dict(), "history": release.history})


@register_synthesizer
class DPNF(FlowSynthesizer):
    """DP-NF: every column continuous, affinely scaled (by the bounds, or the training statistics)."""

    name, what, display_name, report_rank = "maf", "DP-NF flow", "DP-NF (MAF)", 1

    @classmethod
    def job_prefix(cls) -> str:
        return ""  # the first synthesizer's job ids carry no prefix, as before there were others

    def needs_bounds(self) -> bool:
        return self.config.scaling == "bounds"

    def settings(self):
        return self.config.dpnf

    def train(self, job, data, plan, noise, target):
        config, x_frame, attributes, seed = self.config, data.train, data.attributes, data.seed
        bounds = {a: data.spec.bounds()[a].code_range() for a in attributes}
        scaling = AffineScaling(bounds if config.scaling == "bounds" else None).fit(x_frame[attributes])  # train
        x = torch.tensor(scaling.transform(x_frame), dtype=torch.float32, device=target)
        nf = config.dpnf
        flow = seeded_build(lambda: MAF(len(attributes), nf.blocks, nf.hidden_size, nf.hidden_layers),
                            seed).to(target)
        release = train_density(flow, x, density_hyperparameters(nf, len(x), seed), plan, noise,
                                progress=self.progress(f"DP-NF {job['job_id']}: DP-SGD steps"))
        x_test = torch.tensor(scaling.transform(data.test), dtype=torch.float32, device=target)
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

    name, what, display_name, report_rank = "hflow", "DP-HFlow flow", "DP-HFlow", 2

    def settings(self):
        return self.config.hflow

    def train(self, job, data, plan, noise, target):
        codec, seed = TableCodec.from_spec(data.spec, data.attributes), data.seed
        hf = self.config.hflow
        x = torch.tensor(codec.flow_inputs(data.train), dtype=torch.float32, device=target)
        flow = seeded_build(lambda: HFlow(len(codec.continuous), codec.cardinalities, blocks=hf.blocks,
                                          hidden_size=hf.hidden_size, hidden_layers=hf.hidden_layers, bins=hf.bins,
                                          rank=hf.rank, dequantization=hf.dequantization), seed).to(target)
        hp = density_hyperparameters(hf, len(x), seed)
        release = train_density(flow, x, hp, plan, noise, clipping=hf.clipping, sparsity=hf.sparsity,
                                progress=self.progress(f"DP-HFlow {job['job_id']}: DP-SGD steps"))
        x_test = torch.tensor(codec.flow_inputs(data.test), dtype=torch.float32, device=target)
        _, scale = codec.affine()
        held_out = mean_log_likelihood(flow, x_test) - float(np.log(scale).sum())
        sample = lambda rows, generator: codec.from_flow(flow.sample(rows, generator).cpu().numpy())  # noqa: E731
        model = {"synthesizer": "hflow", **hf.model_dump()}
        return flow, release, held_out, sample, {"kind": "bounds", "inside_guarantee": True}, model
