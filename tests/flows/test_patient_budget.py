"""The budget per patient across nightly deliveries of a growing database (issue 38's acceptance): a run on D, then on
D plus new admissions at the same source; under the steward's budget between one and two runs' spend, the second run
trains on the new patients alone and says so; a third, with no one left, is refused within every patient's budget."""

import dataclasses
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from privehr.core.config import PipelineConfig
from privehr.core.errors import InputError
from privehr.flows.pipeline import pipeline
from privehr.io.demo_data import write_extract
from privehr.io.ledger import Ledger, ledger_patients, ledger_totals, set_budget, verify_ledger
from privehr.models.privacy.patient_accounting import member_hashes, patient_curves, patient_spend
from privehr.models.privacy.rdp_filter import BudgetSetting, epsilon_at, pure_dp_rdp
from privehr.resources import mimic_extract_variables
from privehr.simulate.severity_simulator import simulate_extract

# los_3: both classes in every split of 150 new stays alone (mort_icu's few deaths would not be)
GRID = {"validation": {"enabled": False}, "labels": ["los_3"],
        "training": {"models": ["logistic_regression"], "methods": ["dp_sgd"], "seeds": 1,
                     "dp_sgd": {"epochs": 1, "epsilons": [1.0]}}}


def _deliveries(tmp_path: Path):
    """The nightly file: night 1 holds the first 150 subjects, night 2 all 300 (150 admitted). Returns the path it
    will hold, and the subjects of each night (night 1's written now)."""
    sim = simulate_extract(mimic_extract_variables().iloc[:20], 300, seed=4)
    subjects = sorted(set(sim.patients.index.get_level_values("subject_id")))
    first = set(subjects[:150])
    path = tmp_path / "data" / "all_hourly_data.h5"

    def night(keep):
        kept = {name: frame[frame.index.get_level_values("subject_id").isin(keep)]
                for name in ("patients", "vitals_labs", "interventions") for frame in [getattr(sim, name)]}
        write_extract(dataclasses.replace(sim, **kept), path)

    night(first)
    return path, first, set(subjects), night


def _config(tmp_path, extract, run_id, **privacy) -> PipelineConfig:
    return PipelineConfig.model_validate({
        **GRID, "data": {"hdf5_path": str(extract)}, "artifacts_dir": str(tmp_path / "artifacts"), "run_id": run_id,
        "versioning": {"dvc": False}, "privacy": {"ledger_path": str(tmp_path / "ledger.jsonl"), **privacy},
        "release": {"bundle": False, "record_count": "dp"}})


def _spend(tmp_path, subjects, budget=None) -> np.ndarray:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    entries = ledger.read()
    snapshots = ledger.members({e.members for e in entries if e.members})
    hashes = np.array([member_hashes([s], ledger.key())[0] for s in sorted(subjects)], dtype=np.uint64)
    order = np.argsort(hashes)
    spend = patient_spend(entries, snapshots, 1e-5, patients=hashes[order], budget=budget)
    out = np.empty(len(hashes))
    out[order] = spend.epsilon
    return out


def _trained(run_dir: Path) -> set:
    """The subjects a run's split kept (the cohort drops short stays)."""
    manifest = json.loads((run_dir / "intermediate" / "split_manifest.json").read_text())
    return {s for part in manifest["subjects"].values() for s in part}


def test_a_growing_source_accounts_each_patient_and_leaves_out_those_whose_budget_is_spent(tmp_path, caplog):
    path, night1, everyone, night = _deliveries(tmp_path)
    pipeline(_config(tmp_path, path, "night-1"))
    (total,) = ledger_totals(tmp_path / "ledger.jsonl")
    assert total.dataset == f"path:{path.absolute()}"  # the source's label is the input's path
    run1 = _trained(tmp_path / "artifacts" / "night-1")
    assert run1 <= night1 and len(run1) > 100
    at = BudgetSetting(3.0, 1e-5, 8.0)  # the steward's order
    one_run = _spend(tmp_path, run1, at)
    assert np.allclose(one_run, one_run[0]) and one_run[0] > 0  # everyone in run 1 took part in every release
    assert total.patients["patients"] == len(run1)
    assert np.all(_spend(tmp_path, everyone - run1) == 0)  # not admitted yet, or not in the cohort: nothing spent

    night(everyone)  # night 2: the same file, 150 patients admitted
    ledger = Ledger(tmp_path / "ledger.jsonl")
    entries = ledger.read()
    snapshots = ledger.members({e.members for e in entries if e.members})
    again = [e for e in entries if e.status == "reserved"]  # the night's plan, once more for everyone
    two_runs = patient_curves(entries, snapshots, 1e-5, budget=at).plus(again).epsilon.max()
    budget = (one_run[0] + two_runs) / 2  # between one and two runs' spend at the filter's order
    set_budget(ledger.path, budget, order=8.0)
    caplog.set_level(logging.INFO)
    pipeline(_config(tmp_path, path, "night-2"))  # no budget_epsilon: the ledger's binds
    run2 = _trained(tmp_path / "artifacts" / "night-2")
    record = json.loads((tmp_path / "artifacts" / "night-2" / "intermediate" / "members.json").read_text())
    assert set(record["left_out"]) == run1  # everyone who spent a run's worth
    assert run2 and run2 <= everyone - night1  # trained on the new patients alone
    said = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(said) == 1 and f"{len(run1)} patient(s) left out" in said[0] and f"{len(run2)} go on" in said[0]
    # left out of the grid: only the record counts (epsilon 0.1, pure DP: min(0.1, alpha 0.1^2 / 2) in RDP), released
    # before the grid was planned on them
    by_hand = patient_curves(entries, snapshots, 1e-5, budget=at).rdp.max() + pure_dp_rdp(0.1, [8.0])
    assert np.allclose(_spend(tmp_path, run1, at), epsilon_at([by_hand], [8.0], 1e-5)[0])
    admitted = _spend(tmp_path, run2, at)
    assert np.all(admitted > 0) and np.all(admitted <= budget)  # started from zero, within the budget
    (total,) = ledger_totals(tmp_path / "ledger.jsonl")
    assert total.patients["patients"] == len(run1 | run2) and total.patients["max"] <= budget
    assert total.patients["reached_budget"] == 0 and total.patients["accountant"] == "renyi_filter_order_8"
    # the source as if every release had used every patient overstates: both runs' total, above anyone's (by RDP)
    assert total.epsilon_dp_rdp > _spend(tmp_path, run1 | run2).max()
    assert verify_ledger(tmp_path / "ledger.jsonl")["ok"]

    with pytest.raises(InputError, match="no one is left to train on") as refused:
        pipeline(_config(tmp_path, path, "night-3", budget_epsilon=budget))  # the ledger's budget, asked: the same
    assert "\n" not in str(refused.value)
    assert ledger_patients(tmp_path / "ledger.jsonl")["max"] <= budget  # a refusal spends within every budget
