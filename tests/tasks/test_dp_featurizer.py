"""A DP featurizer release that could inform no variable is not made: decided from the released count of training
stays before any noise is drawn, its reservation voided, nothing spent, and the featurizer says so. One that can
inform is made and recorded."""

from __future__ import annotations

import json

import pytest

from privehr.core.config import PipelineConfig, SplitConfig
from privehr.io.ledger import ledger_totals, read_ledger
from privehr.models.data.featurizer_statistics import can_inform, fallback_threshold, sensitivity
from privehr.tasks.cohort import build_cohort
from privehr.tasks.features import build_features
from privehr.tasks.ingest import ingest_extract
from privehr.tasks.record_counts import (COUNTS_KEY, STATISTICS_KEY, check_preprocessing_budget,
                                         release_record_counts)
from privehr.tasks.run_directory import create_run_directory
from privehr.tasks.split import split_cohort


def _features(tmp_path, extract, epsilon: float):
    config = PipelineConfig.model_validate({
        "artifacts_dir": str(tmp_path / "artifacts"), "run_id": f"eps{epsilon:g}",
        "privacy": {"ledger_path": str(tmp_path / "ledger.jsonl"), "allow_above_ceiling": epsilon > 20},
        "release": {"featurizer": "dp", "featurizer_epsilon": epsilon, "record_count": "dp", "count_epsilon": 1.0}})
    run_dir = create_run_directory.fn(config)
    ingest_extract.fn(str(extract), run_dir)
    cohort = build_cohort.fn(str(extract), run_dir)
    manifest = split_cohort.fn(cohort, SplitConfig(), run_dir)
    reserved = check_preprocessing_budget.fn(run_dir, config)
    release_record_counts.fn(run_dir, config, reserved[COUNTS_KEY])
    build_features.fn(cohort, manifest, run_dir, "dp", config.privacy, reserved[STATISTICS_KEY])
    featurizer = json.loads((tmp_path / "artifacts" / config.run_id / "featurizer.json").read_text())
    train = json.loads((tmp_path / "artifacts" / config.run_id / "record_counts.json").read_text())["stays"]["train"]
    return config, reserved, featurizer, train


def test_a_release_every_variable_would_ignore_is_not_made_and_costs_nothing(tmp_path, small_extract):
    config, reserved, featurizer, train = _features(tmp_path, small_extract, 0.5)
    z = reserved[STATISTICS_KEY].plan.noise_multiplier
    assert train < fallback_threshold(z, len(featurizer["variables"])) == pytest.approx(10 * z * sensitivity(104))
    assert featurizer["source"] == "public" and featurizer["release"] is None and "not made" in featurizer["note"]
    entries = read_ledger(config.privacy.ledger_path)
    void = [e for e in entries if e.status == "void"]
    assert [e.reservation for e in void] == [reserved[STATISTICS_KEY].reservation]
    assert not any(e.status == "released" and e.mechanism == "gaussian" for e in entries)
    [total] = ledger_totals(config.privacy.ledger_path, config.privacy.delta)
    assert total.pending == 0 and total.releases == 1  # the record counts alone


def test_a_release_that_can_inform_is_made_and_recorded(tmp_path, small_extract):
    # epsilon 100 (above the ceiling, allowed here): at 20 the threshold (10 noise sds, 54) left two variables above
    # it by a few sds, and one CI run drew both under; the release's making and recording are the claim, not epsilon
    config, reserved, featurizer, train = _features(tmp_path, small_extract, 100.0)
    assert can_inform(reserved[STATISTICS_KEY].plan.noise_multiplier, len(featurizer["variables"]), train)
    assert featurizer["source"] == "dp" and featurizer["release"] and "not made" not in featurizer["note"]
    assert not all(featurizer["fallback"])  # some variable got its own estimate
    entries = read_ledger(config.privacy.ledger_path)
    assert not [e for e in entries if e.status == "void"]
    assert [e.what for e in entries if e.status == "released"] == ["record counts", "featurizer statistics"]


def test_exact_statistics_are_a_release_without_a_guarantee_and_no_budget_admits_them(tmp_path, small_extract):
    """release.featurizer: exact fits the featurizer on the training stays exactly: every model the run trains is
    post-processing of it. It is reserved and recorded as a release without a guarantee (once it shipped in the bundle
    with no ledger entry, its patients still "within budget"); under a budget the run is refused before it."""
    from privehr.core.errors import InputError

    config = PipelineConfig.model_validate({
        "artifacts_dir": str(tmp_path / "artifacts"), "run_id": "exact",
        "privacy": {"ledger_path": str(tmp_path / "ledger.jsonl")}, "release": {"featurizer": "exact"}})
    run_dir = create_run_directory.fn(config)
    cohort = build_cohort.fn(str(small_extract), run_dir)
    manifest = split_cohort.fn(cohort, SplitConfig(), run_dir)
    reserved = check_preprocessing_budget.fn(run_dir, config)
    release_record_counts.fn(run_dir, config, reserved.get(COUNTS_KEY))
    build_features.fn(cohort, manifest, run_dir, "exact", config.privacy, reserved[STATISTICS_KEY])
    featurizer = json.loads((tmp_path / "artifacts" / "exact" / "featurizer.json").read_text())
    (statistics,) = [e for e in read_ledger(config.privacy.ledger_path) if e.status == "released" and
                     e.what.startswith("featurizer statistics")]
    assert statistics.guarantee == "non_private" and featurizer["release"] == statistics.release
    assert featurizer["source"] == "exact"
    budgeted = config.model_copy(update={"run_id": "exact-budget", "privacy": config.privacy.model_copy(update={
        "ledger_path": tmp_path / "other.jsonl", "budget_epsilon": 5.0})})
    run_dir = create_run_directory.fn(budgeted)
    split_cohort.fn(build_cohort.fn(str(small_extract), run_dir), SplitConfig(), run_dir)
    with pytest.raises(InputError, match="without a DP guarantee"):
        check_preprocessing_budget.fn(run_dir, budgeted)
