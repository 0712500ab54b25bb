"""The pipeline's tasks called directly (``task.fn``): leakage checks on real files."""

import json

import numpy as np

from models.hourly_features import HourlyFeaturizer
from privehr.config import LogisticRegressionConfig, PipelineConfig, SplitConfig
from tasks.cohort import build_cohort, load_cohort
from tasks.evaluate import evaluate_logistic_regression
from tasks.features import build_features, load_split
from tasks.run_directory import create_run_directory
from tasks.split import split_cohort
from tasks.train import train_logistic_regression


def test_split_keeps_patients_whole_and_features_use_training_statistics(tmp_path, small_extract):
    run_dir = create_run_directory.fn(PipelineConfig(artifacts_dir=tmp_path, run_id="r1"))
    cohort = build_cohort.fn(str(small_extract), run_dir)
    manifest_path = split_cohort.fn(cohort, SplitConfig(seed=4), run_dir)
    manifest = json.loads(open(manifest_path).read())
    subjects = {s: set(manifest["subjects"][s]) for s in ("train", "dev", "test")}
    assert not (subjects["train"] & subjects["dev"] or subjects["train"] & subjects["test"]
                or subjects["dev"] & subjects["test"])
    data = load_cohort(cohort)
    assert sum(len(v) for v in manifest["icustay_ids"].values()) == len(data["icustay_id"])

    features_dir = build_features.fn(cohort, manifest_path, run_dir)
    fitted = json.loads((tmp_path / "r1" / "featurizer.json").read_text())
    train = np.isin(data["icustay_id"], manifest["icustay_ids"]["train"])
    reference = HourlyFeaturizer().fit(data["mean"][train], data["count"][train])
    np.testing.assert_allclose(fitted["mean"], reference.mean_)
    np.testing.assert_allclose(fitted["std"], reference.std_)
    # test features are the test stays standardised with the training statistics
    test = load_split(features_dir, "test")
    rows = np.isin(data["icustay_id"], test["icustay_id"])
    expected = reference.transform(data["mean"][rows], data["count"][rows])
    np.testing.assert_array_equal(test["values"], expected.values)
    everyone = HourlyFeaturizer().fit(data["mean"], data["count"])
    assert not np.allclose(everyone.mean_, reference.mean_)  # the check above can tell them apart

    model = train_logistic_regression.fn(features_dir, "mort_icu", LogisticRegressionConfig(max_epochs=5), run_dir,
                                         "cpu")
    metrics = evaluate_logistic_regression.fn(features_dir, model, "mort_icu")
    assert metrics["n"] == len(test["icustay_id"]) and 0.0 <= metrics["auroc"] <= 1.0
