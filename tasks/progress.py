"""Progress of long loops (epochs, flow steps, shadow models) as Prefect progress artifacts.

``models/`` trainers take a ``progress(done, total)`` callback and know nothing of Prefect; a task
passes :func:`progress_artifact`'s callback, which creates one progress artifact for the task run
and updates it at most every ``step`` of the way. Outside a Prefect run it returns None (no-op).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.futures import PrefectFuture, as_completed

from privehr.tasks.run_logging import in_prefect_run, run_logger

__all__ = ["progress_artifact", "follow_fits", "fits_line"]


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


def fits_line(done: int, total: int, elapsed: float) -> str:
    """"fits: k of N done in 2 min 5 s; about 6 min left": the time left assumes the fits still to come take as
    long as those done (the grid's cells are alike in size; the first minutes include the searches)."""
    if done >= total:
        return f"fits: {total} of {total} done in {_duration(elapsed)}"
    return (f"fits: {done} of {total} done in {_duration(elapsed)}; about "
            f"{_duration(elapsed / max(done, 1) * (total - done))} left")


def follow_fits(futures: Sequence[PrefectFuture], sizes: Sequence[int], start: float) -> None:
    """Wait for every fit task run (each of ``sizes[i]`` fits), logging how many fits are done of how many, and
    the time left, as each finishes. A failed run counts as done: the others still finish, as with ``wait``."""
    size = {id(f): n for f, n in zip(futures, sizes)}
    done, total, logger = 0, sum(sizes), run_logger()
    for future in as_completed(list(futures)):
        done += size[id(future)]
        logger.info(fits_line(done, total, time.perf_counter() - start))


def _duration(seconds: float) -> str:
    """12 s, 2 min 5 s, 1 h 3 min."""
    seconds = max(int(round(seconds)), 0)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
