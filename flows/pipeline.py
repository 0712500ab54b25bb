"""privehr-pipeline: ingest -> cohort -> split -> features -> train -> evaluate -> report -> version.

The flow only wires tasks; each task reads and writes files in ``artifacts/<run-id>/`` and passes
paths on, so no patient-level value enters Prefect's database or result storage.
"""

from __future__ import annotations

from prefect import flow

from privehr.config import PipelineConfig
from tasks.cohort import build_cohort
from tasks.evaluate import evaluate_logistic_regression
from tasks.features import build_features
from tasks.ingest import ingest_extract
from tasks.report import write_report
from tasks.run_directory import create_run_directory
from tasks.split import split_cohort
from tasks.train import train_logistic_regression
from tasks.versioning import version_run

__all__ = ["pipeline"]


@flow(name="privehr-pipeline", log_prints=False)
def pipeline(config: PipelineConfig = PipelineConfig()) -> dict:
    """Train and evaluate the models of ``config`` on a MIMIC-Extract file; return the run summary."""
    data = config.data
    window = dict(window_hours=data.window_hours, gap_hours=data.gap_hours, chunk_rows=data.chunk_rows)
    run_dir = create_run_directory(config)
    ingest_extract(str(data.hdf5_path), run_dir, **window)
    cohort = build_cohort(str(data.hdf5_path), run_dir, **window)
    manifest = split_cohort(cohort, config.split, run_dir)
    features = build_features(cohort, manifest, run_dir)
    models = {label: train_logistic_regression.submit(features, label, config.logistic_regression, run_dir,
                                                      config.device)
              for label in config.labels}
    metrics = [evaluate_logistic_regression.submit(features, models[label], label) for label in config.labels]
    summary = write_report(run_dir, [m.result() for m in metrics])
    if config.versioning.dvc:
        summary["versioning"] = version_run(run_dir, config.versioning.push)
    return summary


if __name__ == "__main__":
    pipeline()
