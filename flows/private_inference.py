"""privehr-private-inference: records -> budget check (reserves every release) -> [exact posterior, non-private
NF-VI] and, per mu and run, DP-NF-VI (each loss) and VI on DP-NF synthetic data (each into the privacy ledger as it
is fitted) -> report (Tables 6 and 7 of Su et al. 2023 in shape).

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.

The method: Su et al. 2023, Section 4. Tasks pass file paths only; the records stay under ``intermediate/``.
"""

from __future__ import annotations

from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner

from privehr.models.device import resolve_device
from privehr.core.inference_config import InferenceConfig
from privehr.tasks.compute import CONCURRENT_FITS
from privehr.tasks.inference_report import write_inference_report
from privehr.tasks.private_inference import EXACT_KEY, check_inference_budget, exact_posterior, fit_posterior, prepare_records
from privehr.tasks.run_directory import create_run_directory, run_lock
from privehr.io.permissions import private_run

__all__ = ["private_inference"]


@flow(name="privehr-private-inference", log_prints=False,
      task_runner=ThreadPoolTaskRunner(max_workers=CONCURRENT_FITS))
@private_run  # umask 077: every file of the run owner-only
def private_inference(config: InferenceConfig = InferenceConfig(), device: str = "auto") -> dict:
    """Posterior inference from private records by DP-NF-VI and by VI on DP synthetic data; return the summary."""
    run_dir = create_run_directory(config)
    with run_lock(run_dir):
        n = prepare_records(run_dir, config)
        reservations = check_inference_budget(run_dir, config, n)  # raises before anything is fitted
        fit = fit_posterior.with_options(tags=["gpu"] if resolve_device(device).type == "cuda" else [])
        futures = [fit.submit(run_dir, job, config, reservations.get(job["job_id"]), device) for job in config.jobs()]
        exact = exact_posterior(run_dir, config, reservations.get(EXACT_KEY))
        paths = ([exact] if exact else []) + [f.result() for f in futures]
        return write_inference_report(run_dir, paths, config)
