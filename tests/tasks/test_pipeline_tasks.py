"""The pipeline's tasks called directly (``task.fn``): leakage checks and the training grid on real files."""

import json

import numpy as np
import pytest

from privehr.models.data.hourly_features import HourlyFeaturizer
from privehr.core.config import Cell, PipelineConfig, SplitConfig, TrainingConfig
from privehr.tasks.cohort import build_cohort, load_cohort
from privehr.tasks.features import build_features, load_split
from privehr.tasks.ingest import ingest_extract
from privehr.tasks.run_directory import create_run_directory
from privehr.tasks.split import split_cohort
from privehr.tasks.record_counts import release_record_counts
from privehr.tasks.train import fit_and_evaluate, search_hyperparameters
from privehr.models.methods import grid


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, small_extract):
    tmp = tmp_path_factory.mktemp("run")
    run_dir = create_run_directory.fn(PipelineConfig(artifacts_dir=tmp, run_id="r1"))
    ingest_extract.fn(str(small_extract), run_dir)
    cohort = build_cohort.fn(str(small_extract), run_dir)
    manifest = split_cohort.fn(cohort, SplitConfig(), run_dir)  # the fixture's seed: deaths in every split
    # the plans below are built from the exact counts, declared public (the flow releases DP counts by default)
    release_record_counts.fn(run_dir, PipelineConfig(release={"record_count": "public"}), None)
    return run_dir, cohort, manifest, build_features.fn(cohort, manifest, run_dir)


def test_split_keeps_patients_whole_and_features_use_training_statistics(prepared):
    run_dir, cohort, manifest_path, features_dir = prepared
    manifest = json.loads(open(manifest_path).read())
    subjects = {s: set(manifest["subjects"][s]) for s in ("train", "dev", "test")}
    assert not (subjects["train"] & subjects["dev"] or subjects["train"] & subjects["test"]
                or subjects["dev"] & subjects["test"])
    data = load_cohort(cohort)
    assert sum(len(v) for v in manifest["icustay_ids"].values()) == len(data["icustay_id"])

    fitted = json.loads(open(f"{run_dir}/featurizer.json").read())
    train = np.isin(data["icustay_id"], manifest["icustay_ids"]["train"])
    reference = HourlyFeaturizer().fit(data["mean"][train], data["count"][train])
    np.testing.assert_allclose(fitted["mean"], reference.mean_)
    np.testing.assert_allclose(fitted["std"], reference.std_)
    for split in ("dev", "test"):  # dev and test standardised with the training statistics
        part = load_split(features_dir, split)
        rows = np.isin(data["icustay_id"], part["icustay_id"])
        np.testing.assert_array_equal(part["values"], reference.transform(data["mean"][rows], data["count"][rows]).values)
    everyone = HourlyFeaturizer().fit(data["mean"], data["count"])
    assert not np.allclose(everyone.mean_, reference.mean_)  # the check above can tell them apart


@pytest.mark.parametrize("model", ["logistic_regression", "grud"])
def test_search_then_fit_for_each_method(prepared, model, tmp_path, small_extract, monkeypatch):
    import privehr.models.privacy.release_plan as release_plan
    from privehr.io.ledger import read_ledger
    from privehr.tasks.release_budget import check_privacy_budget
    from privehr.tasks.train import fit_key

    run_dir, _, _, features_dir = prepared
    config = PipelineConfig.model_validate({
        "data": {"hdf5_path": str(small_extract)}, "privacy": {"ledger_path": str(tmp_path / "ledger.jsonl")}, "training": {
        "search_budget": 2, "tuning": "exact", "non_private": {"max_epochs": 4, "patience": 2},
        "dp_sgd": {"epochs": 2, "epsilons": [1.0]}, "grud": {"hidden_size": 8}}})
    training = config.training
    cells = [Cell(label="mort_icu", model=model, method=method, loss="l2", target_epsilon=eps)
             for method, eps in (("non_private", None), ("dp_sgd", 1.0))]
    calibrations = []  # every plan is built once, at the budget check: count sigma's calibrations
    calibrate = release_plan.calibrate_noise_multiplier
    monkeypatch.setattr(release_plan, "calibrate_noise_multiplier",
                        lambda *args: calibrations.append(args) or calibrate(*args))
    reservations = check_privacy_budget.fn(run_dir, cells, config)  # before the search: its DP trials included
    assert len(reservations) == 2 * 3 + 2  # 2 cells x 3 seeds + 2 DP-SGD search trials
    # one plan for the DP-SGD cell's search trials (n = train), one for its final fits (n = train + dev)
    assert len(calibrations) == 2
    for cell in cells:
        chosen = search_hyperparameters.fn(features_dir, cell, training, config.privacy, run_dir, reservations, "cpu")
        search = json.loads(open(f"{run_dir}/search/{cell.cell_id}.json").read())
        assert len(search["trials"]) == 2 and search["chosen"] == chosen
        row = fit_and_evaluate.fn(features_dir, cell, chosen, 0, training, config.privacy, run_dir,
                                  reservations[fit_key(cell, 0)], "cpu")
        assert row["n"] == len(load_split(features_dir, "test")["icustay_id"]) and 0 <= row["auroc"] <= 1
        if cell.method == "dp_sgd":
            assert row["epsilon_prv"] <= 1.0 and row["epsilon_rdp"] <= 1.0 and row["noise_multiplier"] > 0
            assert row["epsilon_pld"] <= row["epsilon_rdp"]
            # its hyperparameters were chosen by dev AUROC among 2: a non-DP use of the dev patients
            assert row["guarantee"] == "not DP (hyperparameters chosen on private dev data)"
            assert row["noise_source"] == "os_entropy"
        else:
            assert row["epsilon_prv"] is None and row["guarantee"] == "not DP (non-private)"
    released = [e for e in read_ledger(tmp_path / "ledger.jsonl") if e.status == "released"]
    assert sorted(e.what for e in released) == ["final fit", "final fit", "search trial 0", "search trial 1"]
    assert sorted(e.guarantee for e in released) == ["dp", "dp", "non_private", "tuned"]
    assert {e.reservation for e in released} <= {r.reservation for r in reservations.values()}
    assert len(calibrations) == 2  # the search and the fits trained by the reserved plans: none built again


def test_a_batched_fit_group_makes_one_recorded_release_per_member_and_resumes_per_member(prepared, tmp_path,
                                                                                         small_extract):
    import hashlib

    from privehr.core.run_layout import RunLayout
    from privehr.io.ledger import read_ledger
    from privehr.models.methods import create_method, fit_groups
    from privehr.tasks.release_budget import check_privacy_budget
    from privehr.tasks.train import fit_group, fit_key

    run_dir, _, _, features_dir = prepared
    ledger = tmp_path / "ledger.jsonl"
    config = PipelineConfig.model_validate({
        "data": {"hdf5_path": str(small_extract)}, "privacy": {"ledger_path": str(ledger)},
        "training": {"seeds": 2, "methods": ["dp_sgd"], "models": ["grud"], "batched": "on",
                     "dp_sgd": {"epochs": 1, "epsilons": [1.0, 4.0]}, "grud": {"hidden_size": 8}}})
    training = config.training
    cells = grid(training, ["mort_icu"])
    reservations = check_privacy_budget.fn(run_dir, cells, config)
    (group,) = fit_groups(cells, training, True)  # one family: 2 epsilons x 2 seeds
    members = [cells[i] for i, _ in group]
    hps = [create_method("dp_sgd", training).default_hyperparameters(cell) for cell in members]
    seeds, reserved = [s for _, s in group], [reservations[fit_key(cells[i], s)] for i, s in group]
    rows = fit_group.fn(features_dir, members, hps, seeds, training, config.privacy, run_dir, reserved, "cpu")
    released = {e.release: e for e in read_ledger(ledger) if e.status == "released"}
    assert len(rows) == 4 and len(released) == 4 and {r["release"] for r in rows} == set(released)
    for (i, seed), row in zip(group, rows):
        assert row["batch_members"] == 4 and row["target_epsilon"] == cells[i].target_epsilon
        assert row["epsilon_prv"] <= cells[i].target_epsilon and row["noise_source"] == "os_entropy"
        model = RunLayout(run_dir).model(cells[i].cell_id, seed).read_bytes()
        assert released[row["release"]].sha256 == hashlib.sha256(model).hexdigest()  # each its own file and entry
    # a resumed group trains only what is unfinished: its finished members are returned as saved, nothing re-released
    again = fit_group.fn(features_dir, members, hps, seeds, training, config.privacy, run_dir, reserved, "cpu")
    assert again == rows and len([e for e in read_ledger(ledger) if e.status == "released"]) == 4


def test_over_budget_runs_are_refused_before_anything_is_trained(prepared, tmp_path, small_extract):
    from privehr.core.errors import InputError
    from privehr.io.ledger import ledger_totals, read_ledger
    from privehr.tasks.release_budget import check_privacy_budget

    run_dir, _, _, _ = prepared
    ledger = tmp_path / "ledger.jsonl"
    raw = {"data": {"hdf5_path": str(small_extract)}, "privacy": {"ledger_path": str(tmp_path / "scratch.jsonl")},
           "training": {"seeds": 2, "methods": ["dp_sgd"], "dp_sgd": {"epsilons": [1.0]}}, "release": {"bundle": False}}
    config = PipelineConfig.model_validate(raw)
    cells = [c for c in grid(config.training, ["mort_icu"]) if c.model == "logistic_regression"]
    check_privacy_budget.fn(run_dir, cells, config)  # on a scratch ledger: what two releases at epsilon 1 cost
    two = json.loads(open(f"{run_dir}/privacy_budget.json").read())["epsilon_dp_after_run"]
    raw["privacy"] = {"ledger_path": str(ledger), "budget_epsilon": 1.2 * two}  # room for these two, not for four
    config = PipelineConfig.model_validate(raw)
    reservations = check_privacy_budget.fn(run_dir, cells, config)
    summary = json.loads(open(f"{run_dir}/privacy_budget.json").read())
    assert len(reservations) == 2 and summary["planned_dp_releases"] == 2
    # at the budget's one order (the filter), never below the best order's
    assert two <= summary["epsilon_dp_after_run"] <= 1.2 * two and summary["binding_accountant"].startswith("renyi")
    (total,) = ledger_totals(ledger)
    assert total.pending == 2 and total.releases == 0 and total.dp  # reserved and counted, though nothing trained
    # the same plan again (a second run, or this one twice) would take the dataset above 2.5: nothing is reserved
    with pytest.raises(InputError, match=r"privacy budget exceeded .* none was trained and nothing was reserved"):
        check_privacy_budget.fn(run_dir, cells, config)
    assert len(read_ledger(ledger)) == 2
    # a non-private cell has no finite epsilon: under a budget it is refused too
    with_baseline = config.model_copy(update={"training": config.training.model_copy(update={
        "methods": ["non_private"]})})
    with pytest.raises(InputError, match="without a DP guarantee"):
        check_privacy_budget.fn(run_dir, grid(with_baseline.training, ["mort_icu"]), with_baseline)


def test_a_delta_that_could_expose_a_record_is_refused(prepared, tmp_path, small_extract):
    from privehr.core.errors import InputError
    from privehr.tasks.release_budget import check_privacy_budget

    run_dir, _, _, _ = prepared
    config = PipelineConfig.model_validate({
        "data": {"hdf5_path": str(small_extract)}, "privacy": {"ledger_path": str(tmp_path / "l.jsonl"), "delta": 0.05},
        "training": {"methods": ["dp_sgd"], "dp_sgd": {"epsilons": [1.0]}}})
    with pytest.raises(InputError, match="privacy.delta 0.05 is not below one over the number of training records"):
        check_privacy_budget.fn(run_dir, grid(config.training, ["mort_icu"]), config)


def test_a_label_with_one_class_in_a_split_stops_the_run_before_training(tmp_path):
    from privehr.core.errors import InputError
    from privehr.tasks.split import check_labels

    manifest = tmp_path / "split_manifest.json"
    rates = {"train": {"mort_icu": 0.1, "los_3": 0.4}, "dev": {"mort_icu": 0.0, "los_3": 0.5},
             "test": {"mort_icu": 0.2, "los_3": 1.0}}
    manifest.write_text(json.dumps({"label_rates": rates}))
    with pytest.raises(InputError, match="label mort_icu has a single class in the dev split.*nothing was trained"):
        check_labels.fn(str(manifest), ["mort_icu", "los_3"])
    with pytest.raises(InputError, match="label los_3 has a single class in the test split \\(every stay 1\\)"):
        check_labels.fn(str(manifest), ["los_3"])
    rates["dev"]["mort_icu"] = 0.05
    manifest.write_text(json.dumps({"label_rates": rates}))
    check_labels.fn(str(manifest), ["mort_icu"])  # both classes everywhere: the run goes on


def test_a_cohort_emptied_by_a_rule_names_the_rule_and_its_count(tmp_path):
    from privehr.simulate.severity_simulator import simulate_extract
    from privehr.core.errors import InputError
    from privehr.resources import mimic_extract_variables
    from privehr.io.demo_data import write_extract

    sim = simulate_extract(mimic_extract_variables(), 40, seed=2)
    sim.patients = sim.patients.assign(max_hours=20)  # every stay shorter than the 24 h window + 6 h gap
    path = tmp_path / "short.h5"
    write_extract(sim, path)
    (tmp_path / "run" / "intermediate").mkdir(parents=True)
    with pytest.raises(InputError, match=r"kept 0 subject\(s\) of 40 stay\(s\).*max_hours_le_30: 40.*more than "
                                         r"window_hours \+ gap_hours = 30 h"):
        build_cohort.fn(str(path), str(tmp_path / "run"))


def test_a_saved_config_with_synthesis_validates_again(tmp_path, monkeypatch):
    """An audit (and a resume) reads config.json back: a run that also synthesises, as the demo does, with its
    artifacts elsewhere, must validate again (its synthesis section holds the pipeline's resolved ledger)."""
    from pathlib import Path

    config = PipelineConfig.model_validate({"artifacts_dir": str(tmp_path / "elsewhere"), "run_id": "saved",
                                            "synthesis": {"path": str(tmp_path / "table.csv")},
                                            "versioning": {"dvc": False}})
    run_dir = create_run_directory.fn(config)
    saved = json.loads((Path(run_dir) / "config.json").read_text())
    monkeypatch.chdir(tmp_path)  # audited from another directory than the run's
    again = PipelineConfig.model_validate(saved)
    assert again.synthesis.path == config.synthesis.path
    assert again.synthesis.privacy.ledger_path == again.privacy.ledger_path == config.privacy.ledger_path


def test_grid_reservations_give_each_task_its_own_by_type_not_by_a_keys_prefix():
    """The budget check's reservations, as the pipeline hands them out: a cell's search trials (and their DP dev
    scores) to its search, a group's final fits in order to its fit task; a cell whose id is another's prefix
    (eps1, eps10) takes nothing of the other's (once a string-prefix filter)."""
    from privehr.models.privacy.release_plan import Reserved
    from privehr.tasks.release_budget import GridReservations, evaluation_key
    from privehr.tasks.train import fit_key, search_score_key, trial_key

    training = TrainingConfig(search_budget=2, tuning="dp", methods=["dp_sgd"], dp_sgd={"epsilons": [1.0, 10.0]})
    one, ten = [c for c in grid(training, ["mort_icu"]) if c.model == "logistic_regression"]
    assert ten.cell_id.startswith(one.cell_id)  # the case a prefix got wrong
    keys = [trial_key(c, k) for c in (one, ten) for k in range(2)] + [search_score_key(c, k) for c in (one, ten)
                                                                     for k in range(2)]
    keys += [fit_key(one, 0), fit_key(ten, 0), evaluation_key(one)]
    reserved = GridReservations({k: Reserved(f"r/{k}") for k in keys}, [one, ten], training)
    assert set(reserved.search(one)) == {trial_key(one, 0), trial_key(one, 1), search_score_key(one, 0),
                                         search_score_key(one, 1)}
    assert set(reserved.search(ten)).isdisjoint(reserved.search(one))
    assert reserved.fits([one, ten], [(1, 0), (0, 0), (0, 1)]) == [reserved[fit_key(ten, 0)], reserved[fit_key(one, 0)],
                                                                    None]  # seed 1: made by an earlier attempt
