"""privehr-synthesize: check targets and bounds -> EHR table -> [dvc pull if missing] -> validate (GX) -> split by
patient -> MICE (m datasets) -> [noisy patient counts, reserved and recorded] -> privacy budget check (reserves
every release, planned from those counts) ->
synthesizer[synthesizer, imputation, budget, run] (DP-NF, DP-HFlow, AIM, MST; each into the privacy ledger as it is
trained; with synthesis.missing: in_release on the table as delivered, its missingness learned in the release) ->
synthetic releases -> release bundle (the DP tables, their card and manifest) -> evaluate[release] + train-on-real
baseline -> report.

Tasks pass file paths only; the imputed patients stay under ``intermediate/``.
"""

from __future__ import annotations

from prefect import flow, unmapped
from prefect.task_runners import ThreadPoolTaskRunner

from privehr.models.device import resolve_device
from privehr.models.synthesis import choose_synthesizers, synthesis_jobs
from privehr.core.config import SynthesisConfig
from privehr.core.specs import load_ehr_spec
from privehr.tasks.compute import CONCURRENT_FITS
from privehr.tasks.impute import impute_ehr
from privehr.tasks.release_budget import check_synthesis_budget
from privehr.tasks.run_directory import create_run_directory, run_lock
from privehr.tasks.synthesis import check_synthesis_inputs, release_patient_count, synthesize
from privehr.tasks.synthesis_bundle import write_synthesis_bundle
from privehr.tasks.synthesis_report import write_synthesis_report
from privehr.tasks.synthetic_evaluation import evaluate_original, evaluate_release
from privehr.tasks.validate import validate_delivery
from privehr.tasks.versioning import pull_inputs
from privehr.io.permissions import private_run

__all__ = ["synthesize_ehr"]


@flow(name="privehr-synthesize", log_prints=False, task_runner=ThreadPoolTaskRunner(max_workers=CONCURRENT_FITS))
@private_run  # umask 077: every file of the run owner-only
def synthesize_ehr(config: SynthesisConfig = SynthesisConfig(), device: str = "auto") -> dict:
    """Synthesise ``config.path`` with each synthesizer over the budget grid; return the report summary."""
    config = choose_synthesizers(config, load_ehr_spec(config.spec))  # the defaults depend on the table's types
    check_synthesis_inputs(config)  # a wrong target or a missing bound: refused before anything is read or spent
    run_dir = create_run_directory(config)
    with run_lock(run_dir):
        pull_inputs([str(config.path)])
        validation = validate_delivery(str(config.path), run_dir, config.spec,
                                       stop_on_critical=config.stop_on_critical)
        impute_ehr(config, run_dir)
        release_patient_count(run_dir, config)  # reserved and released first: the plans are built from it
        reservations = check_synthesis_budget(run_dir, config)  # raises before any flow is trained
        fit = synthesize.with_options(tags=["gpu"] if resolve_device(device).type == "cuda" else [])
        records = [fit.submit(run_dir, job, config, reservations.get(job["job_id"]), device)
                   for job in synthesis_jobs(config)]
        originals = evaluate_original.map(unmapped(run_dir), list(range(config.mice.m)), unmapped(config))
        evaluations = evaluate_release.map(unmapped(run_dir), records, unmapped(config))
        record_paths = [r.result() for r in records]  # each flow entered the ledger as soon as it was trained
        bundle = write_synthesis_bundle(run_dir, record_paths, config)  # before the report, as in the pipeline
        evaluations.wait()
        summary = write_synthesis_report(run_dir, record_paths, [o.result() for o in originals], config)
    return summary | {"validation": validation, "release": bundle}
