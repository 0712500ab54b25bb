"""The budget per patient, before anything is released: who takes part in this run, and the run's membership snapshot.

A pipeline run's patients are its split's subjects. Each has spent what the releases that used them cost (the
ledger's membership snapshots; ``models/privacy/patient_accounting.py``). Under ``privacy.budget_epsilon``, the whole
run is planned here on the exact split counts (its record counts, featurizer statistics and grid, as the later
checks will reserve them) and composed with each patient's spend by their Renyi filter: a patient the run would take
past the budget is left out of it (the filter's rule: Feldman and Zrnic 2021), the split is redone without them (the
hash split keeps everyone else's split), and the plan again (fewer patients, a larger sampling rate) until it
settles. A run with no one left is refused in one line, with nothing spent. The count of patients left out is said in
the run's log; who they are stays under ``intermediate/``. The snapshot of the patients who go on is written beside
the ledger and cited by every release of the run.
"""

from __future__ import annotations

import json

import numpy as np
from prefect import task

from privehr.core.config import PipelineConfig
from privehr.core.errors import InputError
from privehr.core.records import RecordCounts
from privehr.core.run_layout import RunLayout
from privehr.io.privacy_ledger import BudgetExceeded, Ledger, short_dataset
from privehr.models.data.patient_split import SPLITS
from privehr.models.methods import grid
from privehr.models.privacy.ledger import LedgerEntry
from privehr.models.privacy.patient_accounting import PatientCurves, check_patient_budget, member_hashes, patient_curves
from privehr.tasks.record_counts import preprocessing_plan
from privehr.tasks.release_budget import pipeline_dataset_id, plan_grid
from privehr.tasks.run_directory import read_summary
from privehr.tasks.run_logging import run_logger
from privehr.tasks.split import load_manifest, split_cohort

__all__ = ["leave_out_spent_patients", "MAX_ROUNDS"]

MAX_ROUNDS = 8  # leaving patients out raises everyone else's sampling rate; it settles in one or two rounds


@task(name="patient-budget")
def leave_out_spent_patients(cohort_path: str, manifest_path: str, run_dir: str, config: PipelineConfig) -> str:
    """Leave out of the run every patient whose budget it would pass, record the run's membership snapshot, and
    return the split manifest the run goes on with."""
    run, ledger, log = RunLayout(run_dir), Ledger(config.privacy.ledger_path), run_logger()
    dataset = pipeline_dataset_id(config)
    log.info("privacy budget source: %s%s", dataset, "" if config.privacy.dataset_id else
             " (the input's resolved path; privacy.dataset_id names a source whose path may change)")
    if config.resume and run.members.exists():  # the earlier attempt's decision stands (its releases cite it)
        left_out = json.loads(run.members.read_text())["left_out"]
        return split_cohort.fn(cohort_path, config.split, run_dir, exclude=left_out) if left_out else manifest_path
    left_out: list = []
    budget = config.privacy.budget_epsilon
    past = _past(config, dataset, ledger, _subjects(manifest_path)) if budget is not None else None
    for _ in range(MAX_ROUNDS if budget is not None else 0):
        subjects = _subjects(manifest_path)
        over = _over_budget(run_dir, config, dataset, ledger, subjects, past)
        if not over:
            break
        left_out += over
        if len(over) == len(subjects):
            raise _nobody_left(run_dir, config, dataset, ledger, subjects)
        manifest_path = split_cohort.fn(cohort_path, config.split, run_dir, exclude=left_out)
    else:
        if budget is not None:
            raise InputError(f"leaving out the patients whose privacy budget this run would pass did not settle in "
                             f"{MAX_ROUNDS} rounds ({len(left_out)} left out); nothing was spent. Fewer budgets, seeds "
                             "or grid cells make the run cheaper.")
    snapshot = ledger.write_members(_subjects(manifest_path))
    run.members.write_text(json.dumps({"snapshot": snapshot, "left_out": sorted(map(_plain, left_out))}))
    if left_out:
        log.warning("privacy budget per patient: %d patient(s) left out of this run (their budget of epsilon %g is "
                    "spent); %d go on", len(left_out), budget, len(_subjects(manifest_path)))
    return manifest_path


def _plain(subject):
    return subject.item() if isinstance(subject, np.generic) else subject


def _subjects(manifest_path: str) -> list:
    manifest = load_manifest(manifest_path)
    return [s for split in SPLITS for s in manifest["subjects"][split]]


def _planned(run_dir: str, config: PipelineConfig, dataset: str) -> list[LedgerEntry]:
    """The whole run's releases, planned on the exact split counts (the later checks plan on the released ones)."""
    exact = RecordCounts(source="public", stays={s: read_summary(run_dir, "split_summary").stays(s) for s in SPLITS},
                         epsilon=None, release=None)
    entries = [e for e, _ in preprocessing_plan(run_dir, config).values()]
    entries += [e for e, _ in plan_grid(run_dir, grid(config.training, config.labels), config, exact).values()]
    return [LedgerEntry(**{**e.as_dict(), "dataset": dataset, "status": "reserved", "run_id": "pre-check",
                           "release": f"pre-check/{i}", "members": "this run"}) for i, e in enumerate(entries)]


def _hashes(ledger: Ledger, subjects: list) -> np.ndarray:
    key = ledger.key()
    return np.array([member_hashes([s], key)[0] for s in subjects], dtype=np.uint64)


def _spend(run_dir, config, dataset, ledger, subjects):
    hashes = _hashes(ledger, subjects)
    existing = [e for e in ledger.read() if e.dataset == dataset]
    snapshots = dict(ledger.members({e.members for e in existing if e.members}))
    snapshots["this run"] = np.unique(hashes)
    return hashes, existing, _planned(run_dir, config, dataset), snapshots


def _past(config, dataset, ledger, subjects) -> PatientCurves:
    """What the run's patients have spent: their curves, composed once (the rounds add the run's plan to them)."""
    existing = [e for e in ledger.read() if e.dataset == dataset]
    snapshots = ledger.members({e.members for e in existing if e.members})
    return patient_curves(existing, snapshots, config.privacy.delta, patients=np.unique(_hashes(ledger, subjects)))


def _over_budget(run_dir, config, dataset, ledger, subjects, past: PatientCurves) -> list:
    """The subjects whose spend, with the whole run's releases, would pass the budget."""
    hashes = _hashes(ledger, subjects)
    mine = past.select(np.isin(past.patients, hashes))
    spend = mine.plus(_planned(run_dir, config, dataset))
    over = set(spend.over(config.privacy.budget_epsilon).tolist())
    return [s for s, h in zip(subjects, hashes.tolist()) if h in over]


def _nobody_left(run_dir, config, dataset, ledger, subjects) -> BudgetExceeded:
    hashes, existing, planned, snapshots = _spend(run_dir, config, dataset, ledger, subjects)
    verdict = check_patient_budget(existing, planned, snapshots, snapshots["this run"],
                                   config.privacy.budget_epsilon, config.privacy.delta)
    return BudgetExceeded(f"privacy budget exceeded for dataset {short_dataset(dataset)}: {verdict.reason}, for this "
                          f"run's {len(planned)} release(s) (its record counts, statistics and grid together): every "
                          f"one of its {len(subjects)} patient(s) would pass it, so no one is left to train on. "
                          "Nothing was spent, reserved or trained. Fewer budgets, seeds or grid cells, new patients, "
                          "or a budget decision by the data custodian are the ways on.", verdict)
