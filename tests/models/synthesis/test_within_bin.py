"""The DP dyadic histogram of values within bins (aim_dyadic): its noise is what its rho says, its samples stay in
their bins, a heavy bin is refined where the counts carry signal and a light one stays uniform, and the hybrid
synthesizer spends exactly the budget's rho between AIM and the histograms."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from privehr.core.config import SynthesisConfig
from privehr.core.specs import load_ehr_spec
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.zcdp import cdp_rho
from privehr.models.synthesis import SynthesisData, choose_synthesizers, create_synthesizer, synthesis_jobs
from privehr.models.synthesis.within_bin import dyadic_sigma, measure_dyadic, sample_within_bins


def test_each_cell_is_noised_at_the_sigma_of_its_rho_and_the_levels_nest():
    rng = np.random.default_rng(0)
    fine = rng.integers(0, 4 * 2 ** 3, size=(500, 2))
    histograms = measure_dyadic(fine, bins=4, levels=3, rho=2.0, rng=np.random.default_rng(1))
    sigma = dyadic_sigma(2, 3, 2.0)
    assert histograms.sigma == pytest.approx(sigma) == pytest.approx(np.sqrt(3 * 2 / 4.0))
    for j in range(2):
        assert [c.size for c in histograms.counts[j]] == [8, 16, 32]
        exact = np.bincount(fine[:, j], minlength=32).astype(float)
        errors = []
        for counts in reversed(histograms.counts[j]):
            errors.append(counts - exact)
            exact = exact.reshape(-1, 2).sum(axis=1)
        errors = np.concatenate(errors)
        assert abs(errors.std() - sigma) < 0.25 * sigma and abs(errors.mean()) < 0.5 * sigma


def test_samples_stay_in_their_bins_whatever_the_noise():
    rng = np.random.default_rng(2)
    fine = rng.integers(0, 8 * 16, size=(300, 1))
    for rho in (1e-4, 1.0, 1e4):
        histograms = measure_dyadic(fine, bins=8, levels=4, rho=rho, rng=np.random.default_rng(3))
        coarse = rng.integers(0, 8, size=2000)
        values = sample_within_bins(histograms, 0, coarse, 10.0, 50.0, np.random.default_rng(4))
        edges = np.linspace(10.0, 50.0, 9)
        assert np.all(values >= edges[coarse]) and np.all(values < edges[coarse + 1])


def _skewed(n, rng):
    """Values on [0, 100] with almost all mass at the bottom of the first of 4 bins (like a follow-up time)."""
    return np.clip(rng.exponential(3.0, size=n), 0, 99.9)


def test_a_heavy_bin_is_refined_when_its_counts_carry_signal_and_stays_uniform_when_they_do_not():
    rng = np.random.default_rng(5)
    real = _skewed(4000, rng)
    bins, levels = 4, 5
    fine = np.clip((real / 100.0 * bins * 2 ** levels).astype(int), 0, bins * 2 ** levels - 1)[:, None]
    coarse = (fine[:, 0] >> levels)
    uniform = coarse * 25.0 + rng.random(len(coarse)) * 25.0
    ks_uniform = stats.ks_2samp(real, uniform).statistic
    sharp = measure_dyadic(fine, bins, levels, rho=5.0, rng=np.random.default_rng(6))
    refined = sample_within_bins(sharp, 0, coarse, 0.0, 100.0, np.random.default_rng(7))
    assert ks_uniform > 0.5 and stats.ks_2samp(real, refined).statistic < 0.1
    blurred = measure_dyadic(fine, bins, levels, rho=1e-7, rng=np.random.default_rng(8))  # sigma ~ 10^4
    flat = sample_within_bins(blurred, 0, coarse, 0.0, 100.0, np.random.default_rng(9))
    # nothing carries signal: the first bin's values are uniform on [0, 25), as AIM alone would draw them
    assert stats.kstest(flat[coarse == 0] / 25.0, "uniform").pvalue > 1e-3


def test_the_hybrid_spends_the_budgets_rho_between_aim_and_the_histograms():
    spec = load_ehr_spec("harrod_ehr")
    bounds = spec.bounds()
    continuous = [a for a, b in bounds.items() if b.kind == "numeric"][:2]
    rng = np.random.default_rng(10)
    table = pd.DataFrame({a: rng.uniform(*bounds[a].code_range(), size=120) for a in continuous})
    config = SynthesisConfig(synthesizers=["aim_dyadic"], epsilons=[2.0], mus=[], releases=1,
                             marginal={"bins": 4, "within_share": 0.25, "within_levels": 3})
    synthesizer = create_synthesizer("aim_dyadic", config)
    job = synthesis_jobs(config)[0]
    done = synthesizer.fit(job, SynthesisData(table, table, continuous, spec, 50, 0), None,
                           NoiseSource.reproducible("hybrid", "test"))
    within, total = done.release["within_bins"], cdp_rho(2.0, config.privacy.delta)
    assert within["columns"] == continuous and within["levels"] == 3
    assert within["rho"] == pytest.approx(0.25 * total)
    assert within["rho"] + done.release["rho"] == pytest.approx(total)
    assert within["sigma"] == pytest.approx(dyadic_sigma(2, 3, 0.25 * total))
    lows = np.array([bounds[a].code_range()[0] for a in continuous])
    highs = np.array([bounds[a].code_range()[1] for a in continuous])
    values = done.tables[0][continuous].to_numpy()
    assert np.all(values >= lows) and np.all(values <= highs)


def test_a_placeholder_standing_in_for_missing_values_is_not_a_value_within_its_bin():
    """With missingness in the release, 40 % of a column is the placeholder (the centre of its bounds, a bin edge):
    the histograms count observed values only, so synthetic observed values do not pile onto the placeholder."""
    from privehr.core.specs import VariableBounds
    from privehr.models.synthesis.missingness import indicator, missingness_spec, placeholder

    spec = load_ehr_spec("harrod_ehr")
    name = next(a for a, b in spec.bounds().items() if b.kind == "numeric")
    bounds = spec.bounds()[name]
    rng = np.random.default_rng(11)
    low, high = bounds.code_range()
    observed = rng.uniform(low, high, size=2000)
    missing = rng.random(2000) < 0.4
    stand_in = placeholder(VariableBounds(**bounds.model_dump()))
    table = pd.DataFrame({name: np.where(missing, stand_in, observed), indicator(name): missing.astype(float)})
    config = SynthesisConfig(synthesizers=["aim_dyadic"], epsilons=[50.0], mus=[], releases=1,
                             privacy={"epsilon_ceiling": 100}, marginal={"bins": 4})
    data = SynthesisData(table, table, [name, indicator(name)], missingness_spec(spec, [name]), 2000, 0)
    done = create_synthesizer("aim_dyadic", config).fit(synthesis_jobs(config)[0], data, None,
                                                        NoiseSource.reproducible("placeholder", "test"))
    synthetic = done.tables[0]
    values = synthetic.loc[synthetic[indicator(name)] == 0, name].to_numpy()
    near = np.abs(values - stand_in) < (high - low) / (4 * 2 ** 4)  # within one finest cell of the placeholder
    assert near.mean() < 0.1  # uniform observed values: about 0.06; counting the placeholders put 0.18 there


def test_the_default_synthesizer_follows_the_tables_types(tmp_path):
    import yaml

    from privehr.core.config import default_synthesizers

    harrod = load_ehr_spec("harrod_ehr")
    (tmp_path / "mixed.yaml").write_text(yaml.safe_dump({
        "name": "mixed", "attributes": [{"name": "smoker", "kind": "binary"},
                                        {"name": "age", "kind": "integer", "valid_low": 18, "valid_high": 110}]}))
    mixed = load_ehr_spec(tmp_path / "mixed.yaml")
    assert default_synthesizers(harrod) == ["maf"] and default_synthesizers(mixed) == ["aim_dyadic"]
    config = SynthesisConfig(epsilons=[1.0])
    assert choose_synthesizers(config, mixed).synthesizers == ["aim_dyadic"] and config.synthesizers is None
    chosen = choose_synthesizers(SynthesisConfig(synthesizers=["hflow"]), mixed)
    assert chosen.synthesizers == ["hflow"]  # a choice stays
    with pytest.raises(RuntimeError, match="choose_synthesizers"):
        synthesis_jobs(config)
    # a run with mu-GDP budgets only: aim_dyadic would make no release, so the default is a flow
    assert choose_synthesizers(SynthesisConfig(epsilons=[], mus=[2.0]), mixed).synthesizers == ["maf"]
