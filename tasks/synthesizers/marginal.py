"""Marginal-based baselines, AIM and MST (McKenna et al.; on private-pgm, ``privehr[baselines]``): selection
and noisy measurements of low-order marginals of the binned training patients, then sampled tables.

They take epsilon budgets only (no non-private form, no mu-GDP calibration) and enter the ledger as ``dp``
releases at (epsilon, delta); values within a bin are drawn afterwards with the job's public seed
(post-processing).
"""

from __future__ import annotations

import numpy as np

from privehr.models.marginal_synthesis import synthesize_marginal
from privehr.models.privacy_ledger import LedgerEntry
from privehr.tasks.synthesizers.base import SynthesisJob, SynthesisMethod, Synthesized, register_synthesizer

__all__ = ["MarginalSynthesizer", "AIM", "MST"]


class MarginalSynthesizer(SynthesisMethod):
    needs_baselines = True

    def options(self, config) -> dict:
        """Keyword arguments of the mechanism beyond the shared ones."""
        return {}

    def planned_entry(self, config, job, n, guarantee) -> LedgerEntry:
        return LedgerEntry("", "", "dp", job["budget"]["value"], delta=config.privacy.delta, guarantee=guarantee,
                           what=self.what)

    def synthesize(self, job: SynthesisJob) -> Synthesized:
        config, codec, budget = job.config, job.codec, job.budget
        bins = config.marginal.bins
        codes = codec.discretise(job.train[job.attributes], bins)
        options = self.options(config)
        synthetic_codes, info = synthesize_marginal(self.name, codes, codec.domain(bins), budget.value,
                                                    config.privacy.delta, job.rows * config.releases,
                                                    job.noise.numpy_generator("measurements"), **options)
        guarantee = job.noise.guarantee
        job.record(self.planned_entry(config, job.job, len(job.train), guarantee))
        post = np.random.default_rng(job.seed)  # within-bin draws: post-processing of the release, public seed
        tables = [codec.undiscretise(part, bins, post) for part in np.array_split(synthetic_codes, config.releases)]
        release = {"mechanism": self.name, "noise_source": job.noise.kind, "epsilon": budget.value,
                   "delta": config.privacy.delta, "epsilon_prv": None,
                   **{k: v for k, v in info.items() if k in ("rho", "mbi_version", "selected")}}
        return Synthesized(guarantee, tables, release, None, {"kind": "bounds (bins)", "inside_guarantee": True},
                           {"synthesizer": self.name, "bins": bins, **options})


@register_synthesizer
class AIM(MarginalSynthesizer):
    name, what = "aim", "AIM synthetic data"

    def options(self, config) -> dict:
        return {"max_model_size": config.marginal.max_model_size}


@register_synthesizer
class MST(MarginalSynthesizer):
    name, what = "mst", "MST synthetic data"
