"""The zoo of bad inputs: each documented bad input, through the console command as a user runs it (in its own process
against one Prefect server where it gets that far): the exit status, exactly one message line with its key words, no traceback, the raw
input byte-identical, no value of the input or bound of its spec (planted canaries) in stdout, stderr or any table
of Prefect's database, nothing written outside <artifacts>/<run> (the run id cannot leave it), the ledger unchanged
and every file a run wrote owner-only (0600, directories 0700)."""

import hashlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import yaml

from privehr.cli import main
from privehr.simulate.severity_simulator import simulate_extract
from privehr.resources import mimic_extract_variables
from privehr.io.demo_data import write_demo_ehr, write_extract
from privehr.io.permissions import private_umask
from privehr.io.ledger import Ledger, read_ledger, reserve

from oracles import servers
from privehr.models.privacy.ledger import LedgerEntry

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


CANARY_LOW, CANARY_HIGH = "1731.2468", "173.2468"  # a spec's bounds (private): never in a message

SPEC = {"name": "zoo", "id_column": "pid", "public_patient_count": True,
        "attributes": [{"name": "age", "kind": "integer", "valid_low": 0, "valid_high": 120},
                       {"name": "hr", "kind": "numeric", "valid_low": 20, "valid_high": 250},
                       {"name": "sex", "kind": "binary", "categories": ["f", "m"]},
                       {"name": "died", "kind": "binary"}],
        "targets": {"classification": "died"}}


def _table(path: Path, n: int = 600, **columns) -> Path:
    """A 600-patient table of the shape of the issue's (id, age, hr, sex, died), the canary as one heart rate."""
    rng = np.random.default_rng(5)
    frame = pd.DataFrame({"pid": [f"p{i:04d}" for i in range(n)], "age": rng.integers(20, 90, n),
                          "hr": rng.normal(80, 10, n).round(1), "sex": rng.choice(["f", "m"], n),
                          "died": rng.integers(0, 2, n)})
    frame["hr"] = frame["hr"].astype(str)
    frame.loc[3, "hr"] = CANARY_VALUE
    for name, make in columns.items():
        frame[name] = make(frame)
    frame.to_csv(path, index=False)
    return path


def _spec(path: Path, **changes) -> Path:
    spec = json.loads(json.dumps(SPEC))
    for name, change in changes.items():
        spec = change(spec)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _no_categories_for_died(spec):
    spec["attributes"][3].pop("categories", None)
    return spec


def _hr_twice(spec):
    spec["attributes"].append(dict(spec["attributes"][1]))
    return spec


def _bounds_reversed(spec):
    spec["attributes"][1] |= {"valid_low": float(CANARY_LOW), "valid_high": float(CANARY_HIGH)}
    return spec


def _code_execution(spec):  # the payload: it would write "pwned" in the command's (empty) working directory
    spec["derived"] = [{"name": "x", "expression": 'age.__class__.__init__.__globals__["sys"].modules["os"]'
                                                   '.system("id > pwned") + age'}]
    return spec


def _hr_low_nan(spec):
    spec["attributes"][1]["valid_low"] = float("nan")  # YAML .nan
    return spec


def _hr_high_inf(spec):
    spec["attributes"][1]["valid_high"] = float("inf")  # YAML .inf
    return spec


def _tampered_ledger(home: Path) -> None:
    """A ledger with two releases, the second's epsilon edited down by hand."""
    path = home / "artifacts" / "privacy_ledger.jsonl"
    ledger = Ledger(path)
    ledger.check_writable()
    reserve(ledger, "zoo", "r0", {k: LedgerEntry("", "", "dp", epsilon=4.0, what=k) for k in "ab"}, None, 1e-5,
            False, "releases")
    path.write_text(path.read_text().replace('"epsilon": 4.0', '"epsilon": 0.4', 1))


def _text_file(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


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
        **_own_table_cases(tmp, run),
    }


def _own_table_cases(tmp: Path, run: list[str]) -> dict:
    """The issue's inputs: a 600-patient table through `synthesize` (MST, epsilon 1, one release) and a demo
    extract through `run`; each case (argv, raw input, exit status, words)."""
    table, spec = _table(tmp / "zoo.csv"), _spec(tmp / "zoo.yaml")
    synth = ["synthesize", "--data", "{input}", "--spec", str(spec), "--synthesizers", "mst", "--epsilon", "1",
             "--m", "1", "--runs", "1", "--releases", "1", "--no-non-private"]
    eps = lambda value: [a if a != "1" or i != synth.index("--epsilon") + 1 else value  # noqa: E731
                         for i, a in enumerate(synth)]
    bad_config = tmp / "bad-settings.yaml"
    bad_config.write_text("privacy: {delta: tiny, budget_epsilon: 3}\n")
    settings = {name: _text_file(tmp / f"settings-{name}.yaml", text.encode()) for name, text in {
        "twice": "privacy:\n  budget_epsilon: 1\n  budget_epsilon: 2\n", "privacy": "privacy: 5\n",
        "mice": "mice: 3\n", "data": "data: 5\n"}.items()}
    spec_twice = _text_file(tmp / "key-twice.yaml", (_spec(tmp / "key-twice.yaml").read_text()
                                                     + "min_rows: 1\nmin_rows: 5\n").encode())
    spec_lines = len(spec_twice.read_text().splitlines())
    h5 = _extract(tmp / "ok.h5")
    keyless = tmp / "keyless.h5"
    pd.DataFrame({"a": [1.0]}).to_hdf(keyless, key="other")
    truncated = _text_file(tmp / "truncated.h5", h5.read_bytes()[:4096])
    rows = table.read_text().splitlines()
    return {
        # 1. run ids that would leave artifacts/ (the pattern once accepted names made only of dots)
        "run_id_dotdot_resume": (synth + ["--run-id", "..", "--resume"], table, 2, "not a run id"),
        "run_id_dot": (run + ["--data", "{input}", "--run-id", "."], h5, 2, "not a run id"),
        "run_id_dots": (synth + ["--run-id", "..."], table, 2, "not a run id"),
        "run_id_path": (synth + ["--run-id", "a/../../b"], table, 2, "not a run id"),
        # 2. a table the quarantine empties: yes/no in a binary column without categories
        "quarantined_whole": (synth[:4] + [str(_spec(tmp / "nocat.yaml", d=_no_categories_for_died))] + synth[5:],
                              _table(tmp / "yesno.csv", died=lambda f: np.where(f["died"] == 1, "yes", "no")), 2,
                              "max_quarantined_share"),
        # 3. a target with one class
        "one_class_target": (synth, _table(tmp / "oneclass.csv", died=lambda f: 0), 2, "one class"),
        # 4. a spec naming an attribute twice; 5. spec and settings errors as one line, no pydantic dump
        "spec_attribute_twice": (synth[:4] + [str(_spec(tmp / "twice.yaml", d=_hr_twice))] + synth[5:], table, 2,
                                 "named more than once"),
        "spec_bounds_reversed": (synth[:4] + [str(_spec(tmp / "rev.yaml", d=_bounds_reversed))] + synth[5:],
                                 table, 2, "attribute 'hr': valid_low is above valid_high"),
        "settings_errors": (synth + ["--config", str(bad_config)], table, 2, "privacy.delta: not a number"),
        # 5a. a spec that runs code, and bounds that are not numbers: refused at validation, nothing spent
        "spec_code_execution": (synth[:4] + [str(_spec(tmp / "code.yaml", d=_code_execution))] + synth[5:], table, 2,
                                "derived column 'x': not allowed: attribute access"),
        "spec_bound_nan": (synth[:4] + [str(_spec(tmp / "nan.yaml", d=_hr_low_nan))] + synth[5:], table, 2,
                           "attribute 'hr', valid_low: not a finite number"),
        "spec_bound_inf": (synth[:4] + [str(_spec(tmp / "inf.yaml", d=_hr_high_inf))] + synth[5:], table, 2,
                           "attribute 'hr', valid_high: not a finite number"),
        # 5b. a key given twice (YAML keeps the last silently), a section given as a scalar with its option
        "config_key_twice": (synth + ["--config", str(settings["twice"])], table, 2,
                             "key 'budget_epsilon' given twice (lines 2 and 3); keep one"),
        "spec_key_twice": (synth[:4] + [str(spec_twice)] + synth[5:], table, 2,
                           f"key 'min_rows' given twice (lines {spec_lines - 1} and {spec_lines})"),
        "privacy_scalar_and_delta": (synth + ["--config", str(settings["privacy"]), "--delta", "1e-6"], table, 2,
                                     "privacy: not a mapping"),
        "mice_scalar_and_m": (synth + ["--config", str(settings["mice"])], table, 2, "mice: not a mapping"),  # --m 1
        "data_scalar_and_data": (run + ["--data", "{input}", "--config", str(settings["data"])], h5, 2,
                                 "data: not a mapping"),
        "serve_port_70000": (["serve", "--port", "70000"], None, 2, "--port 70000 is not a port"),
        "serve_port_negative": (["serve", "--port", "-1"], None, 2, "--port -1 is not a port"),
        # 9. serve on every interface: served (exit 0, stopped at once by Ctrl-C), with the one-line warning
        "serve_all_interfaces": (["serve", "--host", "0.0.0.0", "--port", "0"], None, 0,
                                 "privehr: warning: listening on 0.0.0.0, beyond this machine's loopback"),
        # 6. a ledger edited by hand: refused naming the line, before anything is read
        "ledger_tampered": (synth, table, 2, "tamper check at line 1"),
        # 8. an epsilon far above the ceiling
        "epsilon_1e9": (eps("1e9"), table, 2, "epsilon_ceiling"),
        # 8b. a mu whose epsilon is above the ceiling: refused before the patient count is spent
        "mu_above_ceiling": ([x if x != "mst" else "maf" for x in synth] + ["--mu", "6.1"], table, 2,
                             "epsilon_ceiling"),
        # already handled: epsilon 0, -1, NaN, inf; delta 0, 1, 0.5
        "epsilon_0": (eps("0"), table, 2, "epsilons[1]"),
        "epsilon_negative": (eps("-1"), table, 2, "epsilons[1]"),
        "epsilon_nan": (eps("nan"), table, 2, "epsilons[1]: not a finite number"),
        "epsilon_inf": (eps("inf"), table, 2, "epsilons[1]: not a finite number"),
        "delta_0": (synth + ["--delta", "0"], table, 2, "privacy.delta"),
        "delta_1": (synth + ["--delta", "1"], table, 2, "privacy.delta"),
        "delta_half": (synth + ["--delta", "0.5"], table, 2, "not below one over"),
        # already handled: CSVs that are not a table
        "csv_empty": (synth, _text_file(tmp / "empty.csv", b""), 2, "is empty (0 bytes)"),
        "csv_header_only": (synth, _text_file(tmp / "header.csv", (rows[0] + "\n").encode()), 2, "holds no records"),
        "csv_tab": (synth, _text_file(tmp / "tab.csv", table.read_text().replace(",", "\t").encode()), 2,
                    "tab-separated"),
        "csv_utf16": (synth, _text_file(tmp / "utf16.csv", table.read_text().encode("utf-16")), 2, "not UTF-8"),
        "csv_ragged": (synth, _text_file(tmp / "ragged.csv", "\n".join(rows[:300] + [rows[300] + ",x,y"]
                                                                       + rows[301:]).encode()), 2,
                       "cannot be parsed as CSV"),
        # already handled: HDF5 files that are not an extract
        "h5_empty": (run + ["--data", "{input}"], _text_file(tmp / "empty.h5", b""), 2, "not a readable HDF5"),
        "h5_text": (run + ["--data", "{input}"], _text_file(tmp / "notes.h5", b"subject_id,hr\n1,80\n"), 2,
                    "not a readable HDF5"),
        "h5_truncated": (run + ["--data", "{input}"], truncated, 2, "HDF5"),
        "h5_keyless": (run + ["--data", "{input}"], keyless, 2, "patients"),
        "h5_missing": (run + ["--data", str(tmp / "nowhere-at-all.h5")], None, 2, "not found"),
    }


def _artifacts_with_a_run(home: Path) -> None:
    """The artifacts directory ``serve`` serves, with one run's report."""
    (home / "artifacts" / "run-a").mkdir(parents=True)
    (home / "artifacts" / "run-a" / "report.html").write_text("<p>report</p>\n")


def _serve_stopped_at_once(monkeypatch) -> None:
    """``serve`` binds as a user's would, then stops as at Ctrl-C once it serves: the test goes on."""
    from privehr.cli import serve
    from privehr.io.pages import serve_artifacts

    def bound_then_interrupted(root, host, port):
        server = serve_artifacts(root, host, port)
        server.serve_forever = lambda: (_ for _ in ()).throw(KeyboardInterrupt)
        return server

    monkeypatch.setattr(serve, "serve_artifacts", bound_then_interrupted)


PREPARE = {"ledger_tampered": _tampered_ledger, "serve_all_interfaces": _artifacts_with_a_run}
# cases whose command would not return by itself (a server): patched in this process to stop as a user would
STOP = {"serve_all_interfaces": _serve_stopped_at_once}


FLOWS_RAN = {"semicolon", "text_labels", "short_stays", "patient_twice", "derived_source_missing", "delta_half"}
# each in its own process, against the module's Prefect server (they start flows, or fail around them)
CASES = ["semicolon", "text_labels", "short_stays", "patient_twice", "derived_source_missing", "delta_half"]
# refused before Prefect starts (settings, spec, run id, ledger, the table's or extract's layout): through main() in
# this process, one after another, a second each instead of a process and its imports each
EARLY = ["invalid_yaml", "unwritable_artifacts", "unwritable_ledger", "missing_file", "run_id_dotdot_resume", "run_id_dot", "run_id_dots", "run_id_path", "quarantined_whole", "one_class_target",
         "spec_attribute_twice", "spec_bounds_reversed", "spec_code_execution", "spec_bound_nan", "spec_bound_inf",
         "settings_errors", "config_key_twice", "spec_key_twice", "privacy_scalar_and_delta", "mice_scalar_and_m",
         "data_scalar_and_data", "serve_port_70000", "serve_port_negative", "serve_all_interfaces", "ledger_tampered",
         "epsilon_1e9",
         "mu_above_ceiling",
         "epsilon_0", "epsilon_negative", "epsilon_nan", "epsilon_inf", "delta_0", "delta_1", "csv_empty",
         "csv_header_only", "csv_tab", "csv_utf16", "csv_ragged", "h5_empty", "h5_text", "h5_truncated",
         "h5_keyless", "h5_missing"]


def _run(case: str, argv: list[str], raw: Path | None, home: Path, server: dict) -> dict:
    """The command of one case in its own directory, against the module's Prefect server (``server``: its
    PREFECT_API_URL and its database)."""
    before = hashlib.sha256(raw.read_bytes()).hexdigest() if raw else None
    home.mkdir()
    if case in PREPARE:
        with private_umask():  # as a run would have written it
            PREPARE[case](home)
    ledger = home / "artifacts" / "privacy_ledger.jsonl"
    ledger_before = ledger.read_bytes() if ledger.exists() else None
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_") and k != "PRIVEHR_LEDGER"}
    env |= {"PREFECT_HOME": str(home / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_API_URL": server["url"]}
    (home / "cwd").mkdir()  # the working directory: a run writes nothing here, whatever its run id
    argv = [a.replace("{input}", str(raw)) for a in argv] + ["--json"]
    if "--artifacts-dir" not in argv:
        argv += ["--artifacts-dir", str(home / "artifacts")]
    out = subprocess.run([sys.executable, "-m", "privehr", *argv], cwd=home / "cwd", env=env, capture_output=True,
                         text=True, timeout=600)
    return {"out": out, "before": before, "home": home, "ledger": ledger, "ledger_before": ledger_before,
            "database": server["database"]}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict:
    """Every case's command, three at a time, against one Prefect server (a server per case cost 242 s of a CI
    worker's time, most of it starting servers); its database is scanned for canaries after every case has run."""
    tmp = tmp_path_factory.mktemp("bad-input")
    cases = _cases(tmp)
    base = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_") and k != "PRIVEHR_LEDGER"}
    with servers.prefect_server(tmp / "server", base) as (env, _):
        server = {"url": env["PREFECT_API_URL"], "database": tmp / "server" / "prefect.db"}
        with ThreadPoolExecutor(3) as pool:
            futures = {case: pool.submit(_run, case, argv, raw, tmp / f"home-{case}", server)
                       for case, (argv, raw, _, _) in cases.items() if case in CASES}
            yield {case: (cases[case], future.result()) for case, future in futures.items()}


@pytest.fixture(scope="module")
def early_cases(tmp_path_factory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("bad-input-early")
    return tmp, _cases(tmp)


@pytest.mark.parametrize("case", EARLY)
def test_bad_input_refused_before_prefect_starts(case, early_cases, capsys, monkeypatch):
    tmp, cases = early_cases
    argv, raw, status, words = cases[case]
    home = tmp / f"home-{case}"
    before = hashlib.sha256(raw.read_bytes()).hexdigest() if raw else None
    home.mkdir()
    (home / "cwd").mkdir()
    if case in PREPARE:
        with private_umask():  # as a run would have written it
            PREPARE[case](home)
    ledger = home / "artifacts" / "privacy_ledger.jsonl"
    ledger_before = ledger.read_bytes() if ledger.exists() else None
    monkeypatch.chdir(home / "cwd")
    monkeypatch.delenv("PRIVEHR_LEDGER", raising=False)
    if case in STOP:
        STOP[case](monkeypatch)
    argv = [a.replace("{input}", str(raw)) for a in argv] + ["--json"]
    if "--artifacts-dir" not in argv:
        argv += ["--artifacts-dir", str(home / "artifacts")]
    # an earlier case's Prefect log records, still queued for a temporary server that has gone, are flushed (and their
    # "Error logging to API" note discarded) before this case: a console command is one process, these share one
    import logging

    from prefect.logging.handlers import APILogHandler

    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for handler in getattr(logger, "handlers", []):
            if isinstance(handler, APILogHandler):
                handler.flush()
    capsys.readouterr()
    code = main(argv)  # any exception but an input error propagates: the traceback a user would see
    out, err = capsys.readouterr()
    _check(case, status, words, raw, before, SimpleNamespace(returncode=code, stdout=out, stderr=err),
           {"home": home, "ledger": ledger, "ledger_before": ledger_before})


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_message_and_leaks_nothing(case, outcomes):
    (_, raw, status, words), run = outcomes[case]
    _check(case, status, words, raw, run["before"], run["out"], run)
    needles = [CANARY_VALUE, CANARY_VALUE.replace(".", ","), str(CANARY_SUBJECT), CANARY_LOW]
    database = run["database"]  # the module's server's: every process case's flow runs, this one's among them
    # every table as text (iterdump) and the raw bytes of the database and its write-ahead log (binary columns)
    dump = "\n".join(sqlite3.connect(database).iterdump()).encode() if database.exists() else b""
    dump += b"".join(p.read_bytes() for p in database.parent.glob("prefect.db*") if p.is_file())
    for needle in needles:
        assert needle.encode() not in dump, f"{needle} in Prefect's database"
    if case in FLOWS_RAN:
        assert b"privehr-" in dump  # positive control: flows ran on this database, and the scan read it
    if case == "delta_half":  # its run started the ledger: a fresh budget is never silent
        assert f"a NEW ledger was started at {run['ledger']}" in run["out"].stderr


def _check(case, status, words, raw, before, out, run) -> None:
    home = run["home"]
    assert out.returncode == status, out.stderr[-3000:]
    assert "Traceback" not in out.stderr + out.stdout, out.stderr[-3000:]
    assert words in out.stdout + out.stderr, out.stderr[-2000:]
    for dump in ("validation error for", "errors.pydantic.dev", "input_value"):
        assert dump not in out.stdout + out.stderr
    if status == 2:  # one message, on one line
        message = json.loads(out.stdout)["error"]
        assert message and "\n" not in message
        assert [line for line in out.stderr.splitlines() if line.startswith("privehr: error:")] == [
            f"privehr: error: {message}"], repr(out.stderr[-1500:])
    if words.startswith("privehr: warning:"):  # a warning, not an error: one line of its own, and no error line
        assert sum(line.startswith(words) for line in out.stderr.splitlines()) == 1, out.stderr[-1500:]
        assert not [line for line in out.stderr.splitlines() if line.startswith("privehr: error:")]
    if raw:
        assert hashlib.sha256(raw.read_bytes()).hexdigest() == before
    # nothing outside <artifacts>/<run> (and Prefect's own home); the working directory stays empty
    assert {p.name for p in home.iterdir()} <= {"artifacts", "prefect", "cwd"}
    assert not any((home / "cwd").iterdir())
    artifacts = home / "artifacts"
    if artifacts.exists():
        runs = [p for p in artifacts.iterdir() if p.is_dir() and p.name != "_static"]
        for path in [artifacts, *artifacts.rglob("*")]:  # owner-only, whatever the run wrote
            assert stat.S_IMODE(path.lstat().st_mode) & 0o077 == 0, (path, oct(path.lstat().st_mode))
        assert {p.name for p in artifacts.iterdir()} <= {r.name for r in runs} | {
            "_static", "privacy_ledger.jsonl", "privacy_ledger.jsonl.key", "privacy_ledger.jsonl.head"}
    if status == 2:  # the ledger unchanged: the bytes as they were, or no entry in a new one
        ledger = run["ledger"]
        if case == "delta_half":  # refused on the released noisy count (no decision reads the exact one): the count
            # is the one release, within every patient's budget
            assert [(e.status, e.what) for e in read_ledger(ledger)] == [("reserved", "patient count"),
                                                                        ("released", "patient count")]
        elif run["ledger_before"] is not None:
            assert ledger.read_bytes() == run["ledger_before"]
        elif ledger.exists():
            assert ledger.read_text() == ""
    for needle in [CANARY_VALUE, CANARY_VALUE.replace(".", ","), str(CANARY_SUBJECT), CANARY_LOW]:
        assert needle not in out.stdout and needle not in out.stderr, needle
