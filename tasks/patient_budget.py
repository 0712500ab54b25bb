"""The budget per patient, before anything is released: who takes part in this run.

A pipeline run's patients are its split's subjects. Each has spent what every release of the ledger that used them
cost, whatever source it names (membership snapshots; ``models/privacy/patient_accounting.py``). Under the project's
budget (kept in the ledger; ``privacy.budget_epsilon`` only records a first one) a patient whose own spend, with the
releases the run is about to make, would pass it is left out of them (the split is redone without them; the hash split
keeps everyone else's split). That is the Renyi filter's rule (Feldman and Zrnic 2021), and it holds only if the
decision rests on the patient's own past and on public values, never on who else is in the data. So it is taken
twice, each time on public plans:

* ``preprocessing``, before the record counts: the counts' epsilon and the featurizer statistics' Gaussian plan are
  fixed by the configuration (no count needed);
* ``grid``, after the counts are released: the grid is planned on those noisy counts, a DP output (never on the exact
  number of stays, which one patient's presence would move, and with it everyone else's inclusion).

No decision reads the exact counts. A run in which every patient would pass the budget is refused: at the first stage
before anything is spent; at the second after its counts (released within every patient's budget), with its reserved
featurizer statistics voided. The count left out is said in the run's log (withheld where Prefect's API is not on
this machine); who they are stays under ``intermediate/members.json``.
"""

from __future__ import annotations

import json
from typing import Literal

import numpy as np
from prefect import task

from privehr.core.config import PipelineConfig
from privehr.core.run_layout import RunLayout
from privehr.io.ledger import BudgetExceeded, Ledger, held_to, short_dataset, void_open_reservations
from privehr.models.data.patient_split import SPLITS
from privehr.models.methods import grid
from privehr.models.privacy.ledger import LedgerEntry, effective_entries
from privehr.models.privacy.patient_accounting import member_hashes, patient_curves
from privehr.tasks.record_counts import preprocessing_plan
from privehr.tasks.release_budget import pipeline_dataset_id, plan_grid, planning_counts
from privehr.tasks.run_directory import ledger_run
from privehr.tasks.run_logging import exact, run_logger
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
        log.info("privacy budget: per patient, over every release of the ledger that used them, whatever its source "
                 "(this run's source label: %s)", dataset)
    if config.resume and stage in record["stages"]:  # the earlier attempt's decision stands (its releases cite it)
        left = record["left_out"]
        return split_cohort.fn(cohort_path, config.split, run_dir, exclude=left) if left else manifest_path
    budget = held_to(ledger, config.privacy.budget_epsilon, config.privacy.delta)
    left_out = list(record["left_out"])
    if budget is not None:
        subjects = _subjects(manifest_path)
        over = _over_budget(config, ledger, subjects, _planned(run_dir, config, dataset, stage), budget)
        if len(over) == len(subjects):
            if stage == "grid":  # decided on the released counts: the statistics reserved with them are not made
                void_open_reservations(ledger.path, ledger_run(run_dir), "every patient would pass the budget")
            raise _nobody_left(dataset, budget, stage)
        if over:
            left_out += over
            manifest_path = split_cohort.fn(cohort_path, config.split, run_dir, exclude=left_out)
            log.warning("privacy budget per patient: %s patient(s) left out of this run before its %s releases "
                        "(their budget of epsilon %g is spent); %s go on", exact(len(over)), stage, budget.epsilon,
                        exact(len(_subjects(manifest_path))))
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


def _over_budget(config, ledger: Ledger, subjects: list, planned: list[LedgerEntry], budget) -> list:
    """The subjects whose own spend over every release of the ledger, with ``planned`` (public plans), would pass the
    budget (each curve computed anew: admission never reads the accounting store)."""
    key = ledger.key()
    hashes = np.array([member_hashes([s], key)[0] for s in subjects], dtype=np.uint64)
    existing = effective_entries(ledger.read())
    snapshots = ledger.members({e.members for e in existing if e.members})
    past = patient_curves(existing, snapshots, budget.delta, patients=np.unique(hashes), fresh=True, budget=budget)
    over = set(past.plus(planned).over(budget.epsilon).tolist())
    return [s for s, h in zip(subjects, hashes.tolist()) if h in over]


def _nobody_left(dataset: str, budget, stage: Stage) -> BudgetExceeded:
    spent = ("Nothing was spent, reserved or trained." if stage != "grid" else
             "Its record counts are in the ledger (released within every patient's budget), its reserved featurizer "
             "statistics were voided, and nothing was trained.")
    what = {"preprocessing": "its record counts and statistics", "grid": "its grid"}[stage]
    return BudgetExceeded(f"privacy budget exceeded for dataset {short_dataset(dataset)}: every patient of this "
                          f"delivery would pass the budget of epsilon {budget.epsilon:g} with {what}, so no one is "
                          f"left to train on. {spent} Fewer budgets, seeds or grid cells, new patients, or a budget "
                          "decision by the data custodian are the ways on.", None)
