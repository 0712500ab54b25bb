"""privehr-pipeline: [dvc pull of missing inputs] -> ingest -> validate (GX gate) -> cohort -> split
-> patient budget (who is left out) -> check labels -> record counts (DP) -> features (public or DP statistics)
-> [privehr-synthesize subflow on the EHR table] -> budget check (reserves every release) -> search[cell]
-> fit[cell, seed] (each release into the ledger as it is trained, its test predictions kept under intermediate/)
-> release bundle (DP evaluation, model card, manifest) -> report (the card first; medians, calibration, bootstrap
intervals, subgroups, report.html) -> version.

The flow only wires tasks; each task reads and writes files in ``artifacts/<run-id>/`` and passes
paths on, so no patient-level value enters Prefect's database or result storage. The ledger is proven
writable before the input is read, and the run holds its directory's lock throughout. Training fans out
(:func:`train_grid`): one search task run per grid cell (label x model x method x loss x epsilon) and one fit task
run per cell and seed, or, where a method batches (DP-SGD, ExpM+NF; ``training.batched``), one per cell family
(label x model x method x loss: its epsilons x seeds; on CPU at most 12 fits a group), trained as one batched model.
On a CUDA device those runs carry the ``gpu`` tag, which a concurrency limit caps (``prefect concurrency-limit create
gpu 1``).
"""

from __future__ import annotations

import time

from prefect import flow
from prefect.futures import wait
from prefect.task_runners import ThreadPoolTaskRunner

from privehr.flows.synthesis import synthesize_ehr
from privehr.models.device import resolve_device
from privehr.core.config import PipelineConfig
from privehr.tasks.cohort import build_cohort
from privehr.tasks.compute import CONCURRENT_FITS
from privehr.tasks.features import build_features
from privehr.tasks.patient_budget import leave_out_spent_patients
from privehr.tasks.progress import follow_fits
from privehr.tasks.record_counts import COUNTS_KEY, STATISTICS_KEY, check_preprocessing_budget, release_record_counts
from privehr.tasks.release_bundle import write_release_bundle
from privehr.tasks.ingest import ingest_extract
from privehr.tasks.release_budget import GridReservations, check_privacy_budget
from privehr.tasks.report import write_report
from privehr.tasks.run_directory import create_run_directory, run_lock
from privehr.tasks.split import check_labels, split_cohort
from privehr.tasks.stage_timing import StageClock
from privehr.tasks.static_imputation import impute_static_table
from privehr.tasks.train import batching, fit_group, group_size, search_hyperparameters
from privehr.tasks.validate import validate_delivery
from privehr.tasks.versioning import pull_inputs, version_run
from privehr.models.methods import fit_groups, get_method, grid, seeds_of
from privehr.models.synthesis import get_synthesizer
from privehr.io.permissions import private_run

__all__ = ["pipeline", "train_grid", "check_names", "on_dask"]


@flow(name="privehr-pipeline", log_prints=False, task_runner=ThreadPoolTaskRunner(max_workers=CONCURRENT_FITS))
@private_run  # umask 077: every file of the run owner-only
def pipeline(config: PipelineConfig = PipelineConfig()) -> dict:
    """Train and evaluate the grid of ``config`` on a MIMIC-Extract file; return the run summary."""
    check_names(config)  # a method or synthesizer no module registered: one line, before anything is read or spent
    data, checks, clock = config.data, config.validation, StageClock()
    window = dict(window_hours=data.window_hours, gap_hours=data.gap_hours, chunk_rows=data.chunk_rows)
    spec = str(checks.spec) if checks.spec else None
    with clock.stage("setup"):
        run_dir = create_run_directory(config)
    with run_lock(run_dir):
        if config.versioning.dvc:
            with clock.stage("dvc pull"):
                pull_inputs([str(data.hdf5_path)] + ([str(config.synthesis.path)] if config.synthesis else []))
        with clock.stage("ingest"):
            ingest_extract(str(data.hdf5_path), run_dir, **window)
        report = None
        if checks.enabled:
            with clock.stage("validate"):
                report = validate_delivery(str(data.hdf5_path), run_dir, mimic_spec=spec, chunk_rows=checks.chunk_rows,
                                           stop_on_critical=checks.stop_on_critical, pages_url=config.pages.base_url)
        with clock.stage("cohort"):
            cohort = build_cohort(str(data.hdf5_path), run_dir, **window, validation_report=report, mimic_spec=spec)
        with clock.stage("split"):  # a patient whose budget the next releases would pass is left out (the run goes on)
            manifest = check_labels(leave_out_spent_patients(cohort, split_cohort(cohort, config.split, run_dir),
                                                             run_dir, config, "preprocessing"), config.labels)
        with clock.stage("record counts"):  # before any plan: every plan is built from them
            preprocessing = check_preprocessing_budget(run_dir, config)
            release_record_counts(run_dir, config, preprocessing.get(COUNTS_KEY))
            manifest = check_labels(leave_out_spent_patients(cohort, manifest, run_dir, config, "grid"), config.labels)
        with clock.stage("features"):
            features = build_features(cohort, manifest, run_dir, config.release.featurizer, config.privacy,
                                      preprocessing.get(STATISTICS_KEY))
        if config.static_imputation is not None:
            with clock.stage("static imputation"):
                impute_static_table(str(data.hdf5_path), cohort, manifest, run_dir, config.static_imputation, spec)
        if config.synthesis is not None:  # its own budget check stops it before any flow is trained
            with clock.stage("synthesis"):
                synthesize_ehr(config.synthesis_run(run_dir), config.device)
        cells = grid(config.training, config.labels)
        with clock.stage("budget check"):
            reservations = check_privacy_budget(run_dir, cells, config)  # every release reserved, or the run stops
        rows = train_grid(features, cells, reservations, config, run_dir, clock)
        bundle = None
        if config.release.bundle:  # before the report, whose first screen is the bundle's card
            with clock.stage("release bundle"):
                bundle = write_release_bundle(run_dir, rows, config, reservations)
        summary = write_report(run_dir, rows, config.privacy, config.evaluation, config.pages, clock.seconds,
                               config.data) | {"release": bundle}
        clock.add("report", summary["stage_seconds"]["report"])
        if config.versioning.dvc:
            with clock.stage("version"):
                summary["versioning"] = version_run(run_dir, config.versioning.push)
    return summary | {"stage_seconds": clock.seconds}


def check_names(config: PipelineConfig) -> None:
    """Refuse, in one line, a training method or synthesizer that no module registered (names are looked up, not
    declared: the configuration takes any name its pattern allows)."""
    for name in config.training.methods:
        get_method(name)
    for name in (config.synthesis.synthesizers or []) if config.synthesis is not None else []:
        get_synthesizer(name)


def train_grid(features: str, cells: list, reservations: GridReservations, config: PipelineConfig, run_dir: str,
               clock: StageClock) -> list[dict]:
    """The grid's fan-out: one search task run per cell, one fit task run per fit group (a cell family's fits trained
    as one batched model where its method batches: ``training.batched``); returns the rows in the grid's order.
    On a CUDA device the task runs carry the ``gpu`` tag, which a concurrency limit caps."""
    training, device = config.training, resolve_device(config.device)
    tags = ["gpu"] if device.type == "cuda" else []
    search, fit = search_hyperparameters.with_options(tags=tags), fit_group.with_options(tags=tags)
    start = time.perf_counter()
    chosen = [search.submit(features, cell, training, config.privacy, run_dir, reservations.search(cell),
                            config.device, config.release.evaluation_bins) for cell in cells]
    groups = fit_groups(cells, training, batching(training, device), group_size(training, device), device.type)
    runs = [fit.submit(features, [cells[i] for i, _ in group], [chosen[i] for i, _ in group],
                       [seed for _, seed in group], training, config.privacy, run_dir,
                       reservations.fits(cells, group), config.device) for group in groups]
    wait(chosen)
    searched = time.perf_counter()
    clock.add("search", searched - start)  # the fits of early cells overlap it
    # k of N fits and the time left, as each group ends; a failed fit leaves the others to finish (and enter the
    # ledger) before the run stops
    follow_fits(runs, [len(group) for group in groups], start)
    clock.add("fit (after the last search)", time.perf_counter() - searched)
    done = {fit: row for group, r in zip(groups, runs) for fit, row in zip(group, r.result())}
    return [done[(i, seed)] for i, cell in enumerate(cells) for seed in range(seeds_of(cell, training))]


def on_dask(address: str | None = None, n_workers: int = 2):
    """The same flow with its task runs on a Dask cluster (prefect-dask).

    ``address`` is a running scheduler (``tcp://host:8786``) whose workers see the repository and the
    artifacts directory at the same paths; without it, a local cluster of ``n_workers`` processes.
    """
    from prefect_dask import DaskTaskRunner

    runner = DaskTaskRunner(address=address) if address else DaskTaskRunner(
        cluster_kwargs={"n_workers": n_workers, "threads_per_worker": 1, "processes": True})
    return pipeline.with_options(task_runner=runner)


if __name__ == "__main__":
    pipeline()
