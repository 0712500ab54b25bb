"""privehr-validate: new data delivered -> validation reports (Data Docs, quarantine, artifacts); no training.

Every delivery is validated and reported, even after another one failed; the flow run fails at the
end when any delivery has a failed critical expectation, so the steward sees it in the UI.
"""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow

from privehr.config import StewardConfig
from tasks.run_directory import create_run_directory
from tasks.validate import validate_delivery
from tasks.validation import ValidationFailed

__all__ = ["validate"]


@flow(name="privehr-validate", log_prints=False)
def validate(config: StewardConfig = StewardConfig()) -> dict:
    """Validate each of ``config.paths``; return {run_dir, deliveries: {path: validation.json}, failed}."""
    run_dir = create_run_directory(config)
    spec = str(config.validation.spec) if config.validation.spec else None
    reports, failed = {}, []
    for path in config.paths:
        report = validate_delivery(str(path), run_dir, config.ehr_spec, spec, stop_on_critical=False,
                                   chunk_rows=config.validation.chunk_rows)
        reports[str(path)] = report
        if not json.loads(Path(report).read_text())["passed"]:
            failed.append(str(path))
    if failed and config.validation.stop_on_critical:
        raise ValidationFailed(f"{len(failed)} of {len(reports)} deliveries failed a critical expectation: "
                               f"{failed}; see the reports under {run_dir}/validation/")
    return {"run_dir": run_dir, "deliveries": reports, "failed": failed}
