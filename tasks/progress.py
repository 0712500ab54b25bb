"""Progress of long loops (epochs, flow steps, shadow models) as Prefect progress artifacts.

``models/`` trainers take a ``progress(done, total)`` callback and know nothing of Prefect; a task
passes :func:`progress_artifact`'s callback, which creates one progress artifact for the task run
and updates it at most every ``step`` of the way. Outside a Prefect run it returns None (no-op).
"""

from __future__ import annotations

from collections.abc import Callable

from prefect.artifacts import create_progress_artifact, update_progress_artifact

from privehr.tasks.run_logging import in_prefect_run

__all__ = ["progress_artifact"]


def progress_artifact(description: str, step: float = 0.1) -> Callable[[int, int], None] | None:
    """A ``progress(done, total)`` callback updating a new progress artifact (percent), or None outside Prefect."""
    if not in_prefect_run():
        return None
    artifact_id = create_progress_artifact(progress=0.0, description=description)
    last = [0.0]

    def report(done: int, total: int) -> None:
        percent = 100.0 * done / max(total, 1)
        if percent - last[0] >= 100 * step or done >= total:
            update_progress_artifact(artifact_id=artifact_id, progress=min(percent, 100.0))
            last[0] = percent

    return report
