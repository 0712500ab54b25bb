"""The synthesizer registry: names agree with the config, each synthesizer plans the ledger entry its release
records (a flow's DP-SGD plan at the job's budget; a marginal baseline's (epsilon, delta)), and every registered
synthesizer passes the same contract (plan, fit by that plan, tables; pure)."""

import os

import numpy as np
import pandas as pd
import pytest

from privehr.core.config import SynthesisConfig
from privehr.core.config.synthesis import BUILTIN_SYNTHESIZERS
from privehr.core.specs import load_ehr_spec
from privehr.models.privacy.budget_kinds import budget_kind
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.synthesis import (SYNTHESIZERS, SynthesisData, Synthesized, create_synthesizer, get_synthesizer,
                                      register_synthesizer, synthesis_jobs, synthesizer_rank)


def test_every_declared_synthesizer_is_registered_and_the_baselines_are_the_marginal_ones():
    assert set(BUILTIN_SYNTHESIZERS) <= set(SYNTHESIZERS)
    # the baselines (private-pgm) are the synthesizers that take epsilon budgets alone: no mu-GDP calibration
    assert {name for name, s in SYNTHESIZERS.items() if s.needs_baselines} == \
        {name for name, s in SYNTHESIZERS.items() if s.budget_kinds == {"epsilon"}} == {"aim", "mst", "aim_dyadic"}
    with pytest.raises(ValueError, match="unknown synthesizer"):
        get_synthesizer("ctgan")


def test_the_budgets_a_synthesizer_takes_and_where_reports_list_it_live_on_its_class(monkeypatch):
    """Which budget kinds make a release of a synthesizer, and its place in the report, are its class's: no table in
    the config or the report names synthesizers, so adding one stays one module."""
    config = SynthesisConfig(synthesizers=list(SYNTHESIZERS), mus=[2.0], epsilons=[1.0], non_private=True)
    made = {(job["synthesizer"], job["budget"]["kind"]) for job in synthesis_jobs(config)}
    assert made == {(flow, kind) for flow in ("maf", "hflow") for kind in ("mu", "epsilon", "non_private")} | \
        {(marginal, "epsilon") for marginal in ("aim", "mst", "aim_dyadic")}
    ids = {job["job_id"] for job in synthesis_jobs(config)}
    assert {"imp0-epsilon1-run0", "aim-imp0-epsilon1-run0", "aim_dyadic-imp0-mu2-run0"} - ids == \
        {"aim_dyadic-imp0-mu2-run0"}  # the MAF's ids carry no prefix; aim_dyadic makes no mu release
    monkeypatch.setattr(get_synthesizer("mst"), "budget_kinds", frozenset({"epsilon", "mu"}))  # a class that learns mu
    assert ("mst", "mu") in {(job["synthesizer"], job["budget"]["kind"]) for job in synthesis_jobs(config)}
    assert sorted(SYNTHESIZERS, key=synthesizer_rank) == ["maf", "hflow", "aim", "aim_dyadic", "mst"]
    assert synthesizer_rank("retired_synthesizer") == 0  # a results file of one no longer registered still sorts

    class Unranked(get_synthesizer("mst")):
        name, display_name = "mst", "MST again"

    monkeypatch.delitem(SYNTHESIZERS._items, "mst")  # as if this module were MST's
    with pytest.raises(ValueError, match="does not set report_rank"):  # a parent's place is not its own
        register_synthesizer(Unranked)


@pytest.mark.parametrize("name", ["maf", "hflow"])
def test_a_flow_plans_its_dp_sgd_release_at_the_jobs_budget(name):
    config = SynthesisConfig(synthesizers=[name], dpnf={"steps": 40}, hflow={"steps": 40})  # cheap calibrations
    flow = create_synthesizer(name, config)
    settings = config.dpnf if name == "maf" else config.hflow
    # one job per budget: plans cost seconds
    jobs = {(j["budget"]["kind"], j["budget"]["value"]): j for j in synthesis_jobs(config)}
    for job in jobs.values():
        budget = job["budget"]
        plan = flow.plan(job, 60)
        entry = flow.entry(job, plan, "dp")
        expected = budget_kind(budget["kind"]).plan(60, settings.sample_rate, settings.steps, budget["value"],
                                                    delta=config.privacy.delta, max_grad_norm=settings.max_grad_norm)
        if expected is None:
            assert entry.mechanism == "non_private" and plan is None
        else:
            assert plan == expected and entry == expected.ledger_entry("dp", flow.what) and entry.mechanism == "dp_sgd"


@pytest.mark.parametrize("name", ["aim", "mst"])
def test_a_marginal_baseline_is_an_epsilon_delta_release(name):
    config = SynthesisConfig(synthesizers=[name], epsilons=[2.0])
    jobs = synthesis_jobs(config)  # the baselines take the epsilon budgets only
    assert {(j["budget"]["kind"], j["budget"]["value"]) for j in jobs} == {("epsilon", 2.0)}
    job = jobs[0]
    synthesizer = create_synthesizer(name, config)
    assert synthesizer.plan(job, 60) is None
    entry = synthesizer.entry(job, None, "dp")
    assert (entry.mechanism, entry.epsilon, entry.delta) == ("dp", 2.0, config.privacy.delta)


def test_only_the_maf_scaled_by_training_statistics_needs_no_bounds():
    assert not create_synthesizer("maf", SynthesisConfig(scaling="train")).needs_bounds()
    assert create_synthesizer("maf", SynthesisConfig(scaling="bounds")).needs_bounds()
    assert all(create_synthesizer(s, SynthesisConfig(scaling="train")).needs_bounds() for s in ("hflow", "aim", "mst"))


@pytest.mark.parametrize("name", sorted(SYNTHESIZERS))
def test_every_synthesizer_fits_by_its_plan_and_writes_nothing(name, tmp_path, monkeypatch, one_thread):
    """The same checks for every registered synthesizer, on a small table of the bundled Harrod spec."""
    monkeypatch.chdir(tmp_path)
    spec = load_ehr_spec("harrod_ehr")
    attributes = list(spec.bounds())[:3]
    rng = np.random.default_rng(0)
    table = pd.DataFrame({a: rng.uniform(*spec.bounds()[a].code_range(), size=80) for a in attributes})
    for a in attributes:
        if spec.bounds()[a].kind != "numeric":
            table[a] = table[a].round()
    config = SynthesisConfig(synthesizers=[name], epsilons=[4.0], mus=[], releases=2,
                             dpnf={"steps": 3}, hflow={"steps": 3}, marginal={"bins": 4})
    synthesizer = create_synthesizer(name, config)
    job = next(j for j in synthesis_jobs(config) if j["synthesizer"] == name and j["budget"]["kind"] == "epsilon")
    plan = synthesizer.plan(job, 60)
    noise = NoiseSource.reproducible("contract", name)
    done = synthesizer.fit(job, SynthesisData(table[:60], table[60:], attributes, spec, 25, 3), plan, noise)
    assert isinstance(done, Synthesized) and done.entry == synthesizer.entry(job, plan, done.guarantee)
    assert len(done.tables) == 2 and all(len(t) == 25 and list(t.columns) == attributes for t in done.tables)
    assert os.listdir(tmp_path) == []  # pure: the task saves the state and the tables


def test_a_grid_where_no_synthesizer_takes_a_budget_is_refused_naming_those_that_would():
    """Before anything is read or spent: which kinds the chosen synthesizers take and which synthesizers take the
    others both come from the classes."""
    from privehr.core.errors import InputError
    from privehr.tasks.synthesis import check_synthesis_inputs

    with pytest.raises(InputError, match=r"aim, mst take epsilon budgets only and none is set; add --epsilon, or "
                                         r"choose synthesizers that take the others \(maf, hflow\)$"):
        check_synthesis_inputs(SynthesisConfig(synthesizers=["aim", "mst"], epsilons=[], mus=[2.0], spec="harrod_ehr"))
    with pytest.raises(InputError, match=r"maf take epsilon or mu or non_private budgets only and none is set; add "
                                         r"--epsilon or add --mu or leave out --no-non-private$"):  # no other to name
        check_synthesis_inputs(SynthesisConfig(synthesizers=["maf"], epsilons=[], mus=[], non_private=False,
                                               spec="harrod_ehr"))
