"""privehr-validate: new data delivered -> validation reports (Data Docs, quarantine, artifacts); no training.

Every delivery is validated and reported, even after another one failed (a critical expectation, or a
file that cannot be read at all); the flow run fails at the end when any delivery failed, so the
steward sees it in the UI with every reason.
"""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow

from privehr.core.config import StewardConfig
from privehr.tasks.run_directory import create_run_directory
from privehr.tasks.validate import validate_delivery
from privehr.io.validation import ValidationFailed
from privehr.io.permissions import private_run

__all__ = ["validate"]


@flow(name="privehr-validate", log_prints=False)
@private_run  # umask 077: every file of the run owner-only
def validate(config: StewardConfig = StewardConfig()) -> dict:
    """Validate each of ``config.paths``; return {run_dir, deliveries: {path: validation.json}, failed, errors}."""
    run_dir = create_run_directory(config)
    spec = str(config.validation.spec) if config.validation.spec else None
    reports, failed, errors = {}, [], {}
    for path in config.paths:
        state = validate_delivery(str(path), run_dir, config.ehr_spec, spec, stop_on_critical=False,
                                  chunk_rows=config.validation.chunk_rows, pages_url=config.pages.base_url,
                                  return_state=True)
        if state.is_failed():  # unreadable: the task's message names the problem and the fix
            errors[str(path)] = str(state.result(raise_on_failure=False))
            failed.append(str(path))
            continue
        reports[str(path)] = report = state.result()
        if not json.loads(Path(report).read_text())["passed"]:
            failed.append(str(path))
    if failed and config.validation.stop_on_critical:
        lines = [f"{len(failed)} of {len(config.paths)} deliveries failed: {failed}; "
                 f"reports under {run_dir}/validation/"]
        lines += [f"  {p}: {e}" for p, e in errors.items()]
        raise ValidationFailed("\n".join(lines))
    return {"run_dir": run_dir, "deliveries": reports, "failed": failed, "errors": errors}
