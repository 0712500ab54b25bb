"""The training-method registry: names agree with the config, the grid is what each method declares, and the
planned ledger entry of every release is the one its training records."""

from typing import get_args

import pytest

from privehr.core.config import Method, PrivacyConfig, TrainingConfig, load_config
from privehr.models.privacy_ledger import GUARANTEES
from privehr.tasks.methods import TRAINING_METHODS, TrainingMethod, get_method, grid, register_method, seeds_of
from privehr.tasks.methods.dp_sgd import dp_sgd_plan


def test_every_declared_method_is_registered_and_no_other():
    assert set(TRAINING_METHODS) == set(get_args(Method))
    assert all(isinstance(m, TrainingMethod) and m.name == name for name, m in TRAINING_METHODS.items())


def test_an_undeclared_or_repeated_method_is_refused():
    class Unknown(TrainingMethod):
        name = "gradient_free"

    with pytest.raises(ValueError, match="not declared"):
        register_method(Unknown)
    with pytest.raises(ValueError, match="registered twice"):
        register_method(type(get_method("dp_sgd")))
    with pytest.raises(ValueError, match="unknown training method"):
        get_method("gradient_free")


def test_the_grid_is_what_each_method_declares():
    training = TrainingConfig(losses=["bce", "l2"], seeds=3,
                              expm_nf={"models": ["grud"], "epsilons": [0.5, 2.0], "seeds": 5},
                              dp_sgd={"epsilons": [1.0, 4.0, 8.0]})
    cells = grid(training, ["mort_icu", "los_3"])
    by_method = {m: [c for c in cells if c.method == m] for m in TRAINING_METHODS}
    # non-private: every model x loss, no epsilon; DP-SGD: x its epsilons; ExpM+NF: its models, l2 only, eps~
    assert len(by_method["non_private"]) == 2 * 2 * 2 and {c.target_epsilon for c in by_method["non_private"]} == {None}
    assert len(by_method["dp_sgd"]) == 2 * 2 * 2 * 3
    assert {(c.model, c.loss) for c in by_method["expm_nf"]} == {("grud", "l2")}
    assert sorted({c.target_epsilon for c in by_method["expm_nf"]}) == [0.5, 2.0]
    assert {seeds_of(c, training) for c in by_method["expm_nf"]} == {5}
    assert {seeds_of(c, training) for c in by_method["dp_sgd"]} == {3}
    assert len({c.cell_id for c in cells}) == len(cells)


@pytest.mark.parametrize("profile", ["demo", "full"])
def test_the_profiles_grids(profile):
    config = load_config(profile=profile)
    t = config.training
    gradient = len(t.models) * len(t.losses) * (("non_private" in t.methods) + len(t.dp_sgd.epsilons))
    expm = len(t.expm_nf.models) * len(t.expm_nf.epsilons) * ("expm_nf" in t.methods)
    cells = grid(t, config.labels)
    assert len(cells) == len(config.labels) * (gradient + expm)
    assert sum(seeds_of(c, t) for c in cells) == len(config.labels) * (gradient * t.seeds
                                                                       + expm * (t.expm_nf.seeds or t.seeds))


@pytest.mark.parametrize("reproducible,budget,what,expected", [
    (False, 1, "final fit", "dp"), (False, 4, "final fit", "tuned"), (False, 4, "search trial 2", "dp"),
    (True, 1, "final fit", "reproducible")])
def test_dp_sgd_guarantees(reproducible, budget, what, expected):
    privacy, training = PrivacyConfig(reproducible_noise=reproducible), TrainingConfig(search_budget=budget)
    assert get_method("dp_sgd").guarantee(privacy, training, what) == expected
    assert get_method("dp_sgd").reserves_search_trials(training) == (budget > 1)
    assert get_method("non_private").guarantee(privacy, training, what) == "non_private"
    assert get_method("expm_nf").guarantee(privacy, training, what) == "unproven"


def test_planned_entries_are_the_releases_the_methods_record():
    training, privacy = TrainingConfig(), PrivacyConfig()
    cells = {c.method: c for c in grid(training, ["mort_icu"]) if c.model == "logistic_regression"}
    dp = get_method("dp_sgd")
    hp = dp.default_hyperparameters(cells["dp_sgd"], training)
    entry = dp.planned_entry(cells["dp_sgd"], 500, hp, privacy, training, "final fit")
    plan = dp_sgd_plan(500, hp, cells["dp_sgd"], privacy)
    assert entry == plan.ledger_entry("dp", "final fit") and entry.epsilon <= cells["dp_sgd"].target_epsilon
    expm = get_method("expm_nf").planned_entry(cells["expm_nf"], 500, {}, privacy, training, "final fit")
    assert (expm.mechanism, expm.epsilon, GUARANTEES[expm.guarantee or "unproven"]) == (
        "expm_nf", cells["expm_nf"].target_epsilon, GUARANTEES["unproven"])
    assert get_method("non_private").planned_entry(cells["non_private"], 500, {}, privacy, training,
                                                   "final fit").mechanism == "non_private"


def test_defaults_and_search_spaces_come_from_the_config_and_the_classifier():
    training = TrainingConfig(dp_sgd={"epochs": 7}, non_private={"max_epochs": 11}, grud={"hidden_size": 12})
    cells = {(c.model, c.method): c for c in grid(training, ["mort_icu"])}
    assert get_method("dp_sgd").default_hyperparameters(cells[("grud", "dp_sgd")], training)["epochs"] == 7
    assert get_method("non_private").default_hyperparameters(cells[("logistic_regression", "non_private")],
                                                             training)["epochs"] == 11
    for (model, method), cell in cells.items():
        hp = get_method(method).default_hyperparameters(cell, training)
        assert (hp.get("hidden_size") == 12) == (model == "grud")
        space = get_method(method).search_space(cell)
        if method == "dp_sgd":  # a DP-SGD search never touches what sets the privacy plan
            assert not {"batch_size", "epochs"} & set(space)
