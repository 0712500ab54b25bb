"""privehr-ehr-prepare: a small EHR table -> validated -> split by patient -> m MICE-imputed datasets."""

from __future__ import annotations

from prefect import flow

from privehr.core.config import EHRPrepareConfig
from privehr.tasks.impute import impute_ehr
from privehr.tasks.run_directory import create_run_directory
from privehr.tasks.validate import validate_delivery
from privehr.io.permissions import private_run

__all__ = ["ehr_prepare"]


@flow(name="privehr-ehr-prepare", log_prints=False)
@private_run  # umask 077: every file of the run owner-only
def ehr_prepare(config: EHRPrepareConfig = EHRPrepareConfig()) -> dict:
    """Validate ``config.path`` through its spec, then impute; return the run's report paths."""
    run_dir = create_run_directory(config)
    report = validate_delivery(str(config.path), run_dir, config.spec, stop_on_critical=config.stop_on_critical)
    imputation = impute_ehr(config, run_dir)
    return {"run_dir": run_dir, "validation": report, "imputation": imputation}
