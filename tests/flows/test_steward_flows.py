"""privehr-validate and privehr-ehr-prepare under the Prefect harness, and the pipeline's validation gate."""

import json
from pathlib import Path

import pandas as pd
import pytest
from prefect.client.orchestration import get_client

from privehr.flows.ehr_prepare import ehr_prepare
from privehr.flows.pipeline import pipeline
from privehr.flows.steward import validate
from privehr.core.config import EHRPrepareConfig, PipelineConfig, StewardConfig
from privehr.io.demo_data import write_demo_ehr
from privehr.io.validation import ValidationFailed


@pytest.fixture(scope="module")
def fahrenheit(tmp_path_factory, small_extract):
    """The small extract with temperatures written in degrees Fahrenheit."""
    import warnings

    path = tmp_path_factory.mktemp("bad") / "fahrenheit.h5"
    path.write_bytes(small_extract.read_bytes())
    vitals = pd.read_hdf(small_extract, "vitals_labs")
    vitals[("temperature", "mean")] = vitals[("temperature", "mean")] * 9 / 5 + 32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vitals.to_hdf(path, key="vitals_labs")
    return path


def _artifacts(flow_run_id):
    """The artifacts this flow run's tasks published (filtered by the server: the harness holds every test's)."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(
            any_=[flow_run_id])))
        return [a for a in found if a.task_run_id is not None]


def test_steward_flow_reports_every_delivery_and_fails_on_a_critical_one(tmp_path, small_extract, fahrenheit):
    ehr = write_demo_ehr(tmp_path / "ehr.csv")["path"]
    truncated = tmp_path / "truncated.h5"
    truncated.write_bytes(small_extract.read_bytes()[:50_000])
    config = StewardConfig(paths=[small_extract, truncated, fahrenheit, ehr], artifacts_dir=tmp_path, run_id="steward")
    state = validate(config, return_state=True)
    assert state.is_failed()
    with pytest.raises(ValidationFailed, match=r"(?s)2 of 4 deliveries failed: .*truncated\.h5.*fahrenheit\.h5.*"
                                               r"truncated\.h5: .*not a readable HDF5 file"):
        state.result()
    run_dir = tmp_path / "steward"
    reports = {p.parent.name: json.loads(p.read_text()) for p in (run_dir / "validation").glob("*/validation.json")}
    assert {k: v["passed"] for k, v in reports.items()} == {"all_hourly_data": True, "fahrenheit": False, "ehr": True}
    for report in reports.values():
        assert Path(report["data_docs"]).is_file()
    artifacts = _artifacts(state.state_details.flow_run_id)
    kinds = sorted(a.description for a in artifacts)
    docs = "Great Expectations Data Docs of this validation (served at http://127.0.0.1:8765 by `privehr serve`)"
    assert kinds == [docs] * 3 + ["failed expectations"] * 3 + ["validation summary"] * 3
    # the links point where privehr serve (pages.base_url) serves the artifacts directory, not at file://
    links = sorted(a.data for a in artifacts if a.description == docs)
    assert all("](http://127.0.0.1:8765/steward/validation/" in link and "/data_docs/local_site/index.html)" in link
               for link in links), links
    summaries = [a.data for a in artifacts if a.description == "validation summary"]
    assert sum("FAILED (critical)" in s for s in summaries) == 1
    assert not (run_dir / "models").exists()  # stewards' flow trains nothing


def test_pipeline_stops_before_training_on_a_critical_failure(tmp_path, fahrenheit):
    config = PipelineConfig.model_validate({
        "data": {"hdf5_path": str(fahrenheit)}, "artifacts_dir": str(tmp_path), "run_id": "gate",
        "versioning": {"dvc": False}, "privacy": {"ledger_path": str(tmp_path / "ledger.jsonl")},
        "training": {"models": ["logistic_regression"], "seeds": 1}})
    with pytest.raises(ValidationFailed, match=r"temperature.*convert the variable to the spec's unit"):
        pipeline(config)
    run_dir = tmp_path / "gate"
    assert (run_dir / "validation" / "fahrenheit" / "validation.json").exists()
    assert not (run_dir / "cohort.json").exists() and not (run_dir / "models").exists()
    assert (tmp_path / "ledger.jsonl").read_text() == ""  # proven writable at the start; nothing reserved or released


def test_ehr_prepare_flow_validates_then_imputes(tmp_path):
    path = write_demo_ehr(tmp_path / "ehr.csv", seed=2)["path"]
    result = ehr_prepare(EHRPrepareConfig(path=path, artifacts_dir=tmp_path, run_id="ehr",
                                          mice={"m": 2, "max_iter": 3, "trace": False}))
    summary = json.loads(Path(result["imputation"]).read_text())
    assert summary["missing_after"] == 0 and summary["within_bounds"] and summary["m"] == 2
    assert json.loads(Path(result["validation"]).read_text())["passed"]


def test_pipeline_can_impute_the_static_table_on_training_stays(tmp_path, small_extract):
    config = PipelineConfig.model_validate({
        "data": {"hdf5_path": str(small_extract)}, "artifacts_dir": str(tmp_path), "run_id": "static",
        "versioning": {"dvc": False}, "privacy": {"ledger_path": str(tmp_path / "ledger.jsonl")},
        "static_imputation": {"m": 2, "max_iter": 3},
        "training": {"models": ["logistic_regression"], "methods": ["non_private"], "seeds": 1,
                     "non_private": {"max_epochs": 1}}})
    run_dir = Path(pipeline(config)["run_dir"])
    s = json.loads((run_dir / "static_imputation.json").read_text())
    manifest = json.loads((run_dir / "split_summary.json").read_text())
    assert s["stays"] == {k: v["stays"] for k, v in manifest["counts"].items()}
    assert s["missing_after"] == 0 and s["missing_before"]["train"] > 0
    assert {"age", "gender_male", "heart rate (24h mean)"} <= set(s["columns_kept"])
    assert all(f > 0.9 for f in s["dropped"]["columns"].values())
    for split in ("train", "dev", "test"):
        frame = pd.read_csv(run_dir / "intermediate" / "static_imputed" / f"{split}_1.csv", index_col=0)
        ids = json.loads((run_dir / "intermediate" / "split_manifest.json").read_text())["icustay_ids"]
        assert set(frame.index) == set(ids[split])
        assert not frame.isna().any().any() and frame["age"].between(15, 120).all()


def test_ehr_prepare_takes_m_alone_and_refuses_a_table_missing_a_derived_columns_source(tmp_path, capsys):
    """`privehr ehr-prepare --m 2` (no --iterations) parses; an all-missing PAP column is one message, exit 2."""
    import json

    from privehr.cli import main
    from privehr.io.demo_data import write_demo_ehr

    table = tmp_path / "ehr.csv"
    write_demo_ehr(table, seed=0)
    lines = [line.split(",") for line in table.read_text().splitlines()]
    table.write_text("\n".join(",".join([c[0]] + ["none"] * (len(c) - 1) if c[0] == "pap_systolic" else c)
                               for c in lines) + "\n")
    argv = ["ehr-prepare", "--data", str(table), "--m", "2", "--artifacts-dir", str(tmp_path / "a"), "--json"]
    assert main(argv) == 2
    assert "mean_pap needs pap_systolic" in json.loads(capsys.readouterr().out)["error"]
