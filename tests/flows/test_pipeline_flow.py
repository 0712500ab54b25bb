"""privehr-pipeline end to end under Prefect's test harness (temporary database and storage)."""

import hashlib
import json
import os
from pathlib import Path

import pytest

from privehr.flows.pipeline import pipeline
from privehr.core.config import PipelineConfig


def test_pipeline_writes_a_complete_run_and_leaves_the_input_untouched(tmp_path, small_extract):
    before = hashlib.sha256(small_extract.read_bytes()).hexdigest()
    config = PipelineConfig.model_validate({
        "data": {"hdf5_path": str(small_extract), "chunk_rows": 1024},
        "artifacts_dir": str(tmp_path), "run_id": "flow-test", "versioning": {"dvc": False},
        "privacy": {"ledger_path": str(tmp_path / "ledger.jsonl")},
        "training": {"losses": ["bce"], "seeds": 2, "non_private": {"max_epochs": 3}, "batched": "on",
                     "dp_sgd": {"epochs": 2, "epsilons": [1.0, 10.0]}, "grud": {"hidden_size": 8},
                     "expm_nf": {"epsilons": [1.0], "steps": 3, "eval_samples": 4, "seeds": 2,
                                 "models": ["logistic_regression", "grud"]},
                     "dp_expm_nf": {"epsilons": [1.0], "epochs": 2, "eval_samples": 4}},
        "device": "auto"})
    summary = pipeline(config)
    run_dir = Path(summary["run_dir"])
    for name in ("config.json", "provenance.json", "ingest.json", "cohort.json", "split_summary.json",
                 "intermediate/split_manifest.json",
                 "featurizer.json", "metrics.json", "results.md", "results.csv", "results_runs.csv",
                 "auroc_vs_epsilon.png", "models/mort_icu-grud-dp_sgd-bce-eps1-seed1.pt",
                 "search/los_3-logistic_regression-non_private-bce-epsinf.json"):
        assert (run_dir / name).exists(), name
    metrics = json.loads((run_dir / "metrics.json").read_text())
    # training.batched: on: each (label, model) family's DP-SGD fits (2 epsilons x 2 seeds) trained as one batched
    # model, each its own release; each non-private cell's 2 seeds stacked; logistic regression's ExpM+NF flows (1 epsilon x 2 seeds) and its DP-trained ExpM
    # flows (2 seeds) trained together, GRU-D's ExpM+NF flows (minibatched utility) one at a time; every other fit alone
    fits = [json.loads(p.read_text())["value"] for p in (run_dir / "models").glob("*.json")
            if not p.name.endswith(".draws.json")]
    assert sorted({(f["method"], f["model"], f.get("batch_members")) for f in fits}, key=str) == sorted(
        {("dp_sgd", m, 4) for m in ("logistic_regression", "grud")}
        | {("non_private", m, 2) for m in ("logistic_regression", "grud")}
        | {("expm_nf", "logistic_regression", 2), ("expm_nf", "grud", None)}
        | {("dp_expm_nf", "logistic_regression", 2)},
        key=str)
    # labels x (models x (non-private + 2 DP-SGD + 1 ExpM+NF) + the DP-trained ExpM flow of LR) x seeds
    assert metrics["runs"] == 2 * (2 * 4 + 1) * 2
    rows = {(r["label"], r["model"], r["method"], r["target_epsilon"]): r for r in metrics["results"]}
    assert len(rows) == 2 * (2 * 4 + 1) and all(r["seeds"] == 2 for r in rows.values())
    for label in ("mort_icu", "los_3"):
        flow = rows[(label, "logistic_regression", "dp_expm_nf", 1.0)]
        assert flow["loss"] == "bce" and flow["guarantee"] == "DP" and 0 < flow["epsilon_prv"] <= 1.0
        assert 0 <= flow["auroc_bayes"] <= 1 and flow["gap_std"] >= 0
    for label in ("mort_icu", "los_3"):
        for model in ("logistic_regression", "grud"):
            expm = rows[(label, model, "expm_nf", 1.0)]
            assert expm["loss"] == "l2" and expm["epsilon_prv"] is None
            assert 0 <= expm["auroc_bayes"] <= 1 and 0 <= expm["auroc_map"] <= 1 and expm["gap_std"] >= 0
    report = (run_dir / "results.md").read_text()
    assert report.index("## Release bundle: what may leave the hospital") < report.index("## Results")
    assert "| mort_icu-grud-dp_sgd-bce-eps1 |" in report.split("## Results")[0]
    assert "| expm_nf | l2 | 1 |" in report and "expm_nf_auroc_boxplots.png" in report
    assert (run_dir / "expm_nf_auroc_boxplots.png").stat().st_size > 10_000
    assert "Validation of `all_hourly_data.h5`: passed, 30 expectations" in report
    assert "Privacy ledger: dataset" in report and "The dataset's guarantee: NOT DP" in report  # non-private cells
    assert "| not DP (non-private) |" in report and "| DP |" in report
    assert "| not DP (ExpM+NF: eps~ is a training parameter, no guarantee is proven) |" in report
    ledger = metrics["privacy_ledger"]
    # every fit, the record counts its plans were built from and the bundle's four DP evaluations
    assert ledger["releases"] == metrics["runs"] + 1 + 4 and ledger["pending"] == 0 and not ledger["dp"]
    assert ledger["counts"] == {"dp": 1, "dp_sgd": 16 + 4, "non_private": 8, "expm_nf": 8, "gaussian": 4}
    bundle = summary["release"]
    assert sorted(bundle["models"]) == sorted(f"{lb}-{m}-dp_sgd-bce-eps1" for lb in ("mort_icu", "los_3")
                                              for m in ("logistic_regression", "grud"))
    assert bundle["releases"] == 4 + 4 + 1 and (run_dir / "release" / "manifest.json").exists()
    assert ledger["epsilon_dp_pld"] <= ledger["epsilon_dp_rdp"] and ledger["epsilon"] is None
    checks = {(c["label"], c["model"]): c for c in metrics["dp_sgd_checks"]}
    assert set(checks) == {(lb, m) for lb in ("mort_icu", "los_3") for m in ("logistic_regression", "grud")}
    for (label, model), c in checks.items():
        assert c["epsilons"] == [1.0, 10.0] and c["auroc_medians"] == [
            rows[(label, model, "dp_sgd", e)]["auroc_median"] for e in (1.0, 10.0)]
        assert c["non_private_baseline"] == rows[(label, model, "non_private", None)]["auroc_median"]
        assert f"- {label} / {model} / bce: AUROC" in report
    for (label, model, method, eps), r in rows.items():
        assert 0 <= r["auroc_median"] <= 1
        if method == "dp_sgd":
            assert r["epsilon_prv"] <= eps and r["epsilon_rdp"] <= eps and r["epsilon_pld"] <= r["epsilon_rdp"]
            assert r["guarantee"] == "DP"
    # the test-set evaluation: every cell, intervals around the medians, calibration, subgroups
    evaluation = metrics["evaluation"]
    assert evaluation["not_evaluated"] == [] and len(evaluation["cells"]) == len(rows)
    for c in evaluation["cells"]:
        row = rows[(c["label"], c["model"], c["method"], None if c["target_epsilon"] is None else c["target_epsilon"])]
        lo, hi = c["auroc_ci"]
        assert lo <= c["auroc_median"] <= hi and 0 <= c["ece"] <= 1 and 0 <= c["brier"] <= 1
        assert sum(b["stays"] for b in c["reliability"]) == c["test_stays"] == metrics["split"]["test"]["stays"]
        if c["method"] != "expm_nf":  # ExpM+NF: the released draw, not the median over draws
            assert c["auroc_median"] == pytest.approx(row["auroc_median"])
    assert {(g["attribute"], g["group"]) for g in evaluation["subgroups"]} >= {("sex", "female"), ("sex", "male")}
    for g in evaluation["subgroups"]:
        assert (g["auroc"] is None) == g["too_small"] == (g["auroc_ci"] is None) and "stays" not in g
    assert all(r["cost"] is None or -1 <= r["cost"] <= 1 for r in evaluation["privacy_cost"])
    for section in ("## Uncertainty and calibration", "## Subgroups", "## Privacy cost by subgroup",
                    "calibration.png"):
        assert section in report, section
    stages = metrics["stage_seconds"]
    assert list(stages) == ["setup", "ingest", "validate", "cohort", "split", "record counts", "features",
                            "budget check", "search", "fit (after the last search)", "release bundle",
                            "report"] and all(v >= 0 for v in stages.values())
    assert summary["stage_seconds"]["report"] == stages["report"] and "## Time per stage" in report
    assert metrics["fit_task_seconds"] == pytest.approx(sum(r["fit_seconds"] for r in _fit_rows(run_dir)))
    page = (run_dir / "report.html").read_text()
    assert "<table>" in page and "data:image/png;base64," in page and 'src="calibration.png"' not in page
    # it opens on the task and the data's source, then the bundle's card
    assert report.startswith("# Risk of death in the ICU (mort_icu) and ICU stay longer than 3 days (los_3)")
    assert report.index("> **Simulated data.**") < report.index("## Release bundle") and "<blockquote>" in page
    assert json.loads((run_dir / "ingest.json").read_text())["sha256"] == before
    assert hashlib.sha256(small_extract.read_bytes()).hexdigest() == before
    assert PipelineConfig.model_validate_json((run_dir / "config.json").read_text()) == config
    assert os.listdir(run_dir / "intermediate")  # patient-level data stays in the run, not in Prefect
    json.loads((run_dir / "metrics.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in metrics.json"))


def _fit_rows(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text())["value"] for p in (run_dir / "models").glob("*.json")
            if not p.name.endswith(".draws.json")]


def test_invalid_parameters_are_refused_before_running():
    from prefect.exceptions import ParameterTypeError

    with pytest.raises(ParameterTypeError, match="sum to 1"):
        pipeline(config={"split": {"train": 0.8, "dev": 0.1, "test": 0.2}})


def test_a_restarted_run_does_not_redo_finished_cells_and_retrains_the_rest_with_fresh_noise(tmp_path, small_extract):
    import torch

    from privehr.io.ledger import ledger_totals, read_ledger

    config = PipelineConfig.model_validate({
        "data": {"hdf5_path": str(small_extract)}, "artifacts_dir": str(tmp_path), "run_id": "resumable",
        "versioning": {"dvc": False}, "privacy": {"ledger_path": str(tmp_path / "ledger.jsonl")},
        "training": {"models": ["logistic_regression"], "methods": ["non_private", "dp_sgd"], "seeds": 2,
                     "non_private": {"max_epochs": 3}, "dp_sgd": {"epochs": 2, "epsilons": [1.0]},
                     "batched": "on"}})  # a DP-SGD family's 2 seeds train as one batched model, resumed per member
    first = pipeline(config)
    models = Path(first["run_dir"]) / "models"
    results = sorted(p for p in models.glob("*.json") if not p.name.endswith(".draws.json"))
    assert len(results) == 2 * 2 * 2  # labels x (non-private, dp) x seeds
    lost = models / "mort_icu-logistic_regression-dp_sgd-bce-eps1-seed1.json"  # as if killed before it finished
    lost.unlink()
    old_weights = torch.load(lost.with_suffix(".pt"))["state_dict"]
    kept = {p: p.stat().st_mtime_ns for p in results if p != lost}
    (before,) = ledger_totals(tmp_path / "ledger.jsonl")

    with pytest.raises(Exception, match="exists"):
        pipeline(config)  # the same run id without resume is refused
    second = pipeline(config.model_copy(update={"resume": True}))
    assert lost.exists()
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items())  # finished cells were not retrained
    new_weights = torch.load(lost.with_suffix(".pt"))["state_dict"]
    assert not all(torch.equal(old_weights[k], new_weights[k]) for k in old_weights)  # fresh noise, a new release
    same = [r for r in first["results"] if r["method"] == "non_private"]
    assert [r for r in second["results"] if r["method"] == "non_private"] == same
    entries = read_ledger(tmp_path / "ledger.jsonl")
    releases = [e.release for e in entries]
    assert len(releases) == len(set(releases))  # ids are never reused
    (after,) = ledger_totals(tmp_path / "ledger.jsonl")
    # the retrained cell is one more release, counted; the bundled seed-0 models kept their DP evaluations and the
    # run its record counts (8 fits, 1 count, 2 evaluations before the restart)
    assert after.releases == before.releases + 1 == 2 * 2 * 2 + 1 + 2 + 1
    assert after.pending == 0 and after.epsilon_dp > before.epsilon_dp
