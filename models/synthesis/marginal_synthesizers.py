"""Marginal-based baselines, AIM and MST (McKenna et al.; on private-pgm, ``privehr[baselines]``): selection
and noisy measurements of low-order marginals of the binned training patients, then sampled tables.

They take epsilon budgets only (no non-private form, no mu-GDP calibration) and enter the ledger as ``dp``
releases at (epsilon, delta); values within a bin are drawn afterwards with the job's public seed
(post-processing).
"""

from __future__ import annotations

import numpy as np

from privehr.models.privacy.zcdp import cdp_rho
from privehr.models.synthesis.marginal import synthesize_marginal
from privehr.models.synthesis.missingness import indicator
from privehr.models.synthesis.within_bin import measure_dyadic, sample_within_bins
from privehr.models.privacy.ledger import LedgerEntry
from privehr.models.synthesis.codec import TableCodec
from privehr.models.synthesis.synthesizers import SynthesisMethod, Synthesized, register_synthesizer

__all__ = ["MarginalSynthesizer", "AIM", "MST", "AIMDyadic"]


class MarginalSynthesizer(SynthesisMethod):
    needs_baselines = True
    budget_kinds = frozenset({"epsilon"})  # no non-private form, no mu-GDP calibration

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
        train = data.train[data.attributes]
        codes = codec.discretise(train, bins)
        options = self.options()
        rng = noise.numpy_generator("measurements")
        rho = cdp_rho(budget.value, config.privacy.delta)
        within, extra = self.within_bins(codec, train, bins, rho, rng)
        synthetic_codes, info = synthesize_marginal(self.mechanism, codes, codec.domain(bins), budget.value,
                                                    config.privacy.delta, data.rows * config.releases, rng,
                                                    rho=rho - extra.get("rho", 0.0), **options)
        post = np.random.default_rng(data.seed)  # within-bin draws: post-processing of the release, public seed
        sample = None if within is None else (lambda column, coarse: within(column, coarse, post))
        tables = [codec.undiscretise(part, bins, post, sample)
                  for part in np.array_split(synthetic_codes, config.releases)]
        release = {"mechanism": self.name, "noise_source": noise.kind, "epsilon": budget.value,
                   "delta": config.privacy.delta, "epsilon_prv": None,
                   **{k: v for k, v in info.items() if k in ("rho", "mbi_version", "selected")},
                   **({"within_bins": extra, "rho_total": rho} if extra else {})}
        return Synthesized(self.entry(job, plan, noise.guarantee), noise.guarantee, tables, release, None,
                           {"kind": "bounds (bins)", "inside_guarantee": True},
                           {"synthesizer": self.name, "bins": bins, **options})

    @property
    def mechanism(self) -> str:
        """The marginal mechanism of :func:`synthesize_marginal` this synthesizer runs."""
        return self.name

    def within_bins(self, codec, train, bins, rho, rng):
        """(sampler of continuous values within bins or None, its record with the rho it spent): uniform here."""
        return None, {}


@register_synthesizer
class AIM(MarginalSynthesizer):
    name, what, display_name, report_rank = "aim", "AIM synthetic data", "AIM", 3

    def options(self) -> dict:
        return {"max_model_size": self.config.marginal.max_model_size}


@register_synthesizer
class MST(MarginalSynthesizer):
    name, what, display_name, report_rank = "mst", "MST synthetic data", "MST", 5


@register_synthesizer
class AIMDyadic(AIM):
    """AIM on the bins plus a DP dyadic histogram of each continuous column for the values within its bins
    (:mod:`privehr.models.synthesis.within_bin`): ``marginal.within_share`` of the budget's rho goes to the
    histograms, the rest to AIM; the two compose in zCDP to the release's (epsilon, delta)."""

    name, what, display_name = "aim_dyadic", "AIM synthetic data with DP values within bins", "AIM + dyadic bins"
    report_rank = 4

    @property
    def mechanism(self) -> str:
        return "aim"

    def within_bins(self, codec, train, bins, rho, rng):
        settings = self.config.marginal
        continuous = codec.continuous
        if not continuous:  # nothing is binned: all of the budget goes to AIM
            return None, {}
        levels, share = settings.within_levels, settings.within_share
        codes = codec.discretise(train, bins * 2 ** levels)
        fine = []
        for c in continuous:  # observed values only: a placeholder standing in for a missing one is not a value
            column = codes[:, codec.columns.index(c)]
            missing = indicator(c.name)
            fine.append(column[train[missing].to_numpy() == 0] if missing in train.columns else column)
        histograms = measure_dyadic(fine, bins, levels, share * rho, rng)
        index = {c.name: j for j, c in enumerate(continuous)}

        def within(column, coarse, post):
            return sample_within_bins(histograms, index[column.name], coarse, column.low, column.high, post,
                                      settings.within_stop)

        return within, {"rho": histograms.rho, "sigma": histograms.sigma, "levels": levels,
                        "columns": [c.name for c in continuous]}
