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
