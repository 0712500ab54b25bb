"""A patient is a patient (issue 54): the attacks an insider with the code and the project made on the per-patient
budget, each made again. The same patients, at their budget, under a new source name, through a copy of the file, the
copy spelled with `..`, or a symlink: refused, and no patient's spend passes the budget. A run asking for another
budget, or an audit, is held to the ledger's; a raise is the steward's recorded act. Where Prefect's API is not on
this machine, no exact count reaches the logs."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from privehr.cli import main
from privehr.core.config import AuditConfig, PipelineConfig
from privehr.core.run_layout import RunLayout
from privehr.core.errors import InputError
from privehr.flows.pipeline import pipeline
from privehr.io.demo_data import write_extract
from privehr.io.ledger import Ledger, ledger_patients, set_budget, verify_ledger
from privehr.models.privacy.patient_accounting import patient_curves, patient_spend
from privehr.models.privacy.rdp_filter import BudgetSetting
from privehr.resources import mimic_extract_variables
from privehr.simulate.severity_simulator import simulate_extract

GRID = {"validation": {"enabled": False}, "labels": ["los_3"],
        "training": {"models": ["logistic_regression"], "methods": ["dp_sgd"], "seeds": 1,
                     "dp_sgd": {"epochs": 1, "epsilons": [1.0]}}}
ORDER = 8.0


def _config(root: Path, data, run_id: str, **settings) -> PipelineConfig:
    privacy = settings.pop("privacy", {})
    return PipelineConfig.model_validate({
        **GRID, "data": {"hdf5_path": str(data)}, "artifacts_dir": str(root / "artifacts"), "run_id": run_id,
        "versioning": {"dvc": False}, "privacy": {"ledger_path": str(root / "ledger.jsonl"), **privacy},
        "release": {"bundle": False, "record_count": "dp"}, **settings})


@pytest.fixture(scope="module")
def spent(tmp_path_factory):
    """One night on 150 patients without a budget, then the steward's budget, at order 8, between one run's spend and
    two: every patient of the night is as spent as the budget allows another run."""
    root = tmp_path_factory.mktemp("spent")
    data = root / "data" / "d.h5"
    write_extract(simulate_extract(mimic_extract_variables().iloc[:20], 150, seed=4), data)
    pipeline(_config(root, data, "night-1"))
    ledger = Ledger(root / "ledger.jsonl")
    entries = ledger.read()
    snapshots = ledger.members({e.members for e in entries if e.members})
    at = BudgetSetting(3.0, 1e-5, ORDER)
    one = patient_spend(entries, snapshots, 1e-5, budget=at).epsilon.max()
    again = [e for e in entries if e.status == "reserved"]  # the night's plan, once more for everyone
    two = patient_curves(entries, snapshots, 1e-5, budget=at).plus(again).epsilon.max()
    budget = (one + two) / 2
    set_budget(ledger.path, budget, order=ORDER)
    return {"root": root, "data": data, "budget": budget, "run": root / "artifacts" / "night-1"}


def _copy_of(spent, tmp_path: Path) -> Path:
    """The spent project (its ledger and side files, the data) in ``tmp_path``: each attack on its own copy."""
    for item in spent["root"].iterdir():
        if item.name.startswith("ledger.jsonl") or item.name == "data":
            (shutil.copytree if item.is_dir() else shutil.copy2)(item, tmp_path / item.name)
    return tmp_path


ATTACKS = {  # how the same patients reach the pipeline again; the settings a run names them by
    "another_dataset_id": lambda root: (root / "data" / "d.h5", {"privacy": {"dataset_id": "hospital-db-v2"}}),
    "a_copy": lambda root: (Path(shutil.copy(root / "data" / "d.h5", root / "data" / "d_copy.h5")), {}),
    "a_dotted_path": lambda root: (Path(shutil.copy(root / "data" / "d.h5", root / "data" / "d_copy.h5")).parent
                                   / ".." / "data" / "d_copy.h5", {}),
    "a_symlink": lambda root: (_link(root / "data" / "d.h5", root / "elsewhere" / "d.h5"), {}),
}


def _link(target: Path, link: Path) -> Path:
    link.parent.mkdir()
    link.symlink_to(target)
    return link


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_the_same_patients_under_another_name_are_held_to_the_budget_they_spent(attack, spent, tmp_path, capsys):
    root = _copy_of(spent, tmp_path)
    data, settings = ATTACKS[attack](root)
    with pytest.raises(InputError, match="no one is left to train on"):
        pipeline(_config(root, data, f"again-{attack}", **settings))
    everyone = ledger_patients(root / "ledger.jsonl")
    assert everyone["patients"] > 100 and everyone["max"] <= spent["budget"]  # one total per patient, within it
    assert everyone["accountant"] == f"renyi_filter_order_{ORDER:g}" and verify_ledger(root / "ledger.jsonl")["ok"]
    assert main(["privacy", "ledger", "--ledger", str(root / "ledger.jsonl"), "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["patients"]["patients"] == everyone["patients"] and view["budget"]["order"] == ORDER
    assert all(d["patients"]["max"] <= spent["budget"] for d in view["datasets"] if d["patients"])


def test_a_run_asking_another_budget_or_none_and_an_audit_are_held_to_the_ledgers(spent, tmp_path, capsys):
    root = _copy_of(spent, tmp_path)
    ledger = root / "ledger.jsonl"
    before = ledger.read_bytes()
    raised = spent["budget"] * 2
    with pytest.raises(InputError, match="asks for a per-patient budget of epsilon .* holds the project's budget"):
        pipeline(_config(root, root / "data" / "d.h5", "raised", privacy={"budget_epsilon": raised}))
    assert ledger.read_bytes() == before  # refused before anything was spent or recorded
    # an audit of the spent run: non-private statistics of its training stays, under the ledger's budget
    audit = AuditConfig.model_validate({"run_dir": str(spent["run"]), "shadows": 4, "label": "los_3",
                                        "privacy": {"ledger_path": str(ledger)}})
    from privehr.tasks.audit import plan_audit

    with pytest.raises(InputError, match="without a DP guarantee"):
        plan_audit.fn(audit)
    assert ledger.read_bytes() == before
    # a raise is the steward's act, with a reason, in the chain
    assert main(["privacy", "budget", "--ledger", str(ledger), "--set", str(raised)]) == 2
    assert "--raise --reason" in capsys.readouterr().err
    assert main(["privacy", "budget", "--ledger", str(ledger), "--set", str(raised), "--raise", "--reason",
                 "custodian decision 2026-11-29", "--json"]) == 0
    setting = json.loads(capsys.readouterr().out)["budget"]
    assert setting | {"raised": True, "previous": spent["budget"], "order": ORDER} == setting
    assert main(["privacy", "budget", "--ledger", str(ledger), "--set", "0.5", "--order", "4"]) == 2  # order fixed
    capsys.readouterr()
    assert main(["privacy", "budget", "--ledger", str(ledger), "--set", "0.5"]) == 2  # none left at order 8
    assert "leaves no Renyi divergence to spend at order 8" in capsys.readouterr().err
    lower = round(max(1.3, spent["budget"] * 0.9), 4)
    assert main(["privacy", "budget", "--ledger", str(ledger), "--set", str(lower)]) == 0  # lowering: always
    assert Ledger(ledger).budget().epsilon == lower and verify_ledger(ledger)["ok"]
    lines = ledger.read_text().splitlines()
    assert json.loads(lines[-1])["kind"] == "budget"
    lines[-1] = json.dumps({**json.loads(lines[-1]), "epsilon": 50.0})
    ledger.write_text("\n".join(lines) + "\n")  # the budget line raised by hand: tampering, like any line
    assert not verify_ledger(ledger)["ok"]


def test_where_prefect_api_is_not_on_this_machine_no_exact_count_reaches_the_logs(small_extract, tmp_path, caplog):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from privehr.core.config import SplitConfig
    from privehr.tasks import run_logging
    from privehr.tasks.cohort import build_cohort
    from privehr.tasks.run_directory import create_run_directory
    from privehr.tasks.split import split_cohort

    for url, local in (("http://127.0.0.1:4200/api", True), ("http://localhost:4200/api", True),
                       ("http://[::1]:4200/api", True), ("https://prefect.cloud.example/api", False),
                       ("http://192.0.2.10:4200/api", False)):
        with temporary_settings({PREFECT_API_URL: url}):
            assert run_logging.prefect_api_is_local() is local
    caplog.set_level(logging.INFO)
    run_logging.warn_if_logs_leave.cache_clear()
    with temporary_settings({PREFECT_API_URL: "https://prefect.cloud.example/api"}):  # no traffic: no flow runs
        run_dir = create_run_directory.fn(PipelineConfig(artifacts_dir=tmp_path, run_id="r",
                                                         data={"hdf5_path": small_extract},
                                                         privacy={"ledger_path": tmp_path / "ledger.jsonl"}))
        cohort = build_cohort.fn(str(small_extract), run_dir)
        split_cohort.fn(cohort, SplitConfig(), run_dir)
    run_logging.warn_if_logs_leave.cache_clear()
    said = [r.getMessage() for r in caplog.records]
    assert sum("every log line of this run leaves it" in m for m in said) == 1
    counts = json.loads(RunLayout(run_dir).cohort_summary.read_text())["stays"]
    for name in ("cohort:", "split:"):
        (line,) = [m for m in said if m.startswith(name)]
        assert "withheld" in line and str(counts) not in line and not any(ch.isdigit() for ch in line.split("{")[0])
    assert np.all([str(counts) not in m for m in said])
