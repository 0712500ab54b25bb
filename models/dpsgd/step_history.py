"""Drive a trainer's step generator for exactly T steps, keeping a loss curve (shared by DP-NF and DP-NF-VI).

>>> steps = iter([(2.0, 1), (4.0, 3), (1.0, 2)])
>>> run_steps(steps, 3, log_every=2, name="loss")
[{'step': 2, 'loss': 3.5}, {'step': 3, 'loss': 1.0}]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

__all__ = ["run_steps"]


def run_steps(steps: Iterator[tuple[float, int]], total_steps: int, log_every: int = 100,
              progress: Callable[[int, int], None] | None = None, name: str = "loss") -> list[dict]:
    """Take ``total_steps`` (mean loss, batch size) pairs from ``steps``; every ``log_every`` steps (and at the
    end) record the size-weighted mean loss since the last record and call ``progress(step, total)``."""
    history, total, seen = [], 0.0, 0
    for step, (loss, size) in zip(range(1, total_steps + 1), steps):
        total, seen = total + loss * size, seen + size
        if step % log_every == 0 or step == total_steps:
            history.append({"step": step, name: total / max(seen, 1)})
            total, seen = 0.0, 0
            if progress is not None:
                progress(step, total_steps)
    return history
