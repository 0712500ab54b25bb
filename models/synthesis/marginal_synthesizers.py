"""Marginal-based baselines, AIM and MST (McKenna et al.; on private-pgm, ``privehr[baselines]``): selection
and noisy measurements of low-order marginals of the binned training patients, then sampled tables.

They take epsilon budgets only (no non-private form, no mu-GDP calibration) and enter the ledger as ``dp``
releases at (epsilon, delta); values within a bin are drawn afterwards with the job's public seed
(post-processing).
"""

from __future__ import annotations

import numpy as np

from privehr.models.synthesis.marginal import synthesize_marginal
from privehr.models.privacy.ledger import LedgerEntry
from privehr.models.synthesis.codec import TableCodec
from privehr.models.synthesis.synthesizers import SynthesisMethod, Synthesized, register_synthesizer

__all__ = ["MarginalSynthesizer", "AIM", "MST"]


class MarginalSynthesizer(SynthesisMethod):
    needs_baselines = True

    def options(self) -> dict:
        """Keyword arguments of the mechanism beyond the shared ones."""
        return {}

    def entry(self, job, plan, guarantee) -> LedgerEntry:
        return LedgerEntry("", "", "dp", self.budget(job).value, delta=self.config.privacy.delta,
                           guarantee=guarantee, what=self.what)

    def fit(self, job, data, plan, noise) -> Synthesized:
        config, budget = self.config, self.budget(job)
        codec = TableCodec.from_spec(data.spec, data.attributes)
        bins = config.marginal.bins
        codes = codec.discretise(data.train[data.attributes], bins)
        options = self.options()
        synthetic_codes, info = synthesize_marginal(self.name, codes, codec.domain(bins), budget.value,
                                                    config.privacy.delta, data.rows * config.releases,
                                                    noise.numpy_generator("measurements"), **options)
        post = np.random.default_rng(data.seed)  # within-bin draws: post-processing of the release, public seed
        tables = [codec.undiscretise(part, bins, post) for part in np.array_split(synthetic_codes, config.releases)]
        release = {"mechanism": self.name, "noise_source": noise.kind, "epsilon": budget.value,
                   "delta": config.privacy.delta, "epsilon_prv": None,
                   **{k: v for k, v in info.items() if k in ("rho", "mbi_version", "selected")}}
        return Synthesized(self.entry(job, plan, noise.guarantee), noise.guarantee, tables, release, None,
                           {"kind": "bounds (bins)", "inside_guarantee": True},
                           {"synthesizer": self.name, "bins": bins, **options})


@register_synthesizer
class AIM(MarginalSynthesizer):
    name, what = "aim", "AIM synthetic data"

    def options(self) -> dict:
        return {"max_model_size": self.config.marginal.max_model_size}


@register_synthesizer
class MST(MarginalSynthesizer):
    name, what = "mst", "MST synthetic data"
