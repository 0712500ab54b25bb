"""The budget per patient, before anything is released: who takes part in this run.

A pipeline run's patients are its split's subjects. Each has spent what the releases that used them cost (the
ledger's membership snapshots; ``models/privacy/patient_accounting.py``). Under ``privacy.budget_epsilon`` a patient
whose own spend, with the releases the run is about to make, would pass the budget is left out of them (the split is
redone without them; the hash split keeps everyone else's split). That is a Renyi filter's rule (Feldman and Zrnic
2021), and it holds only if the decision rests on the patient's own past and on public values, never on who else is
in the data. So it is taken twice, each time on public plans:

* ``preprocessing``, before the record counts: the counts' epsilon and the featurizer statistics' Gaussian plan are
  fixed by the configuration (no count needed);
* ``grid``, after the counts are released: the grid is planned on those noisy counts, a DP output (never on the exact
  number of stays, which one patient's presence would move, and with it everyone else's inclusion).

A run the budget cannot hold for anyone is refused before its counts are spent: the whole run is planned on the exact
counts once, as a refusal to start (nothing is released, and nothing is decided for any one patient by it). The count
left out is said in the run's log; who they are stays under ``intermediate/members.json``.
"""

from __future__ import annotations

import json
from typing import Literal

import numpy as np
from prefect import task

from privehr.core.config import PipelineConfig
from privehr.core.records import RecordCounts
from privehr.core.run_layout import RunLayout
from privehr.io.ledger import BudgetExceeded, Ledger, short_dataset, source_entries
from privehr.models.data.patient_split import SPLITS
from privehr.models.methods import grid
from privehr.models.privacy.ledger import LedgerEntry
from privehr.models.privacy.patient_accounting import check_patient_budget, member_hashes, patient_curves
from privehr.tasks.record_counts import preprocessing_plan
from privehr.tasks.release_budget import pipeline_dataset_id, plan_grid, planning_counts
from privehr.tasks.run_directory import read_summary
from privehr.tasks.run_logging import run_logger
from privehr.tasks.split import load_manifest, split_cohort

__all__ = ["leave_out_spent_patients", "STAGES"]

STAGES = ("preprocessing", "grid")
Stage = Literal["preprocessing", "grid"]


@task(name="patient-budget")
def leave_out_spent_patients(cohort_path: str, manifest_path: str, run_dir: str, config: PipelineConfig,
                             stage: Stage) -> str:
    """Leave out of the run every patient whose budget the ``stage``'s releases would pass; return the split manifest
    the run goes on with."""
    run, ledger, log = RunLayout(run_dir), Ledger(config.privacy.ledger_path), run_logger()
    dataset = pipeline_dataset_id(config)
    record = json.loads(run.members.read_text()) if run.members.exists() else {"left_out": [], "stages": []}
    if stage == STAGES[0]:
        log.info("privacy budget source: %s%s", dataset, "" if config.privacy.dataset_id else
                 " (the input's absolute path; privacy.dataset_id names a source whose path may change)")
    if config.resume and stage in record["stages"]:  # the earlier attempt's decision stands (its releases cite it)
        left = record["left_out"]
        return split_cohort.fn(cohort_path, config.split, run_dir, exclude=left) if left else manifest_path
    budget = config.privacy.budget_epsilon
    left_out = list(record["left_out"])
    if budget is not None:
        subjects = _subjects(manifest_path)
        planned = _planned(run_dir, config, dataset, stage)
        over = _over_budget(config, dataset, ledger, subjects, planned)
        if len(over) == len(subjects):
            raise _nobody_left(run_dir, config, dataset, ledger, subjects, planned, stage)
        if over:
            left_out += over
            manifest_path = split_cohort.fn(cohort_path, config.split, run_dir, exclude=left_out)
            log.warning("privacy budget per patient: %d patient(s) left out of this run before its %s releases "
                        "(their budget of epsilon %g is spent); %d go on", len(over), stage, budget,
                        len(_subjects(manifest_path)))
        if stage == STAGES[0]:
            _the_run_fits_someone(run_dir, config, dataset, ledger, _subjects(manifest_path))
    run.members.write_text(json.dumps({"left_out": sorted(map(_plain, left_out)),
                                       "stages": sorted(set(record["stages"]) | {stage})}))
    return manifest_path


def _plain(subject):
    return subject.item() if isinstance(subject, np.generic) else subject


def _subjects(manifest_path: str) -> list:
    manifest = load_manifest(manifest_path)
    return [s for split in SPLITS for s in manifest["subjects"][split]]


def _entries(entries: list[LedgerEntry], dataset: str) -> list[LedgerEntry]:
    return [LedgerEntry(**{**e.as_dict(), "dataset": dataset, "status": "reserved", "run_id": "pre-check",
                           "release": f"pre-check/{i}", "members": "this run"}) for i, e in enumerate(entries)]


def _planned(run_dir: str, config: PipelineConfig, dataset: str, stage: Stage) -> list[LedgerEntry]:
    """The stage's releases, planned on public values: the configuration, and for the grid the released counts."""
    if stage == "preprocessing":
        return _entries([e for e, _ in preprocessing_plan(run_dir, config).values()], dataset)
    counts = planning_counts(run_dir, config)
    return _entries([e for e, _ in plan_grid(run_dir, grid(config.training, config.labels), config,
                                             counts).values()], dataset)


def _hashes(ledger: Ledger, subjects: list) -> np.ndarray:
    key = ledger.key()
    return np.array([member_hashes([s], key)[0] for s in subjects], dtype=np.uint64)


def _past(config, dataset, ledger, hashes):
    existing = source_entries(ledger.read(), dataset)
    snapshots = ledger.members({e.members for e in existing if e.members})
    return existing, snapshots, patient_curves(existing, snapshots, config.privacy.delta, patients=np.unique(hashes))


def _over_budget(config, dataset, ledger, subjects, planned) -> list:
    """The subjects whose own spend, with ``planned`` (public plans), would pass the budget."""
    hashes = _hashes(ledger, subjects)
    _, _, past = _past(config, dataset, ledger, hashes)
    over = set(past.plus(planned).over(config.privacy.budget_epsilon).tolist())
    return [s for s, h in zip(subjects, hashes.tolist()) if h in over]


def _the_run_fits_someone(run_dir, config, dataset, ledger, subjects) -> None:
    """A run the budget cannot hold for any of its patients is refused before its counts are spent: planned once on
    the exact counts (a refusal to start, seen by the operator who holds the data; it decides nothing for any one
    patient, and nothing is released)."""
    exact = RecordCounts(source="public", stays={s: read_summary(run_dir, "split_summary").stays(s) for s in SPLITS},
                         epsilon=None, release=None)
    whole = _entries([e for e, _ in preprocessing_plan(run_dir, config).values()]
                     + [e for e, _ in plan_grid(run_dir, grid(config.training, config.labels), config,
                                                exact).values()], dataset)
    if len(_over_budget(config, dataset, ledger, subjects, whole)) == len(subjects):
        raise _nobody_left(run_dir, config, dataset, ledger, subjects, whole, "whole")


def _nobody_left(run_dir, config, dataset, ledger, subjects, planned, stage) -> BudgetExceeded:
    hashes = _hashes(ledger, subjects)
    existing, snapshots, _ = _past(config, dataset, ledger, hashes)
    verdict = check_patient_budget(existing, planned, {**snapshots, "this run": np.unique(hashes)},
                                   np.unique(hashes), config.privacy.budget_epsilon, config.privacy.delta)
    spent = ("Nothing was spent, reserved or trained." if stage != "grid" else
             "What it released before this check (its record counts) is in the ledger, its reserved featurizer "
             "statistics count until a resumed run voids them, and nothing was trained.")
    what = {"whole": "its record counts, statistics and grid together", "preprocessing": "its record counts and "
            "statistics", "grid": "its grid"}[stage]
    return BudgetExceeded(f"privacy budget exceeded for dataset {short_dataset(dataset)}: {verdict.reason}, for this "
                          f"run's {len(planned)} release(s) ({what}): every one of its {len(subjects)} patient(s) "
                          f"would pass it, so no one is left to train on. {spent} Fewer budgets, seeds or grid "
                          "cells, new patients, or a budget decision by the data custodian are the ways on.", verdict)
