"""The training-method registry: names agree with the config, the grid is what each method declares, every
registered method passes the same contract (plan, fit, evaluate; pure), and adding one is one module."""

import os

import numpy as np
import pytest
import torch

from privehr.core.config import PrivacyConfig, TrainingConfig, load_config
from privehr.core.config.base import BUILTIN_METHODS
from privehr.core.errors import InputError
from privehr.models.methods import (TRAINING_METHODS, CellData, Evaluation, FitSpec, Release, TrainingMethod,
                                    create_method, get_method, grid, register_method, seeds_of)
from privehr.models.privacy.ledger import GUARANTEES, LedgerEntry
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import ReleasePlan


def test_every_built_in_method_is_registered():
    assert set(BUILTIN_METHODS) <= set(TRAINING_METHODS)
    assert all(issubclass(m, TrainingMethod) and m.name == name for name, m in TRAINING_METHODS.items())


def test_a_repeated_or_unnamed_method_is_refused_and_an_unknown_name_is_one_line(monkeypatch):
    class Unknown(TrainingMethod):
        name = "gradient_free"

    monkeypatch.setattr(TRAINING_METHODS, "_items", dict(TRAINING_METHODS._items))
    with pytest.raises(ValueError, match="registered twice"):
        register_method(get_method("dp_sgd"))
    with pytest.raises(ValueError, match="does not set display_name"):  # the report would have no name for it
        register_method(Unknown)
    with pytest.raises(InputError, match="unknown training method 'gradient_free'; choose one of"):
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


def test_fit_groups_batch_a_cell_family_and_hold_every_fit_once():
    from privehr.models.methods import fit_groups

    training = TrainingConfig(seeds=3, dp_sgd={"epsilons": [1.0, 4.0, 8.0]}, group_size=4)
    cells = grid(training, ["mort_icu", "los_3"])
    every = sorted((i, s) for i, c in enumerate(cells) for s in range(seeds_of(c, training)))
    for batched in (False, True):
        groups = fit_groups(cells, training, batched)
        assert sorted(f for g in groups for f in g) == every  # each fit in exactly one group
        for group in groups:
            family = {(cells[i].label, cells[i].model, cells[i].method, cells[i].loss) for i, _ in group}
            assert len(family) == 1 and len(group) <= 4
            assert len(group) == 1 or batched
    # 2 labels x 2 models: 3 epsilons x 3 seeds = 9 DP-SGD fits per family, in chunks of 4, 4 and 1
    dp_sgd = [len(g) for g in fit_groups(cells, training, True) if cells[g[0][0]].method == "dp_sgd"]
    assert sorted(dp_sgd) == [1] * 4 + [4] * 8
    whole = fit_groups(cells, training.model_copy(update={"group_size": 0}), True)
    assert sorted(len(g) for g in whole if cells[g[0][0]].method == "dp_sgd") == [9, 9, 9, 9]


def test_auto_batches_on_cpu_in_groups_of_at_most_twelve_and_only_by_ghost_clipping():
    """DP-SGD families in groups of at most 12 on CPU under auto (whole on CUDA), never by Opacus's hooks on CPU under
    auto; ExpM+NF's families where the utility reads every record (logistic regression), not GRU-D's minibatched
    ones; the DP-trained ExpM flows of logistic regression (closed-form record gradients), not GRU-D's."""
    import torch

    from privehr.models.methods import fit_groups
    from privehr.tasks.train import CPU_GROUP_SIZE, batching, group_size

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    training = TrainingConfig(seeds=5, dp_sgd={"epsilons": [0.5, 1.0, 4.0, 8.0]},  # families of 20 DP-SGD fits
                              expm_nf={"models": ["logistic_regression", "grud"], "seeds": 2})

    def groups_of(t, device, method="dp_sgd", model=None):
        cells = grid(t, ["mort_icu"])
        groups = fit_groups(cells, t, batching(t, device), group_size(t, device), device.type)
        return sorted(len(g) for g in groups if cells[g[0][0]].method == method
                      and model in (None, cells[g[0][0]].model))

    def dp_sgd_groups(t, device):
        return groups_of(t, device)

    assert CPU_GROUP_SIZE == 12
    assert dp_sgd_groups(training, cpu) == [8, 8, 12, 12]  # each family of 20 in chunks of 12 and 8
    assert dp_sgd_groups(training, cuda) == [20, 20]  # a whole family per group on CUDA
    assert dp_sgd_groups(training.model_copy(update={"batched": "on"}), cpu) == [20, 20]
    assert dp_sgd_groups(training.model_copy(update={"group_size": 5}), cpu) == [5] * 8  # the setting wins
    assert dp_sgd_groups(training.model_copy(update={"batched": "off"}), cuda) == [1] * 40
    opacus = training.model_copy(update={"dp_sgd": training.dp_sgd.model_copy(update={"clipping": "opacus"})})
    assert dp_sgd_groups(opacus, cpu) == [1] * 40  # Opacus's hooks train one fit at a time on CPU under auto
    assert dp_sgd_groups(opacus, cuda) == [20, 20]
    assert dp_sgd_groups(opacus.model_copy(update={"batched": "on"}), cpu) == [20, 20]
    eps = len(training.expm_nf.epsilons)
    assert training.expm_nf.batch_size is None and training.expm_nf.grud_batch_size is not None
    assert groups_of(training, cpu, "expm_nf", "logistic_regression") == [2 * eps]  # one shared pass a step
    assert groups_of(training, cpu, "expm_nf", "grud") == [1] * (2 * eps)  # minibatched flows: one at a time
    both = training.model_copy(update={"dp_expm_nf": training.dp_expm_nf.model_copy(
        update={"models": ["logistic_regression", "grud"]})})
    assert len(both.dp_expm_nf.epsilons) == 4
    assert groups_of(both, cpu, "dp_expm_nf", "logistic_regression") == [8, 12]  # closed-form flows: together
    assert groups_of(both, cpu, "dp_expm_nf", "grud") == [1] * 20  # torch.func: one flow at a time
    # non-private: a cell's seeds stacked; on CPU under auto only GRU-D's (stacked logistic regressions lost there)
    assert groups_of(training, cpu, "non_private", "grud") == [5]
    assert groups_of(training, cpu, "non_private", "logistic_regression") == [1] * 5
    assert groups_of(training, cuda, "non_private", "logistic_regression") == [5]
    normed = training.model_copy(update={"grud": training.grud.model_copy(update={"batch_norm": True})})
    assert groups_of(normed, cuda, "non_private", "grud") == [1] * 5  # batch norm would mix the members' rows


@pytest.mark.parametrize("profile", ["demo", "full"])
def test_the_profiles_grids(profile):
    config = load_config(profile=profile)
    t = config.training
    gradient = len(t.models) * len(t.losses) * (("non_private" in t.methods) + len(t.dp_sgd.epsilons))
    expm = len(t.expm_nf.models) * len(t.expm_nf.epsilons) * ("expm_nf" in t.methods)
    dp_expm = len(t.dp_expm_nf.models) * len(t.dp_expm_nf.epsilons) * ("dp_expm_nf" in t.methods)
    cells = grid(t, config.labels)
    assert len(cells) == len(config.labels) * (gradient + expm + dp_expm)
    assert sum(seeds_of(c, t) for c in cells) == len(config.labels) * ((gradient + dp_expm) * t.seeds
                                                                       + expm * (t.expm_nf.seeds or t.seeds))
    assert t.dp_expm_nf.epsilons == t.dp_sgd.epsilons  # the figure compares them at the same epsilon


@pytest.mark.parametrize("reproducible,budget,tuning,what,expected", [
    (False, 1, "dp", "final fit", "dp"), (False, 1, "exact", "final fit", "dp"),
    (False, 4, "exact", "final fit", "tuned"), (False, 4, "dp", "final fit", "dp"),
    (False, 4, "exact", "search trial 2", "dp"), (False, 4, "dp", "search trial 2", "dp"),
    (True, 1, "dp", "final fit", "reproducible"), (True, 4, "dp", "final fit", "reproducible")])
def test_dp_sgd_guarantees(reproducible, budget, tuning, what, expected):
    privacy = PrivacyConfig(reproducible_noise=reproducible)
    training = TrainingConfig(search_budget=budget, tuning=tuning)
    assert create_method("dp_sgd", training, privacy).guarantee(what) == expected
    assert create_method("dp_sgd", training, privacy).reserves_search_trials() == (budget > 1)
    assert create_method("dp_sgd", training, privacy).scores_search_privately() == (budget > 1 and tuning == "dp")
    assert not create_method("non_private", training, privacy).scores_search_privately()
    assert create_method("non_private", training, privacy).guarantee(what) == "non_private"
    assert create_method("expm_nf", training, privacy).guarantee(what) == "unproven"


def test_planned_entries_are_the_plans_ledger_entries():
    training, privacy = TrainingConfig(), PrivacyConfig()
    cells = {c.method: c for c in grid(training, ["mort_icu"]) if c.model == "logistic_regression"}
    dp = create_method("dp_sgd", training, privacy)
    spec = FitSpec(cells["dp_sgd"], dp.default_hyperparameters(cells["dp_sgd"]))
    plan = dp.plan(spec, 500)
    hp = spec.hyperparameters  # the plan of ReleasePlan.for_epochs at the cell's target (one calibration, not two)
    assert (plan.n, plan.expected_batch, plan.steps, plan.target_epsilon, plan.delta, plan.max_grad_norm) == (
        500, hp["batch_size"], hp["epochs"] * -(-500 // hp["batch_size"]), cells["dp_sgd"].target_epsilon,
        privacy.delta, hp["max_grad_norm"])
    entry = dp.entry(spec, plan)
    assert entry == plan.ledger_entry("dp", "final fit") and entry.epsilon <= cells["dp_sgd"].target_epsilon
    expm = create_method("expm_nf", training, privacy)
    e = expm.entry(FitSpec(cells["expm_nf"], {}), expm.plan(FitSpec(cells["expm_nf"], {}), 500))
    assert (e.mechanism, e.epsilon, GUARANTEES[e.guarantee or "unproven"]) == (
        "expm_nf", cells["expm_nf"].target_epsilon, GUARANTEES["unproven"])
    plain = create_method("non_private", training, privacy)
    assert plain.plan(FitSpec(cells["non_private"], {}), 500) is None
    assert plain.entry(FitSpec(cells["non_private"], {}), None).mechanism == "non_private"


def test_a_search_over_the_clipping_norm_keeps_the_reserved_sigma_q_and_t():
    plan = ReleasePlan.for_epochs(500, 100, 2, target_epsilon=1.0, delta=1e-5, max_grad_norm=1.0)
    clipped = plan.clipped_at(0.3)
    assert clipped.max_grad_norm == 0.3 and clipped.spend is plan.spend
    assert (clipped.noise_multiplier, clipped.sample_rate, clipped.steps) == (plan.noise_multiplier,
                                                                             plan.sample_rate, plan.steps)


def test_defaults_and_search_spaces_come_from_the_config_and_the_method():
    training = TrainingConfig(dp_sgd={"epochs": 7}, non_private={"max_epochs": 11}, grud={"hidden_size": 12})
    cells = {(c.model, c.method): c for c in grid(training, ["mort_icu"])}
    assert create_method("dp_sgd", training).default_hyperparameters(cells[("grud", "dp_sgd")])["epochs"] == 7
    assert create_method("non_private", training).default_hyperparameters(
        cells[("logistic_regression", "non_private")])["epochs"] == 11
    for (model, method), cell in cells.items():
        hp = create_method(method, training).default_hyperparameters(cell)
        assert (hp.get("hidden_size") == 12) == (model == "grud")
        space = create_method(method, training).search_space(cell)
        assert set(space) <= set(hp) | {"l1"}
        if method == "dp_sgd":  # a DP-SGD search never touches what sets the privacy plan
            assert not {"batch_size", "epochs"} & set(space)


# --- the contract every registered method keeps (scikit-learn's check_estimator, in small) -------------------------

def _data(n: int = 96, n_vars: int = 2, n_hours: int = 3, seed: int = 0, dev: bool = False) -> CellData:
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(n, n_hours, n_vars)).astype(np.float32)
    y = torch.tensor((values[:, :, 0].mean(1) + 0.3 * rng.normal(size=n) > 0).astype(np.float32))
    from privehr.models.classifiers import classifier_inputs
    inputs = classifier_inputs("logistic_regression", values, np.ones_like(values), np.zeros_like(values))
    return CellData(inputs, y, n_vars, n_hours, (inputs, y) if dev else None)


SMALL = TrainingConfig(non_private={"max_epochs": 2, "batch_size": 32}, dp_sgd={"epochs": 1, "batch_size": 32},
                       expm_nf={"steps": 3, "samples": 4, "eval_samples": 6, "layers": 1})


@pytest.mark.parametrize("name", sorted(TRAINING_METHODS))
def test_every_method_plans_fits_and_evaluates_purely(name, tmp_path, monkeypatch, one_thread):
    """The same checks for every registered method: its plan's entry is the release's entry, fit returns a Release
    whose state can be saved, evaluate scores held-out records, and neither writes a file."""
    monkeypatch.chdir(tmp_path)
    method = create_method(name, SMALL, PrivacyConfig())
    cell = next(c for c in grid(SMALL, ["mort_icu"]) if c.method == name and c.model == "logistic_regression")
    spec = FitSpec(cell, method.default_hyperparameters(cell), seed=1)
    data = _data()
    plan = method.plan(spec, len(data))
    assert plan is None or plan.n == len(data)
    release = method.fit(spec, data, plan, NoiseSource.reproducible("contract", name))
    assert isinstance(release, Release) and isinstance(release.entry, LedgerEntry)
    assert release.entry == method.entry(spec, plan)  # what is recorded is what was reserved
    torch.save(release.state_, tmp_path / "state.pt")  # the state is plain tensors and numbers
    held_out = _data(seed=2)
    evaluation = method.evaluate(release, held_out.inputs, held_out.y)
    assert isinstance(evaluation, Evaluation) and 0 <= evaluation.metrics["auroc"] <= 1
    assert evaluation.probabilities.shape == (len(held_out),)
    # what the membership audit attacks: the released prediction, as logits (ExpM+NF's first draw, its single
    # release; the DP-trained flow's mean model; the trained classifier)
    logits = method.logits(release, held_out.inputs)
    assert logits.shape == (len(held_out),)
    np.testing.assert_allclose(1 / (1 + np.exp(-logits)), evaluation.probabilities, rtol=1e-5, atol=1e-6)
    assert sorted(os.listdir(tmp_path)) == ["state.pt"]  # pure: the method wrote nothing


# --- adding a method: one module and its test (tests/flows/test_add_a_method.py runs the documented recipe) ---


def test_every_call_of_a_method_or_synthesizer_takes_at_most_five_arguments():
    """Settings live in ``__init__``; a release's calls take the release (spec or job), its data, plan and noise."""
    import inspect

    from privehr.models.synthesis import SYNTHESIZERS

    for registry in (TRAINING_METHODS, SYNTHESIZERS):
        for name, cls in registry.items():
            for attribute, member in inspect.getmembers(cls, inspect.isfunction):
                if attribute.startswith("__") and attribute != "__init__":
                    continue
                parameters = [p for p in inspect.signature(member).parameters if p != "self"]
                assert len(parameters) <= 5, f"{name}.{attribute} takes {len(parameters)} arguments"


def test_a_subclass_must_name_itself_not_inherit_its_parents_name(monkeypatch):
    """A new method that subclasses DP-SGD and forgets its display name would show as "DP-SGD" in every table."""
    from privehr.models.methods.dp_sgd import DPSGD

    class Variant(DPSGD):
        name = "dp_sgd_variant"

    monkeypatch.setattr(TRAINING_METHODS, "_items", dict(TRAINING_METHODS._items))
    with pytest.raises(ValueError, match="does not set display_name"):
        register_method(Variant)


def test_the_baseline_and_the_epsilon_column_come_from_the_method_classes():
    """The report's baseline (the curve checks) and its epsilon column ask the method's class, so a new method is one
    module: no table in tasks/ names it. A results file of a method no longer registered still reads."""
    from privehr.models.methods import TRAINING_METHODS, epsilon_label, is_baseline

    assert [name for name in TRAINING_METHODS if is_baseline(name)] == ["non_private"]
    assert epsilon_label("non_private", None, None) == "-"
    assert epsilon_label("expm_nf", 3.5, None) == "eps~ 3.5"  # a training parameter, never accounted
    assert epsilon_label("dp_sgd", 1.0, 0.91) == 0.91 and epsilon_label("dp_expm_nf", 1.0, 0.9) == 0.9
    assert epsilon_label("retired_method", 1.0, 0.5) == 0.5 and not is_baseline("retired_method")


@pytest.mark.parametrize("name", sorted(BUILTIN_METHODS))
def test_every_dp_method_s_target_epsilons_are_held_to_the_ceiling(name):
    """The pipeline's ceiling check asks each method's settings whether their epsilons are accounted targets
    (TrainingConfig.targets), naming no method: attacked by a target above the ceiling for each method in turn. A
    method whose release is DP (its ledger guarantee) must be refused there; one without a guarantee (eps~, none)
    is not held to it."""
    from pydantic import ValidationError

    from privehr.core.config import PipelineConfig

    training = TrainingConfig(methods=[name])
    settings = getattr(training, name)  # every method's settings are the field named as it
    method = create_method(name, training)
    dp = method.guarantee() == "dp"
    assert (f"training.{name}.epsilons" in training.targets()) == dp
    if not hasattr(settings, "epsilons"):
        assert not dp
        return
    above = {"methods": [name], name: {"epsilons": [50.0]}}
    if dp:
        with pytest.raises(ValidationError, match=f"training.{name}.epsilons asks for epsilon 50"):
            PipelineConfig(training=above)
        allowed = PipelineConfig(training=above, privacy={"allow_above_ceiling": True})
        assert allowed.training.targets() == {f"training.{name}.epsilons": [50.0]}
    else:
        assert PipelineConfig(training=above).training.targets() == {}


def test_a_dp_search_s_score_epsilon_is_held_to_the_ceiling():
    """With tuning: dp each search trial's dev scores are a Gaussian release at search_score_epsilon: a target like
    the cells' (an exact search releases no scores, so it has none)."""
    from pydantic import ValidationError

    from privehr.core.config import PipelineConfig

    with pytest.raises(ValidationError, match="training.search_score_epsilon asks for epsilon 50"):
        PipelineConfig(training={"search_budget": 4, "search_score_epsilon": 50.0})
    assert "training.search_score_epsilon" not in PipelineConfig(
        training={"search_budget": 4, "search_score_epsilon": 50.0, "tuning": "exact"}).training.targets()
    assert "training.search_score_epsilon" not in TrainingConfig(search_score_epsilon=50.0).targets()  # no search


def _tensors(value, prefix="") -> dict:
    """Every tensor and array of a release's state, by path."""
    if isinstance(value, torch.Tensor):
        return {prefix: value.detach().double()}
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return {prefix: torch.as_tensor(value).double()}
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _tensors(item, f"{prefix}/{key}").items()}
    if isinstance(value, (list, tuple)):
        return {k: v for i, item in enumerate(value) for k, v in _tensors(item, f"{prefix}/{i}").items()}
    return {}


@pytest.mark.parametrize("name", sorted(TRAINING_METHODS))
def test_fit_many_is_fit_one_by_one_under_reproducible_noise(name, one_thread):
    """The batching contract, for every registered method (issue 58): training a family's releases together is how
    they are computed, never what each is: with the same reproducible noise, each release of ``fit_many`` is the
    release ``fit`` makes alone (a method that does not batch passes trivially)."""
    method = create_method(name, SMALL, PrivacyConfig())
    family = [c for c in grid(SMALL, ["mort_icu"]) if c.method == name and c.model == "logistic_regression"][:2]
    specs = [FitSpec(cell, method.default_hyperparameters(cell), seed=seed) for cell in family for seed in (0, 1)]
    data = _data()
    plans = [method.plan(spec, len(data.y)) for spec in specs]
    noise = (lambda k: NoiseSource.reproducible("contract", name, k))  # noqa: E731
    together = method.fit_many(specs, data, plans, [noise(k) for k in range(len(specs))])
    for k, (spec, plan) in enumerate(zip(specs, plans)):
        torch.manual_seed(spec.seed)  # a method's public initialisation draws from its seed, as fit_many's does
        alone = _tensors(method.fit(spec, data, plan, noise(k)).state_)
        mine = _tensors(together[k].state_)
        assert alone.keys() == mine.keys() and alone, (name, k)
        for path, value in alone.items():
            assert torch.allclose(mine[path], value, rtol=1e-4, atol=1e-5), (name, k, path)
