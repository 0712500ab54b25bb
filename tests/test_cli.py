import json
from pathlib import Path

import pytest

from privehr.cli import main
from privehr.models.methods import grid


def test_help_lists_every_command(capsys):
    try:
        main(["--help"])
    except SystemExit as exit_:
        assert exit_.code == 0
    out = capsys.readouterr().out
    for command in ("demo-data", "inspect", "run", "config", "synthesize", "privacy", "validate", "audit"):
        assert command in out


def test_inspect_json_on_the_real_demo_extract(capsys, real_demo_extract):
    assert main(["inspect", str(real_demo_extract), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["stays"] == 84 and summary["variables"] == 93


def test_demo_data_then_inspect(tmp_path, capsys):
    out = tmp_path / "x.h5"
    assert main(["demo-data", "mimic", "--out", str(out), "--stays", "40", "--seed", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stays"] == 40
    assert main(["demo-data", "mimic", "--out", str(out), "--stays", "40"]) == 2  # never overwrite silently
    assert "--force" in capsys.readouterr().err
    assert main(["inspect", str(out)]) == 0
    assert "stays: 40" in capsys.readouterr().out


def test_errors_are_one_clear_message(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "missing.h5"), "--json"]) == 2
    captured = capsys.readouterr()
    assert "privehr demo-data mimic" in json.loads(captured.out)["error"]
    assert "Traceback" not in captured.err


def test_config_json_applies_overrides(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("split: {seed: 9}\nlabels: [mort_icu]\n")
    assert main(["config", "--config", str(cfg), "--data", "x.h5", "--json"]) == 0
    resolved = json.loads(capsys.readouterr().out)
    assert resolved["split"]["seed"] == 9 and resolved["labels"] == ["mort_icu"]
    assert resolved["data"]["hdf5_path"] == "x.h5"
    cfg.write_text("split: {train: 2}\n")
    assert main(["config", "--config", str(cfg)]) == 2


def test_privacy_ledger_command_shows_not_dp_and_the_dp_only_total_in_strict_json(tmp_path, capsys):
    from privehr.models.privacy.accounting import epsilon_spent
    from privehr.models.privacy.ledger import LedgerEntry
    from privehr.io.ledger import Ledger

    ledger = tmp_path / "ledger.jsonl"
    sgd = epsilon_spent(1.0, 0.05, 200, 1e-5)
    with Ledger(ledger).transaction() as tx:
        tx.append([LedgerEntry("abc", "m1", "dp", 0.5, 1e-6), LedgerEntry("abc", "m2", "dp", 0.25, 1e-6),
                   LedgerEntry("abc", "s1", "dp_sgd", sgd.epsilon, 1e-5, 1.0, 0.05, 200),
                   LedgerEntry("abc", "m3", "expm_nf", 2.0), LedgerEntry("abc", "m4", "non_private")])
    assert "Infinity" not in ledger.read_text() and "NaN" not in ledger.read_text()
    assert main(["privacy", "ledger", "--ledger", str(ledger), "--json"]) == 0
    out = capsys.readouterr().out
    (dataset,) = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in --json output"))["datasets"]
    assert dataset["dp"] is False and dataset["epsilon"] is None and dataset["guarantee"] == "not DP"
    assert dataset["epsilon_other_basic"] == 0.75 and dataset["unproven_epsilon_tilde"] == [2.0]
    assert dataset["epsilon_dp"] == pytest.approx(0.75 + sgd.epsilon, rel=0.02)
    assert dataset["epsilon_dp_pld"] <= dataset["epsilon_dp_rdp"]
    assert main(["privacy", "ledger", "--ledger", str(ledger)]) == 0
    out = capsys.readouterr().out
    assert "as if every release of this source had used every patient: NOT DP" in out
    assert "1 release(s) not DP (non-private)" in out
    assert "DP releases alone (DP-only total): epsilon" in out and "no proven guarantee" in out


def test_privacy_convert_reproduces_su_2023(capsys):
    assert main(["privacy", "convert", "--sigma", "7.36", "--sample-rate", "0.5", "--steps", "8000", "--delta", "0.01",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert round(out["mu"], 2) == 6.10 and round(out["epsilon_gdp"]) == 32 and out["epsilon_prv"] <= out["epsilon_rdp"]
    assert main(["privacy", "convert", "--mu", "1.49", "--sample-rate", "0.5", "--steps", "8000"]) == 0
    assert "noise multiplier sigma: 30.02" in capsys.readouterr().out
    assert main(["privacy", "convert", "--sigma", "1", "--sample-rate", "2", "--steps", "10", "--json"]) == 2
    assert "sample_rate" in json.loads(capsys.readouterr().out)["error"]


def test_synthesize_and_run_name_a_missing_ehr_table(tmp_path, capsys):
    assert main(["synthesize", "--data", str(tmp_path / "none.csv"), "--json"]) == 2
    assert "privehr demo-data ehr" in json.loads(capsys.readouterr().out)["error"]
    extract = tmp_path / "x.h5"
    assert main(["demo-data", "mimic", "--out", str(extract), "--stays", "40"]) == 0
    capsys.readouterr()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"synthesis: {{path: {tmp_path / 'none.csv'}}}\n")
    assert main(["run", "--config", str(cfg), "--data", str(extract), "--no-dvc", "--json"]) == 2
    assert "--no-synthesis" in json.loads(capsys.readouterr().out)["error"]


def test_validate_of_a_missing_file_is_one_message_with_status_2_and_no_run_directory(tmp_path, capsys):
    artifacts = tmp_path / "artifacts"
    assert main(["validate", str(tmp_path / "missing.h5"), "--artifacts-dir", str(artifacts), "--json"]) == 2
    captured = capsys.readouterr()
    assert "delivery not found" in json.loads(captured.out)["error"] and "Traceback" not in captured.err
    assert not artifacts.exists()


def test_invalid_yaml_is_one_message_and_input_errors_leave_no_traceback(tmp_path, capsys, caplog):
    bad = tmp_path / "bad.yaml"
    bad.write_text("split: {seed: 9\nlabels: [mort_icu\n")
    for argv in (["config", "--config", str(bad)], ["infer", "--config", str(bad)],
                 ["synthesize", "--config", str(bad)]):
        assert main(argv + ["--json"]) == 2
        captured = capsys.readouterr()
        assert "is not valid YAML" in json.loads(captured.out)["error"] and "Traceback" not in captured.err


def test_input_error_log_records_lose_their_traceback_unless_debug(capsys):
    import logging

    from privehr.cli.app import _input_errors_without_tracebacks
    from privehr.core.errors import InputError

    def record():
        try:
            raise InputError("bad input")
        except InputError:
            return logging.getLogger("prefect.test").makeRecord("prefect.test", logging.ERROR, __file__, 1, "failed",
                                                                (), __import__("sys").exc_info())

    with _input_errors_without_tracebacks(debug=False):
        assert record().exc_info is None
    with _input_errors_without_tracebacks(debug=True):
        assert record().exc_info is not None
    assert record().exc_info is not None  # restored after the command


def test_a_server_that_does_not_start_in_time_is_one_message_naming_prefect_api_url(monkeypatch, capsys):
    from privehr.cli import app

    def slow_server(args):
        raise RuntimeError("Timed out while attempting to connect to ephemeral Prefect API server.")

    parser = app.build_parser()
    monkeypatch.setattr(app, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["inspect"].set_defaults(func=slow_server)
    assert main(["inspect", "x.h5", "--json"]) == 2
    captured = capsys.readouterr()
    assert "PREFECT_API_URL" in json.loads(captured.out)["error"] and "Traceback" not in captured.err
    assert "trying once more" in captured.err

    calls = []

    def slow_once(args):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("Timed out while attempting to connect to ephemeral Prefect API server.")
        return 0

    parser._subparsers._group_actions[0].choices["inspect"].set_defaults(func=slow_once)
    assert main(["inspect", "x.h5"]) == 0 and len(calls) == 2  # the retry succeeded


def test_serve_names_a_missing_artifacts_directory_and_a_busy_port(tmp_path, capsys):
    import socket

    assert main(["serve", "--artifacts-dir", str(tmp_path / "none"), "--json"]) == 2
    assert "is not a directory" in json.loads(capsys.readouterr().out)["error"]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["serve", "--artifacts-dir", str(tmp_path), "--port", str(port), "--json"]) == 2
    assert "--port" in json.loads(capsys.readouterr().out)["error"]


@pytest.mark.parametrize("host, warned", [("0.0.0.0", True), ("127.0.0.1", False), ("localhost", False),
                                          ("127.0.0.2", False)])
def test_serve_beyond_loopback_warns_in_one_line_how_to_keep_the_reports_local(host, warned, tmp_path, capsys,
                                                                               monkeypatch):
    from privehr.cli import serve
    from privehr.io.pages import serve_artifacts

    def bound_then_stopped(root, host, port):  # bind as the command would, then Ctrl-C at once
        server = serve_artifacts(root, host, port)
        server.serve_forever = lambda: (_ for _ in ()).throw(KeyboardInterrupt)
        return server

    monkeypatch.setattr(serve, "serve_artifacts", bound_then_stopped)
    assert main(["serve", "--artifacts-dir", str(tmp_path), "--host", host, "--port", "0", "--json"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("privehr: warning:")]
    if warned:
        assert len(warnings) == 1 and "reachable from the network" in warnings[0]
        assert "--host 127.0.0.1" in warnings[0]
    else:
        assert warnings == []


def test_every_profile_survives_its_own_config_json():
    """A run's config.json is read back by --resume and by privehr audit: the demo profile (with its synthesis
    subflow) once could not be, because every field of synthesis.privacy is set in the saved JSON."""
    from privehr.core.config import PROFILES, PipelineConfig, load_config

    for profile in PROFILES:
        config = load_config(None, profile)
        for privacy in ({}, {"budget_epsilon": 5.0, "delta": 1e-6}):
            saved = config.model_copy(update={"privacy": config.privacy.model_copy(update=privacy)})
            assert PipelineConfig.model_validate_json(saved.model_dump_json()) == saved, profile
    with pytest.raises(ValueError, match="synthesis.privacy.budget_epsilon"):
        PipelineConfig.model_validate({"synthesis": {"path": "x.csv", "privacy": {"budget_epsilon": 3}}})


def test_grud_expm_nf_cells_are_in_the_full_profile_only():
    """At demo scale GRU-D's ExpM+NF flow stayed at one point (the same AUROC at every eps~): the demo grid leaves
    those cells out, the full profile (300 steps, 16 draws) keeps them, and expm_nf.models selects them."""
    from privehr.core.config import load_config

    def expm_models(config):
        return {c.model for c in grid(config.training, config.labels) if c.method == "expm_nf"}

    demo, full = load_config(None, "demo"), load_config(None, "full")
    assert expm_models(demo) == {"logistic_regression"} and expm_models(full) == {"logistic_regression", "grud"}
    assert {c.model for c in grid(demo.training, demo.labels) if c.method == "dp_sgd"} == {"logistic_regression", "grud"}
    chosen = load_config(None, "demo", **{"training.expm_nf.models": ["grud"]})
    assert expm_models(chosen) == {"grud"}


def test_the_ledger_follows_artifacts_dir_unless_it_is_set(tmp_path, monkeypatch):
    from privehr.core.config import PipelineConfig, SynthesisConfig
    from privehr.core.inference_config import InferenceConfig

    repo = Path(__file__).resolve().parents[1]
    monkeypatch.delenv("PRIVEHR_LEDGER", raising=False)
    for config_type in (SynthesisConfig, PipelineConfig, InferenceConfig):
        assert config_type(artifacts_dir="/elsewhere").privacy.ledger_path == Path("/elsewhere/privacy_ledger.jsonl")
        # the default is the project's, whatever the working directory (a subdirectory, or outside the checkout)
        for cwd in (repo, repo / "tests", tmp_path):
            monkeypatch.chdir(cwd)
            assert config_type().privacy.ledger_path == repo / "artifacts" / "privacy_ledger.jsonl"
        monkeypatch.setenv("PRIVEHR_LEDGER", str(tmp_path / "one.jsonl"))
        assert config_type(artifacts_dir="/elsewhere").privacy.ledger_path == tmp_path / "one.jsonl"
        monkeypatch.delenv("PRIVEHR_LEDGER")
        chosen = config_type(artifacts_dir="/elsewhere", privacy={"ledger_path": "/steward/ledger.jsonl"})
        assert chosen.privacy.ledger_path == Path("/steward/ledger.jsonl")
    pipeline = PipelineConfig(artifacts_dir="/runs", synthesis={"artifacts_dir": "/other"})
    assert pipeline.synthesis_run("/runs/r1").privacy.ledger_path == Path("/runs/privacy_ledger.jsonl")
    # a saved config (every field set) loads again as it was
    again = PipelineConfig.model_validate(pipeline.model_dump(mode="json"))
    assert again.privacy.ledger_path == pipeline.privacy.ledger_path


@pytest.mark.parametrize("argv", [["config", "--schema"], ["config", "--json"], ["--help"]])
def test_a_closed_pipe_ends_the_command_quietly(argv):
    """`privehr config --json | head`: the reader goes away; the command ends with status 0 and no traceback."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "privehr", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(10)  # what head -c 10 takes, then the reader is gone
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_options_of_one_load_config_never_reach_the_next():
    """Dotted overrides were written into the profile's own nested dicts: a process's next configuration (a worker's
    next run) inherited them."""
    from privehr.core.config import load_config

    load_config(None, "demo", **{"training.expm_nf.models": ["grud"], "synthesis.mice.m": 7})
    again = load_config(None, "demo")
    assert again.training.expm_nf.models == ["logistic_regression"] and again.synthesis.mice.m == 2


def test_a_method_or_synthesizer_no_module_registered_is_one_line_before_anything_is_read(tmp_path, small_extract,
                                                                                           capsys):
    """Names are looked up, not declared (issue 58): a mistyped one is refused in one line before Prefect starts and
    before the ledger holds anything (a review found the synthesizer's refused only after the counts were spent)."""
    ledger = tmp_path / "ledger.jsonl"
    for section in ({"training": {"methods": ["dp_sgdd"]}}, {"synthesis": {"path": str(small_extract),
                                                                           "synthesizers": ["mafx"]}}):
        cfg = tmp_path / "cfg.json"
        cfg.write_text(json.dumps({"data": {"hdf5_path": str(small_extract)}, "versioning": {"dvc": False},
                                   "privacy": {"ledger_path": str(ledger)}, **section}))
        assert main(["run", "--config", str(cfg), "--artifacts-dir", str(tmp_path / "artifacts")]) == 2
        err = capsys.readouterr().err
        assert "unknown" in err and ("dp_sgdd" in err or "mafx" in err) and "\n" not in err.strip()
        assert not ledger.exists() or ledger.read_text() == ""
    assert main(["audit", str(tmp_path), "--mechanisms", "nope"]) == 2
    assert "unknown training method 'nope'" in capsys.readouterr().err
