"""Budget checks: every release a run will make is planned, composed with the ledger, and reserved
before any of them is trained.

* ``check-privacy-budget`` (privehr-pipeline), before the hyperparameter search: the final fit of
  every (cell, seed) and, with ``search_budget > 1``, every DP-SGD search trial (and, with ``training.tuning: dp``,
  every trial's DP dev score: one Gaussian release each).
* ``check-synthesis-budget`` (privehr-synthesize), before any flow: every (imputation, budget, run).

Each writes ``privacy_budget.json`` (the dataset before and after, by every accountant) and returns
the reservation ids the training tasks record their releases under. A resumed run skips what its
earlier attempt finished (recorded then) and voids that attempt's reservations that were never
trained. A refusal raises before anything is reserved or trained.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import replace
from pathlib import Path

from prefect import task

from privehr.models.privacy.ledger import GUARANTEES, LedgerEntry
from privehr.core.run_layout import RunLayout
from privehr.core.config import Cell, PipelineConfig, SynthesisConfig
from privehr.core.errors import InputError
from privehr.core.specs import load_ehr_spec
from privehr.core.strict_json import strict_dumps
from privehr.io.ledger import BudgetExceeded, Ledger, reserve
from privehr.tasks.run_directory import ledger_run, read_summary
from privehr.tasks.run_logging import exact, run_logger
from privehr.models.synthesis import synthesis_jobs
from privehr.tasks.synthesis import check_imputed_targets, imputed_tables, planning_count, synthesizer_of
from privehr.models.methods import FitSpec, create_method
from privehr.models.privacy.release_plan import GaussianPlan, ReleasePlan, Reserved
from privehr.tasks.train import fit_key, saved_fit, saved_search, search_configurations, search_score_key, trial_key

__all__ = ["check_privacy_budget", "check_synthesis_budget", "pipeline_dataset_id", "synthesis_dataset_id",
           "reserve_planned", "check_delta", "check_ceiling", "evaluation_key", "search_score_key", "planning_counts",
           "plan_grid", "source_id", "run_members", "synthesis_members"]


def evaluation_key(cell: Cell) -> str:
    """The reservation key of a bundled model's DP evaluation."""
    return f"{cell.cell_id}/dp-evaluation"


# search_score_key(cell, k), the reservation key of trial k's DP dev score (``training.tuning: dp``), is defined
# beside trial_key in privehr.tasks.train (which this module imports; the search task looks its reservation up)
# and exported from here with the other reservation keys.


def planning_counts(run_dir: str, config: PipelineConfig):
    """The stays per split that plans are built from: ``record_counts.json`` (DP counts, or exact ones the run
    declared public). Never the split's exact counts behind the run's back."""
    path = RunLayout(run_dir).record_counts
    if not path.exists():
        raise RuntimeError(f"{path.name} is missing: the record counts are released before any plan is built "
                           f"(release.record_count: {config.release.record_count})")
    return read_summary(run_dir, "record_counts")


def source_id(dataset_id: str | None, path) -> str:
    """The source label of a run's releases: the steward's ``privacy.dataset_id`` (the deployments set one), else the
    input's absolute path, ``..`` folded. A label, not a budget: each patient is accounted over every release that used
    them (membership snapshots), whatever source, copy, path or symlink it came through.

    >>> source_id("mimic-nightly", "x.h5"), source_id(None, "/data/../data/x.h5")
    ('mimic-nightly', 'path:/data/x.h5')
    """
    # not resolve(): a DVC symlink's target changes nightly. A label only: whatever the source, a patient's spend
    # composes every release that used them (models/privacy/patient_accounting.py)
    return dataset_id or f"path:{os.path.normpath(Path(path).absolute())}"


def pipeline_dataset_id(config: PipelineConfig) -> str:
    """The pipeline's source: ``privacy.dataset_id``, else the MIMIC-Extract file's absolute path."""
    return source_id(config.privacy.dataset_id, config.data.hdf5_path)


def synthesis_dataset_id(run_dir: str, config: SynthesisConfig) -> str:
    """The EHR table's source: ``privacy.dataset_id``, else the table's absolute path."""
    return source_id(config.privacy.dataset_id, config.path)


def run_members(run_dir: str, config: PipelineConfig) -> str | None:
    """The run's patients (its split's subjects, after the patient-budget task left out the spent) as a membership
    snapshot in the config's ledger (content-addressed: written once, the same id every time; None without a split)."""
    path = RunLayout(run_dir).split_manifest
    if not path.exists():
        return None
    subjects = json.loads(path.read_text())["subjects"]
    return Ledger(config.privacy.ledger_path).write_members([s for part in subjects.values() for s in part])


def synthesis_members(run_dir: str, config: SynthesisConfig) -> str | None:
    """The EHR table's patients (its kept records, both parts) as a membership snapshot in the config's ledger; None
    where the spec names no id column: patients are then named by their row, which another delivery shifts, so the
    releases are charged to every patient of the source instead."""
    if load_ehr_spec(config.spec).id_column is None:
        return None
    train, test, _ = imputed_tables(run_dir, 0)
    return Ledger(config.privacy.ledger_path).write_members([*train.index, *test.index])


def _summary(run_dir: str, dataset: str, verdict, planned: dict[str, LedgerEntry], voided: int, what: str,
             refused: bool = False, out=None) -> dict:
    labels = dict(Counter(GUARANTEES[e.guarantee] for e in planned.values()))
    budget = verdict.budget
    summary = {"dataset": dataset, "what": what, "refused": refused, "voided_reservations": voided,
               "planned": len(planned), "planned_by_guarantee": labels,
               "planned_dp_releases": labels.get(GUARANTEES["dp"], 0),
               # the most spent of the run's patients, over every release of the ledger that used them: by the Renyi
               # filter at the budget's order (what a budget binds on; models/privacy/rdp_filter.py), or without a
               # budget RDP at the minimum over orders. The ledger view gives PRV and PLD beside it
               "binding_accountant": f"renyi_filter_order_{budget.order:g}" if budget else "rdp_min_over_orders",
               "dp_before_run": math.isfinite(verdict.before), "epsilon_dp_before_run": _finite(verdict.before),
               "dp_after_run": math.isfinite(verdict.after), "epsilon_dp_after_run": _finite(verdict.after),
               "delta": verdict.delta, "budget_epsilon": verdict.budget_epsilon}
    (out or RunLayout(run_dir).privacy_budget).write_text(strict_dumps(summary, indent=2))
    if not refused:
        after = (f"DP, epsilon {verdict.after:.4g} at delta {verdict.delta:.2g}" if math.isfinite(verdict.after)
                 else "not DP")
        run_logger().info("privacy budget: %d planned %s reserved (%d voided); the most spent of its patients after "
                          "the run: %s", len(planned), what, voided, exact(after))
    return summary


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def reserve_planned(run_dir: str, dataset: str, config, planned: dict[str, LedgerEntry], what: str,
                    out=None, members: str | None = None) -> dict[str, str]:
    """Reserve ``planned`` (citing the run's membership snapshot ``members``: the budget binds per patient); write
    privacy_budget.json (or ``out``) whether or not the budget admits it."""
    privacy = config.privacy
    check_ceiling(planned, privacy)
    try:
        reservations, verdict, voided = reserve(Ledger(privacy.ledger_path), dataset, ledger_run(run_dir), planned,
                                                privacy.budget_epsilon, privacy.delta, config.resume, what,
                                                members=members)
    except BudgetExceeded as refused:
        _summary(run_dir, dataset, refused.verdict, planned, 0, what, refused=True, out=out)
        raise
    _summary(run_dir, dataset, verdict, planned, voided, what, out=out)
    return reservations


def check_ceiling(planned: dict[str, LedgerEntry], privacy) -> None:
    """Refuse a planned DP release above ``privacy.epsilon_ceiling`` (a mu-GDP budget too, once converted) unless
    ``privacy.allow_above_ceiling``: nothing is reserved or trained."""
    over = [e.epsilon for e in planned.values()
            if e.guarantee == "dp" and e.epsilon is not None and e.epsilon > privacy.epsilon_ceiling]
    if over and not privacy.allow_above_ceiling:
        raise InputError(f"{len(over)} planned release(s) would have an epsilon above privacy.epsilon_ceiling "
                         f"{privacy.epsilon_ceiling:g} (the largest: {max(over):.4g}), which protects almost no one; "
                         "nothing was reserved or trained. Lower the budget, or set privacy.allow_above_ceiling: true "
                         "to make it anyway (labelled weak).")


def check_delta(delta: float, records: int) -> None:
    """delta must be well below 1/n: a delta of 1/n allows releasing one record outright."""
    if delta >= 1 / records:
        raise InputError(f"privacy.delta {delta:g} is not below one over the number of training records, so a "
                         "release could expose a record outright; choose a much smaller delta (1e-5 or less is usual)")


def _plan(plans: dict, method, spec: FitSpec, n: int) -> ReleasePlan | None:
    """The plan of ``spec`` on ``n`` records, built here once for every release with the same plan inputs (cells
    that differ only in their label or loss, the seeds of a cell): a calibration of sigma costs seconds."""
    cell = spec.cell
    key = strict_dumps([cell.method, cell.model, cell.target_epsilon, spec.hyperparameters, n], sort_keys=True)
    if key not in plans:
        plans[key] = method.plan(spec, n)
    return plans[key]


class GridReservations(dict):
    """The grid's reserved releases by key (:func:`~privehr.tasks.train.fit_key`, ``trial_key``, ``search_score_key``,
    :func:`evaluation_key`), and what each task of the grid takes of them."""

    def __init__(self, reserved: dict[str, Reserved], cells: list[Cell], training):
        super().__init__(reserved)
        self._searches = {cell.cell_id: [key for k in range(len(search_configurations(cell, training)))
                                         for key in (trial_key(cell, k), search_score_key(cell, k)) if key in self]
                          for cell in cells}

    def search(self, cell: Cell) -> dict[str, Reserved]:
        """The cell's search trials and, with ``training.tuning: dp``, their DP dev scores."""
        return {key: self[key] for key in self._searches.get(cell.cell_id, [])}

    def fits(self, cells: list[Cell], group: list[tuple[int, int]]) -> list[Reserved | None]:
        """A fit group's final fits, (cell index, seed) in order; None where an earlier attempt made it."""
        return [self.get(fit_key(cells[i], seed)) for i, seed in group]


@task(name="check-privacy-budget")
def check_privacy_budget(run_dir: str, cells: list[Cell], config: PipelineConfig) -> GridReservations:
    """Plan and reserve every release of the grid (search trials included); raise if the budget would be exceeded.

    Each plan is built here, once per release, and handed to the fit that trains by it: returns the reserved
    releases by :func:`privehr.tasks.train.fit_key` / :func:`privehr.tasks.train.trial_key` /
    :func:`search_score_key` (a DP-SGD search with ``training.tuning: dp``: each trial's noisy dev score
    histograms, one Gaussian mechanism at ``training.search_score_epsilon``, so the search composes with its
    trials and the final fit and the tuned model stays DP) / :func:`evaluation_key`."""
    counts = planning_counts(run_dir, config)
    check_delta(config.privacy.delta, counts.of("train"))
    planned = plan_grid(run_dir, cells, config, counts)
    try:
        reservations = reserve_planned(run_dir, pipeline_dataset_id(config), config,
                                       {k: e for k, (e, _) in planned.items()}, "grid release(s)",
                                       members=run_members(run_dir, config))
    except BudgetExceeded as refused:
        spent = _spent_before_the_grid(run_dir, config)
        if not spent:
            raise
        raise BudgetExceeded(f"{refused} This run released before this check: {spent}.", refused.verdict) from None
    return GridReservations({k: Reserved(reservations[k], plan) for k, (_, plan) in planned.items()}, cells,
                            config.training)


def _spent_before_the_grid(run_dir: str, config: PipelineConfig) -> str:
    """What a pipeline run has released before its grid's budget check, said exactly (the patient-budget task leaves
    out whoever the grid would take past the budget; a run that raced another lands here)."""
    said = []
    run = RunLayout(run_dir)
    if run.record_counts.exists():
        counts = read_summary(run_dir, "record_counts")
        if counts.release:
            said.append(f"its record counts (epsilon {counts.epsilon:g}, in the ledger)")
    if config.synthesis is not None:
        said.append("its DP-NF synthesis of the EHR table, recorded under that table's dataset")
    return " and ".join(said)


def plan_grid(run_dir: str, cells: list[Cell], config: PipelineConfig,
              counts) -> dict[str, tuple[LedgerEntry, ReleasePlan | None]]:
    """Every release of the grid planned on ``counts`` (key -> (ledger entry, plan)), as :func:`check_privacy_budget`
    reserves them."""
    training, privacy = config.training, config.privacy
    n_train, n_fit = counts.of("train"), counts.of("train", "dev")
    planned: dict[str, tuple[LedgerEntry, ReleasePlan | None]] = {}
    plans: dict[str, ReleasePlan | None] = {}
    for cell in cells:
        method = create_method(cell.method, training, privacy)
        chosen = saved_search(run_dir, cell, training) if config.resume else None
        defaults = method.default_hyperparameters(cell)
        if chosen is None and method.reserves_search_trials():
            # the search draws no plan parameter: every trial of a cell has the same plan, built once
            trial = FitSpec(cell, defaults, training.search_seed, "search trial")
            plan = _plan(plans, method, trial, n_train)
            scored = method.scores_search_privately()
            if scored and "search score" not in plans:  # one Gaussian plan for every trial's DP dev score
                plans["search score"] = GaussianPlan.for_epsilon(training.search_score_epsilon, privacy.delta)
            kind = "reproducible" if privacy.reproducible_noise else "dp"
            for k in range(len(search_configurations(cell, training))):
                planned[trial_key(cell, k)] = (replace(method.entry(trial, plan), what=f"search trial {k}"), plan)
                if scored:
                    score = plans["search score"]
                    planned[search_score_key(cell, k)] = (score.ledger_entry(kind, f"search score {k}"), score)
        final = FitSpec(cell, chosen or defaults)
        plan = _plan(plans, method, final, n_fit)  # the seeds of a cell share one plan (equal data and settings)
        entry = method.entry(final, plan)
        for seed in range(method.seeds()):
            if chosen is not None and saved_fit(run_dir, cell, chosen, seed, training) is not None:
                continue  # finished by an earlier attempt: already in the ledger
            planned[fit_key(cell, seed)] = (entry, plan)
        if config.release.bundles(cell.cell_id):
            if config.resume and fit_key(cell, 0) not in planned and RunLayout(run_dir).dp_evaluation(
                    cell.cell_id, 0).exists():
                continue  # its model and its DP evaluation were both made by an earlier attempt
            if method.guarantee() in ("non_private", "unproven"):
                raise InputError(f"release.include matches {cell.cell_id}, whose {cell.method} releases have no DP "
                                 "guarantee; a release bundle holds DP models only. Narrow release.include to DP-SGD "
                                 "cells (e.g. *-dp_sgd-bce-eps1), or set release.bundle: false.")
            guarantee = "reproducible" if privacy.reproducible_noise else "dp"
            evaluation = plans.setdefault("dp evaluation", GaussianPlan.for_epsilon(config.release.evaluation_epsilon,
                                                                                    privacy.delta))
            planned[evaluation_key(cell)] = (evaluation.ledger_entry(guarantee, "DP evaluation"), evaluation)
    return planned


@task(name="check-synthesis-budget")
def check_synthesis_budget(run_dir: str, config: SynthesisConfig) -> dict[str, Reserved]:
    """Plan and reserve this run's releases (flows, baselines) before any is trained; raise if over budget. Each
    flow's plan is built here, once, from the released patient count, and handed to the fit that trains by it."""
    run = RunLayout(run_dir)
    check_imputed_targets(run_dir, config)  # a target with one class: refused before anything is reserved
    n = planning_count(run_dir, config, load_ehr_spec(config.spec))  # the noisy count, released before this check
    check_delta(config.privacy.delta, n)
    kind = "reproducible" if config.privacy.reproducible_noise else "dp"
    planned: dict[str, tuple[LedgerEntry, ReleasePlan | None]] = {}
    plans: dict[str, ReleasePlan | None] = {}  # one plan per (synthesizer, budget): the imputations and runs share it
    for job in synthesis_jobs(config):
        if config.resume and run.release(job["job_id"]).exists():
            continue  # finished by an earlier attempt: already in the ledger
        synthesizer = synthesizer_of(config, job)
        key = strict_dumps([synthesizer.name, job["budget"]], sort_keys=True)
        if key not in plans:
            plans[key] = synthesizer.plan(job, n)
        plan = plans[key]
        planned[job["job_id"]] = (synthesizer.entry(job, plan, kind), plan)
    reservations = reserve_planned(run_dir, synthesis_dataset_id(run_dir, config), config,
                                   {k: e for k, (e, _) in planned.items()}, "synthesis release(s)",
                                   members=synthesis_members(run_dir, config))
    return {k: Reserved(reservations[k], plan) for k, (_, plan) in planned.items()}
