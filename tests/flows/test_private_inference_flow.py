"""privehr-private-inference end to end: every posterior recorded in the ledger before it is written, the report in
the table shape of Su et al. 2023, the records kept under intermediate/, a budget refused before anything is
fitted, a user's CSV of records checked with one message, and the CLI's --json."""

import hashlib
import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from privehr.flows.private_inference import private_inference
from privehr.models.inference.repeated_measures import simulate_repeated_measures
from privehr.cli import main
from privehr.core.errors import InputError
from privehr.core.inference_config import InferenceConfig
from privehr.io.ledger import read_ledger

TINY = {"subjects": 150, "mus": [2.0], "runs": 1, "vi": {"steps": 30, "draws": 16},
        "synthetic": {"datasets": 1, "density": {"steps": 30}}, "reference_draws": 500, "summary_draws": 500}


def _config(root: Path, **extra) -> InferenceConfig:
    return InferenceConfig.model_validate({**TINY, "artifacts_dir": root / "artifacts",
                                           "privacy": {"ledger_path": root / "ledger.jsonl"}, **extra})


@pytest.fixture(scope="module")
def inference_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("inference")
    config = _config(root, run_id="infer")
    return config, private_inference(config, "cpu")


def test_every_posterior_is_a_recorded_release_with_its_epsilon(inference_run):
    config, summary = inference_run
    released = [e for e in read_ledger(config.privacy.ledger_path) if e.status == "released"]
    whats = sorted(e.what for e in released)
    assert whats == sorted(["exact posterior", "NF-VI posterior", "DP-NF-VI posterior", "DP-NF-VI posterior",
                            "DP-NF of the records (VI on synthetic data)"])
    for entry in released:
        if entry.guarantee == "dp":
            assert math.isfinite(entry.epsilon_prv) and math.isfinite(entry.epsilon_rdp)
            assert entry.epsilon_rdp >= entry.epsilon_prv * 0.99
        else:
            assert entry.guarantee == "non_private" and "posterior" in entry.what
    assert summary["releases"] == len(released)


def test_the_report_has_the_tables_of_su_2023_and_the_privacy_of_each_column(inference_run):
    _, summary = inference_run
    run_dir = Path(summary["run_dir"])
    report = (run_dir / "report.md").read_text()
    assert "Su et al. 2023, Table 6" in report and "Su et al. 2023, Table 7" in report and "tempered" in report
    assert "| beta0, beta3 |" in report and "mu = 2 (sigma" in report
    columns = summary["columns"]
    assert set(columns) == {"exact", "nf_vi", "dp_nf_vi/free_energy/mu2", "dp_nf_vi/tempered/mu2",
                            "synthetic_vi/free_energy/mu2"}
    dp = columns["dp_nf_vi/free_energy/mu2"]
    assert dp["privacy"]["mu"] == pytest.approx(2.0) and dp["guarantee"] == ["DP"]
    assert len(dp["runs"]["correlation"]["mean"]) == 5 and "correlation_rmse" in dp["vs_exact"]
    for figure in summary["figures"]:
        assert Path(figure).stat().st_size > 10_000
    for path in (run_dir / "posteriors").glob("*.json"):  # no count of private records in a release's record
        assert '"n"' not in path.read_text() and "expected_batch" not in path.read_text()


def test_the_records_stay_under_intermediate(inference_run):
    _, summary = inference_run
    run_dir = Path(summary["run_dir"])
    assert (run_dir / "intermediate" / "records.pt").exists()
    assert not [p for p in run_dir.rglob("*") if p.is_file() and "records" in p.name
                and "intermediate" not in p.parts]


def test_a_budget_too_small_is_refused_before_anything_is_fitted(tmp_path):
    config = _config(tmp_path, run_id="refused", non_private=False,
                     privacy={"ledger_path": tmp_path / "ledger.jsonl", "budget_epsilon": 1.0})
    with pytest.raises(InputError, match="epsilon by the Renyi filter at order .* would rise above the budget 1"):
        private_inference(config, "cpu")
    run_dir = tmp_path / "artifacts" / "refused"
    assert not (run_dir / "posteriors").exists()
    assert json.loads((run_dir / "privacy_budget.json").read_text())["refused"]
    assert not [e for e in read_ledger(tmp_path / "ledger.jsonl") if e.status in ("reserved", "released")]


def test_a_users_records_are_checked_with_one_message_naming_columns_not_values(tmp_path):
    records = simulate_repeated_measures(40, generator=torch.Generator().manual_seed(0)).numpy()
    table = pd.DataFrame(records, columns=["w1", "w2", "w3", "w4", "x1", "x2", "x3", "x4", "x5"]).astype(object)
    table.loc[3, "x2"] = "n/a-98765"
    table.drop(columns=["w4"]).to_csv(tmp_path / "no_w4.csv", index=False)
    table.to_csv(tmp_path / "bad.csv", index=False)
    digest = hashlib.sha256((tmp_path / "bad.csv").read_bytes()).hexdigest()
    with pytest.raises(InputError, match="lacks the column.*w4"):
        private_inference(_config(tmp_path, run_id="a", data_path=tmp_path / "no_w4.csv"), "cpu")
    with pytest.raises(InputError, match=r"x2 \(1 row") as err:
        private_inference(_config(tmp_path, run_id="b", data_path=tmp_path / "bad.csv"), "cpu")
    assert "98765" not in str(err.value)
    assert hashlib.sha256((tmp_path / "bad.csv").read_bytes()).hexdigest() == digest
    table.loc[3, "x2"] = 1.0
    table.loc[[5, 7], "w2"] = -5.4321  # log(w2 + exp(beta2)) is undefined there: outside the design
    table.to_csv(tmp_path / "outside.csv", index=False)
    with pytest.raises(InputError, match=r"outside model .* domain in w2 \(2 row") as err:
        private_inference(_config(tmp_path, run_id="c", data_path=tmp_path / "outside.csv"), "cpu")
    assert "5.4321" not in str(err.value)
    table.iloc[:0].to_csv(tmp_path / "empty.csv", index=False)
    with pytest.raises(InputError, match="holds no records"):
        private_inference(_config(tmp_path, run_id="d", data_path=tmp_path / "empty.csv"), "cpu")


def test_a_budget_listed_twice_is_refused():
    with pytest.raises(ValueError, match="mus must be distinct"):
        InferenceConfig(mus=[1.0, 1.0000001])


def test_the_cli_runs_a_users_csv_and_prints_json(tmp_path, capsys):
    records = simulate_repeated_measures(120, generator=torch.Generator().manual_seed(1)).numpy()
    pd.DataFrame(records, columns=["w1", "w2", "w3", "w4", "x1", "x2", "x3", "x4", "x5"]).to_csv(
        tmp_path / "records.csv", index=False)
    argv = ["infer", "--data", str(tmp_path / "records.csv"), "--mu", "3", "--runs", "1", "--steps", "20",
            "--draws", "8", "--routes", "dp_nf_vi", "--losses", "free_energy", "--no-non-private",
            "--artifacts-dir", str(tmp_path / "artifacts"), "--device", "cpu", "--json"]
    cfg = tmp_path / "privacy.yaml"
    cfg.write_text(f"privacy: {{ledger_path: {tmp_path / 'ledger.jsonl'}, reproducible_noise: true}}\n"
                   "summary_draws: 200\n")
    assert main(argv + ["--config", str(cfg)]) == 0
    summary = json.loads(capsys.readouterr().out)
    column = summary["columns"]["dp_nf_vi/free_energy/mu3"]
    assert list(summary["columns"]) == ["dp_nf_vi/free_energy/mu3"] and column["privacy"]["epsilon_prv"] > 0
    assert column["guarantee"] == ["not DP (reproducible noise)"]  # the switch is never silent
    report = Path(summary["report"]).read_text()
    assert "not DP (reproducible noise)" in report and "are not DP" in report
    assert [e.guarantee for e in read_ledger(tmp_path / "ledger.jsonl") if e.status == "released"] == ["reproducible"]
