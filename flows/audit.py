"""privehr-audit: plan shadows (and reserve the audit in the privacy ledger) -> train-shadow[mechanism, shadow]
-> evaluate-attacks (LiRA, one-run bound; recorded in the ledger: its statistics are not DP)."""

from __future__ import annotations

from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner

from privehr.core.config import AuditConfig
from privehr.tasks.audit import evaluate_attacks, plan_audit, train_shadow
from privehr.io.permissions import private_run

__all__ = ["audit"]


@flow(name="privehr-audit", log_prints=False, task_runner=ThreadPoolTaskRunner(max_workers=2))
@private_run  # umask 077: every file of the run owner-only
def audit(config: AuditConfig) -> dict:
    """Attack shadow models trained like the audited run's models; return aggregate attack results."""
    work, reservation = plan_audit(config)
    shadows = {m: [train_shadow.submit(config, work, m, s) for s in range(config.shadows)] for m in config.mechanisms}
    return evaluate_attacks(config, work, {m: [f.result() for f in fs] for m, fs in shadows.items()}, reservation)
