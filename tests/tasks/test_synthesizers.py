"""The synthesizer registry: names agree with the config, and each synthesizer plans the ledger entry its release
records (a flow's DP-SGD plan at the job's budget; a marginal baseline's (epsilon, delta))."""

from typing import get_args

import pytest

from privehr.core.config import MARGINAL_SYNTHESIZERS, SynthesisConfig, Synthesizer
from privehr.models.budget_kinds import budget_kind
from privehr.tasks.synthesizers import SYNTHESIZERS, get_synthesizer


def test_every_declared_synthesizer_is_registered_and_the_baselines_are_the_marginal_ones():
    assert set(SYNTHESIZERS) == set(get_args(Synthesizer))
    assert {name for name, s in SYNTHESIZERS.items() if s.needs_baselines} == set(MARGINAL_SYNTHESIZERS)
    with pytest.raises(ValueError, match="unknown synthesizer"):
        get_synthesizer("ctgan")


@pytest.mark.parametrize("name", ["maf", "hflow"])
def test_a_flow_plans_its_dp_sgd_release_at_the_jobs_budget(name):
    config = SynthesisConfig(synthesizers=[name])
    flow = get_synthesizer(name)
    settings = config.dpnf if name == "maf" else config.hflow
    for job in config.jobs():
        budget = job["budget"]
        entry = flow.planned_entry(config, job, 60, "dp")
        expected = budget_kind(budget["kind"]).plan(60, settings.sample_rate, settings.steps, budget["value"],
                                                    delta=config.privacy.delta, max_grad_norm=settings.max_grad_norm)
        if expected is None:
            assert entry.mechanism == "non_private" and flow.plan(config, job, 60) is None
        else:
            assert entry == expected.ledger_entry("dp", flow.what) and entry.mechanism == "dp_sgd"


@pytest.mark.parametrize("name", ["aim", "mst"])
def test_a_marginal_baseline_is_an_epsilon_delta_release(name):
    config = SynthesisConfig(synthesizers=[name], epsilons=[2.0])
    jobs = config.jobs()  # the baselines take the epsilon budgets only
    assert {(j["budget"]["kind"], j["budget"]["value"]) for j in jobs} == {("epsilon", 2.0)}
    job = jobs[0]
    entry = get_synthesizer(name).planned_entry(config, job, 60, "dp")
    assert (entry.mechanism, entry.epsilon, entry.delta) == ("dp", 2.0, config.privacy.delta)
    assert get_synthesizer(name).plan(config, job, 60) is None


def test_only_the_maf_scaled_by_training_statistics_needs_no_bounds():
    assert not get_synthesizer("maf").needs_bounds(SynthesisConfig(scaling="train"))
    assert get_synthesizer("maf").needs_bounds(SynthesisConfig(scaling="bounds"))
    assert all(get_synthesizer(s).needs_bounds(SynthesisConfig(scaling="train")) for s in ("hflow", "aim", "mst"))
