"""Each documented bad input, through the console command as a user runs it (its own Prefect server): the exit
status, the one-line message's key words, no traceback, the raw input byte-identical, and no value of the input
(a planted canary) in stdout, stderr, or any table of Prefect's database."""

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from privehr.simulate.severity_simulator import simulate_extract
from privehr.resources import mimic_extract_variables
from privehr.io.demo_data import write_demo_ehr, write_extract

CANARY_SUBJECT = 86420975
CANARY_VALUE = "173.2468"  # a heart rate no simulator draws


def _extract(path: Path, **patients) -> Path:
    """A simulated extract with the canary as one subject id; ``patients`` columns replaced."""
    sim = simulate_extract(mimic_extract_variables().iloc[:20], 60, seed=4)
    first = sim.patients.index[0][0]
    sim.patients, sim.vitals_labs, sim.interventions = (
        f.rename(index={first: CANARY_SUBJECT}, level="subject_id").sort_index()
        for f in (sim.patients, sim.vitals_labs, sim.interventions))
    sim.patients = sim.patients.assign(**patients)
    write_extract(sim, path)
    return path


def _ehr(path: Path, transform=None) -> Path:
    """The demo EHR table (attributes as rows) with the canary as the first patient's heart rate."""
    write_demo_ehr(path, seed=2)
    rows = [line.split(",") for line in path.read_text().splitlines()]
    for cells in rows:
        if cells[0] == "heart_rate2":
            cells[1] = CANARY_VALUE
    text = "\n".join(",".join(cells) for cells in (transform(rows) if transform else rows)) + "\n"
    path.write_text(text)
    return path


def _semicolon(path: Path) -> Path:
    _ehr(path)
    path.write_text(path.read_text().replace(",", ";").replace(".", ","))
    return path


def _no_pap_systolic(rows):
    return [[c[0]] + ["none"] * (len(c) - 1) if c[0] == "pap_systolic" else c for c in rows]


def _patient_twice(rows):
    return [c + [c[1]] for c in rows]


def _cases(tmp: Path) -> dict:
    bad_yaml = tmp / "bad.yaml"
    bad_yaml.write_text("split: {seed: 9\n")
    ledger_cfg = tmp / "ledger.yaml"
    ledger_cfg.write_text("privacy: {ledger_path: /proc/privehr-no/ledger.jsonl}\n")
    run = ["run", "--no-synthesis", "--no-dvc"]
    return {
        "semicolon": (["validate", "{input}", "--ehr-spec", "harrod_ehr"], _semicolon(tmp / "semi.csv"), 1,
                      "semicolon-separated"),
        "text_labels": (["validate", "{input}"],
                        _extract(tmp / "text.h5", mort_icu=lambda p: p["mort_icu"].astype(str)), 1, "hold text"),
        "short_stays": (run + ["--data", "{input}"], _extract(tmp / "short.h5", max_hours=20), 2,
                        "max_hours_le_30"),
        "patient_twice": (["ehr-prepare", "--data", "{input}", "--m", "1", "--iterations", "2"],
                          _ehr(tmp / "twice.csv", _patient_twice), 0, "identical to another record"),
        "derived_source_missing": (["ehr-prepare", "--data", "{input}"], _ehr(tmp / "nopap.csv", _no_pap_systolic),
                                   2, "mean_pap needs pap_systolic"),
        "invalid_yaml": (run + ["--data", "{input}", "--config", str(bad_yaml)], _extract(tmp / "y.h5"), 2,
                         "is not valid YAML"),
        "unwritable_artifacts": (run + ["--data", "{input}", "--artifacts-dir", "/proc/privehr-no"],
                                 _extract(tmp / "a.h5"), 2, "cannot create the run directory"),
        "unwritable_ledger": (run + ["--data", "{input}", "--config", str(ledger_cfg)], _extract(tmp / "l.h5"), 2,
                              "is not writable"),
        "missing_file": (["validate", str(tmp / "nowhere.h5")], None, 2, "delivery not found"),
    }


FLOWS_RAN = {"semicolon", "text_labels", "short_stays", "patient_twice", "derived_source_missing"}
CASES = ["semicolon", "text_labels", "short_stays", "patient_twice", "derived_source_missing", "invalid_yaml",
         "unwritable_artifacts", "unwritable_ledger", "missing_file"]


def _run(case: str, argv: list[str], raw: Path | None, home: Path) -> dict:
    """The command of one case in its own directory, with its own temporary Prefect server."""
    before = hashlib.sha256(raw.read_bytes()).hexdigest() if raw else None
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}  # its own temporary server
    env |= {"PREFECT_HOME": str(home / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    argv = [a.replace("{input}", str(raw)) for a in argv] + ["--json"]
    if "--artifacts-dir" not in argv:
        argv += ["--artifacts-dir", str(home / "artifacts")]
    out = subprocess.run([sys.executable, "-m", "privehr", *argv], cwd=home, env=env, capture_output=True,
                         text=True, timeout=600)
    return {"out": out, "before": before, "home": home}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict:
    """Every case's command, three at a time: each spends most of its time starting its own server, so side by side
    they take 88 s on two cores instead of 185 s one after another (the CLI retries a server that starts slowly)."""
    tmp = tmp_path_factory.mktemp("bad-input")
    cases = _cases(tmp)
    with ThreadPoolExecutor(3) as pool:
        futures = {case: pool.submit(_run, case, argv, raw, tmp / f"home-{case}")
                   for case, (argv, raw, _, _) in cases.items()}
        return {case: (cases[case], future.result()) for case, future in futures.items()}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_message_and_leaks_nothing(case, outcomes):
    (_, raw, status, words), run = outcomes[case]
    out, before = run["out"], run["before"]
    assert out.returncode == status, out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    assert words in out.stdout + out.stderr
    if status == 2:
        assert json.loads(out.stdout)["error"] and f"privehr: error: " in out.stderr
    if raw:
        assert hashlib.sha256(raw.read_bytes()).hexdigest() == before
    needles = [CANARY_VALUE, CANARY_VALUE.replace(".", ","), str(CANARY_SUBJECT)]
    database = run["home"] / "prefect" / "prefect.db"
    # every table as text (iterdump) and the raw bytes of the database and its write-ahead log (binary columns)
    dump = "\n".join(sqlite3.connect(database).iterdump()).encode() if database.exists() else b""
    dump += b"".join(p.read_bytes() for p in database.parent.glob("prefect.db*") if p.is_file())
    for needle in needles:
        assert needle not in out.stdout and needle not in out.stderr, needle
        assert needle.encode() not in dump, f"{needle} in Prefect's database"
    if case in FLOWS_RAN:
        assert b"privehr-" in dump  # positive control: the flow ran on this database, and the scan read it
