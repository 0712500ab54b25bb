"""One ledger per project, for every flow: the pipeline's EHR synthesis subflow records where the pipeline records.

The subflow's parameters are validated again by Prefect (as a deployment's would be, from JSON); a ledger path left
to its default was put back beside the subflow's artifacts_dir, inside the run directory, and every run started the
EHR table from a full budget. Here the pipeline runs through the front door twice with EHR synthesis and no ledger
path set: both runs' synthesis releases land in the project's ledger, the second composes with the first, both
bundles verify against it, and no ledger, head or key file exists under any run directory.
"""

import json
from pathlib import Path

import pytest
import yaml

from privehr.cli import main
from privehr.core.config import PipelineConfig
from privehr.flows.pipeline import pipeline
from privehr.flows.synthesis import synthesize_ehr
from privehr.io.demo_data import write_demo_ehr
from privehr.io.ledger import read_ledger
from privehr.models.privacy.ledger import compose_entries

SYNTHESIS = {"mice": {"m": 1, "max_iter": 2, "trace": False}, "mus": [], "epsilons": [2.0], "non_private": False,
             "runs": 1, "releases": 1, "synthesizers": ["maf"], "dpnf": {"steps": 20, "blocks": 1, "hidden_size": 8}}
GRID = {"labels": ["mort_icu"], "training": {"models": ["logistic_regression"], "methods": ["non_private"],
                                             "seeds": 1}, "validation": {"enabled": False},
        "release": {"bundle": False, "record_count": "public"}}


def _ledger_like(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if "ledger" in p.name or p.name.endswith((".key", ".head"))]


def test_the_synthesis_subflow_receives_the_pipelines_ledger_after_prefect_validates_it(tmp_path):
    config = PipelineConfig.model_validate({"artifacts_dir": str(tmp_path / "artifacts"),
                                            "synthesis": {"path": str(tmp_path / "table.csv")}})
    sent = config.synthesis_run(tmp_path / "artifacts" / "run")
    for given in (sent, json.loads(sent.model_dump_json())):  # in process, and as a deployment's JSON
        received = synthesize_ehr.validate_parameters({"config": given, "device": "cpu"})["config"]
        assert received.privacy.ledger_path == config.privacy.ledger_path == tmp_path / "artifacts" / \
            "privacy_ledger.jsonl"
    received = pipeline.validate_parameters({"config": json.loads(config.model_dump_json())})["config"]
    assert received.synthesis_run(tmp_path / "r").privacy.ledger_path == config.privacy.ledger_path


def test_a_ledger_inside_a_run_directory_is_refused_before_anything_runs(tmp_path, small_extract, capsys):
    run = tmp_path / "artifacts" / "old-run"
    run.mkdir(parents=True)
    (run / "provenance.json").write_text("{}")  # an earlier run's directory
    code = main(["run", "--data", str(small_extract), "--artifacts-dir", str(tmp_path / "artifacts"), "--no-dvc",
                 "--run-id", "new", "--json", "--no-synthesis", "--config", str(_write(tmp_path / "c.yaml", {
                     **GRID, "privacy": {"ledger_path": str(run / "privacy_ledger.jsonl")}}))])
    assert code == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert "inside the run directory" in error and "\n" not in error
    assert not (run / "privacy_ledger.jsonl").exists() and not (tmp_path / "artifacts" / "new").exists()


def _write(path: Path, content: dict) -> Path:
    path.write_text(yaml.safe_dump(content))
    return path


def test_two_pipeline_runs_with_ehr_synthesis_record_into_one_project_ledger(tmp_path, small_extract, capsys):
    ehr = write_demo_ehr(tmp_path / "EHR_dataset.csv", seed=0)["path"]
    artifacts = tmp_path / "artifacts"
    config = _write(tmp_path / "config.yaml", {**GRID, "synthesis": {"path": str(ehr), **SYNTHESIS}})
    ledger = artifacts / "privacy_ledger.jsonl"
    spent, bundles = [], []
    for run_id in ("night-1", "night-2"):
        assert main(["run", "--config", str(config), "--data", str(small_extract), "--run-id", run_id,
                     "--artifacts-dir", str(artifacts), "--no-dvc", "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        bundles.append(Path(summary["run_dir"]) / "synthesis" / "release")
        synthesis = [e for e in read_ledger(ledger) if "/synthesis#" in e.run_id]
        assert synthesis, "the EHR table's releases are in the project's ledger"
        (table,) = {e.dataset for e in synthesis}  # one dataset: the EHR table, in both runs
        # the demo table's spec names no id column: its patients are rows, which a delivery shifts, so its releases
        # are charged to every patient of the table (no membership snapshot)
        assert {e.members for e in synthesis} == {None}
        spent.append(compose_entries([e for e in read_ledger(ledger) if e.dataset == table]))
    assert spent[1].releases == 2 * spent[0].releases and spent[1].epsilon_dp > spent[0].epsilon_dp * 1.2
    for bundle in bundles:
        assert main(["release", "verify", str(bundle), "--ledger", str(ledger)]) == 0, capsys.readouterr().out
    stray = [p for run in ("night-1", "night-2") for p in _ledger_like(artifacts / run)]
    assert not stray, stray
    assert sorted(p.name for p in _ledger_like(artifacts)) == ["privacy_ledger.jsonl", "privacy_ledger.jsonl.head",
                                                               "privacy_ledger.jsonl.key",
                                                               "privacy_ledger.jsonl.members",
                                                               "privacy_ledger.jsonl.signing-key"]  # beside it


if __name__ == "__main__":
    pytest.main([__file__])
