"""Wall time per stage of a flow run: measured in the flow, written to ``metrics.json``, printed by the CLI."""

from __future__ import annotations

import time
from contextlib import contextmanager

__all__ = ["StageClock", "timing_table"]


class StageClock:
    """Accumulates the wall seconds of named stages in the order they first ran."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = round(self.seconds.get(name, 0.0) + seconds, 3)


def timing_table(seconds: dict[str, float]) -> str:
    """A plain-text table of stages, seconds and shares of the total."""
    total = sum(seconds.values())
    width = max([len(k) for k in seconds] + [5])
    lines = [f"{'stage':<{width}}  seconds  share"]
    lines += [f"{k:<{width}}  {v:7.1f}  {v / total:5.1%}" if total else f"{k:<{width}}  {v:7.1f}"
              for k, v in seconds.items()]
    lines.append(f"{'total':<{width}}  {total:7.1f}")
    return "\n".join(lines)
