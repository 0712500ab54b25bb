"""Leave no process behind: when a privehr command dies (even by SIGKILL), its children die with it.

Prefect's temporary API server is a uvicorn subprocess that Prefect stops at exit; a SIGKILL skips every exit
handler, and the server, with any worker processes, lives on as an orphan. :func:`watch` starts a small detached
process that records the command's descendants every half second (``/proc/<pid>/task/*/children``) and, once the
command is gone, terminates those still alive (SIGTERM, then SIGKILL after 3 s). A descendant is matched by pid
*and* start time, so a recycled pid is never touched. Linux only (elsewhere: nothing is started).

    python -m privehr.cli.watchdog PID
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["watch", "descendants"]

PROC = Path("/proc")


def _start_time(pid: int) -> str | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return None if fields[0] == "Z" else fields[19]  # state, ..., starttime (field 22 of stat)


def _children(pid: int) -> list[int]:
    out = []
    for task in (PROC / str(pid) / "task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def descendants(pid: int) -> dict[int, str]:
    """{pid: start time} of every living descendant of ``pid``."""
    found, stack = {}, _children(pid)
    while stack:
        child = stack.pop()
        started = _start_time(child)
        if started is not None and child not in found:
            found[child] = started
            stack += _children(child)
    return found


def _alive(known: dict[int, str]) -> dict[int, str]:
    return {p: s for p, s in known.items() if _start_time(p) == s}


def _run(parent: int, interval: float = 0.5) -> None:
    me = os.getpid()
    started = _start_time(parent)
    known: dict[int, str] = {}
    while started is not None and _start_time(parent) == started:
        known |= {p: s for p, s in descendants(parent).items() if p != me}
        time.sleep(interval)
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 0.0)):
        left = _alive(known)
        for pid in left:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + wait
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = _alive(left)
        if not left:
            return


def watch() -> subprocess.Popen | None:
    """Start the watchdog of this process (detached, its own session: a group kill of the command spares it)."""
    if not (PROC / str(os.getpid()) / "task").exists():
        return None
    return subprocess.Popen([sys.executable, "-m", "privehr.cli.watchdog", str(os.getpid())], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    _run(int(sys.argv[1]))
