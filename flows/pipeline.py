"""privehr-pipeline: [dvc pull of missing inputs] -> ingest -> validate (GX gate) -> cohort -> split
-> features -> [privehr-synthesize subflow on the EHR table] -> search[cell] -> budget check -> fit[cell, seed]
-> ledger -> report -> version.

The flow only wires tasks; each task reads and writes files in ``artifacts/<run-id>/`` and passes
paths on, so no patient-level value enters Prefect's database or result storage. Training fans out:
one search task run per grid cell (label x model x method x loss x epsilon) and one fit task run per
cell and seed. On a CUDA device those runs carry the ``gpu`` tag, which a concurrency limit caps
(``prefect concurrency-limit create gpu 1``).
"""

from __future__ import annotations

from prefect import flow, unmapped
from prefect.task_runners import ThreadPoolTaskRunner

from flows.synthesis import synthesize_ehr
from models.device import resolve_device
from privehr.config import PipelineConfig
from tasks.cohort import build_cohort
from tasks.compute import CONCURRENT_FITS
from tasks.features import build_features
from tasks.ingest import ingest_extract
from tasks.privacy_ledger import check_privacy_budget, record_releases
from tasks.report import write_report
from tasks.run_directory import create_run_directory
from tasks.split import split_cohort
from tasks.static_imputation import impute_static_table
from tasks.train import fit_and_evaluate, search_hyperparameters
from tasks.validate import validate_delivery
from tasks.versioning import pull_inputs, version_run

__all__ = ["pipeline", "on_dask"]


@flow(name="privehr-pipeline", log_prints=False, task_runner=ThreadPoolTaskRunner(max_workers=CONCURRENT_FITS))
def pipeline(config: PipelineConfig = PipelineConfig()) -> dict:
    """Train and evaluate the grid of ``config`` on a MIMIC-Extract file; return the run summary."""
    data, training = config.data, config.training
    window = dict(window_hours=data.window_hours, gap_hours=data.gap_hours, chunk_rows=data.chunk_rows)
    run_dir = create_run_directory(config)
    if config.versioning.dvc:
        pull_inputs([str(data.hdf5_path)] + ([str(config.synthesis.path)] if config.synthesis else []))
    ingest_extract(str(data.hdf5_path), run_dir, **window)
    checks, spec = config.validation, str(config.validation.spec) if config.validation.spec else None
    report = validate_delivery(str(data.hdf5_path), run_dir, mimic_spec=spec, stop_on_critical=checks.stop_on_critical,
                               chunk_rows=checks.chunk_rows) if checks.enabled else None
    cohort = build_cohort(str(data.hdf5_path), run_dir, **window, validation_report=report, mimic_spec=spec)
    manifest = split_cohort(cohort, config.split, run_dir)
    features = build_features(cohort, manifest, run_dir)
    if config.static_imputation is not None:
        impute_static_table(str(data.hdf5_path), cohort, manifest, run_dir, config.static_imputation, spec)
    if config.synthesis is not None:  # before the grid: its own budget check stops the run before any training
        synthesize_ehr(config.synthesis_run(run_dir), config.device)

    tags = ["gpu"] if resolve_device(config.device).type == "cuda" else []
    search, fit = search_hyperparameters.with_options(tags=tags), fit_and_evaluate.with_options(tags=tags)
    cells = training.cells(config.labels)
    chosen = search.map(unmapped(features), cells, unmapped(training), unmapped(run_dir), unmapped(config.device))
    check_privacy_budget(run_dir, cells, [c.result() for c in chosen], config)  # raises before any release
    runs = [fit.submit(features, cell, chosen[i], seed, training, run_dir, config.device)
            for i, cell in enumerate(cells) for seed in range(training.seeds_for(cell))]
    rows = [r.result() for r in runs]
    record_releases(run_dir, rows, str(config.privacy.ledger_path))
    summary = write_report(run_dir, rows, training.dp_sgd.delta)
    if config.versioning.dvc:
        summary["versioning"] = version_run(run_dir, config.versioning.push)
    return summary


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
