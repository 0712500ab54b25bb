"""A real Prefect server for the tests that need one (``prefect server start`` on a free loopback port)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(process: subprocess.Popen, grace_s: float = 30) -> None:
    """SIGTERM the process group (the server runs uvicorn in a child), SIGKILL it after ``grace_s`` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=grace_s if sig == signal.SIGTERM else 30)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def prefect_server(home: Path, env: dict | None = None, startup_s: int = 180, stop_grace_s: float = 30):
    """Yield (environment pointing at the server, port); the server's database is ``home / "prefect.db"``; at the
    end the server has ``stop_grace_s`` seconds to stop on SIGTERM before it is killed."""
    port = free_port()
    env = {**(os.environ if env is None else env), "PREFECT_HOME": str(home),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_API_URL": f"http://127.0.0.1:{port}/api"}
    home.mkdir(parents=True, exist_ok=True)
    server = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                              cwd=home, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        for _ in range(startup_s):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2)
                break
            except OSError:
                time.sleep(1)
        else:
            raise RuntimeError(f"the Prefect server did not start within {startup_s} s")
        yield env, port
    finally:
        stop(server, stop_grace_s)
