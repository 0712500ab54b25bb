"""The pipeline's tasks called directly (``task.fn``): leakage checks and the training grid on real files."""

import json

import numpy as np
import pytest

from models.hourly_features import HourlyFeaturizer
from privehr.config import Cell, PipelineConfig, SplitConfig, TrainingConfig
from tasks.cohort import build_cohort, load_cohort
from tasks.features import build_features, load_split
from tasks.ingest import ingest_extract
from tasks.run_directory import create_run_directory
from tasks.split import split_cohort
from tasks.train import fit_and_evaluate, search_hyperparameters


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, small_extract):
    tmp = tmp_path_factory.mktemp("run")
    run_dir = create_run_directory.fn(PipelineConfig(artifacts_dir=tmp, run_id="r1"))
    ingest_extract.fn(str(small_extract), run_dir)
    cohort = build_cohort.fn(str(small_extract), run_dir)
    manifest = split_cohort.fn(cohort, SplitConfig(seed=4), run_dir)
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
def test_search_then_fit_for_each_method(prepared, model):
    run_dir, _, _, features_dir = prepared
    training = TrainingConfig.model_validate({
        "search_budget": 2, "non_private": {"max_epochs": 4, "patience": 2},
        "dp_sgd": {"epochs": 2, "epsilons": [1.0]}, "grud": {"hidden_size": 8}})
    for method, eps in (("non_private", None), ("dp_sgd", 1.0)):
        cell = Cell(label="mort_icu", model=model, method=method, loss="l2", target_epsilon=eps)
        chosen = search_hyperparameters.fn(features_dir, cell, training, run_dir, "cpu")
        search = json.loads(open(f"{run_dir}/search/{cell.cell_id}.json").read())
        assert len(search["trials"]) == 2 and search["chosen"] == chosen
        row = fit_and_evaluate.fn(features_dir, cell, chosen, 0, training, run_dir, "cpu")
        assert row["n"] == len(load_split(features_dir, "test")["icustay_id"]) and 0 <= row["auroc"] <= 1
        if method == "dp_sgd":
            assert row["epsilon_prv"] <= 1.0 and row["epsilon_rdp"] <= 1.0 and row["noise_multiplier"] > 0
        else:
            assert row["epsilon_prv"] is None


def test_over_budget_run_is_refused_and_releases_are_recorded(prepared, tmp_path):
    import math

    from privehr.errors import InputError
    from tasks.privacy_ledger import check_privacy_budget, ledger_totals, record_releases
    from tasks.train import default_hyperparameters

    run_dir, _, _, _ = prepared
    ledger = tmp_path / "ledger.jsonl"
    config = PipelineConfig.model_validate({"privacy": {"ledger_path": str(ledger), "budget_epsilon": 2.5},
                                            "training": {"seeds": 2, "dp_sgd": {"epsilons": [1.0]}}})
    cells = [c for c in config.training.cells(["mort_icu"]) if c.model == "logistic_regression"]
    chosen = [default_hyperparameters(c, config.training) for c in cells]
    summary = check_privacy_budget.fn(run_dir, cells, chosen, config)  # two releases at epsilon 1: fits
    assert summary["planned_dp_releases"] == 2 and summary["epsilon_dp_after_run"] <= 2.5

    rows = [{"label": "mort_icu", "model": "logistic_regression", "method": "dp_sgd", "loss": "bce",
             "target_epsilon": 1.0, "seed": s, "epsilon_prv": 0.95, "epsilon_rdp": 0.99, "delta": 1e-5,
             "noise_multiplier": 1.5, "sample_rate": 0.1, "steps": 100} for s in range(2)]
    rows.append({"label": "mort_icu", "model": "logistic_regression", "method": "non_private", "loss": "bce",
                 "target_epsilon": None, "seed": 0})
    assert record_releases.fn(run_dir, rows, str(ledger)) == 3
    (total,) = ledger_totals(ledger)
    assert total.releases == 3 and math.isinf(total.epsilon) and total.counts == {"dp_sgd": 2, "non_private": 1}
    # the same plan again would bring the dataset above 2.5: refused before anything is trained
    with pytest.raises(InputError, match=r"privacy budget exceeded .* Nothing was trained"):
        check_privacy_budget.fn(run_dir, cells, chosen, config)
