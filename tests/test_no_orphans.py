"""A privehr command killed by SIGKILL mid-run (privehr run mid-grid) leaves no process behind (Prefect's temporary uvicorn server
included): the watchdog started by the console command terminates its descendants."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from privehr.cli.watchdog import _alive, descendants

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="the watchdog reads /proc (Linux)")


def own_prefect_env(home: str, **extra: str) -> dict:
    """The environment of a console command with its own Prefect home (its own temporary server), no API URL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    return env | {"PREFECT_HOME": home, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", **extra}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_sigkill_of_privehr_run_mid_grid_leaves_no_uvicorn_and_no_privehr_process(tmp_path, small_extract):
    env = own_prefect_env(str(tmp_path / "prefect"))
    # one epsilon per method and batches of 16 of the 142 training stays (q = 1/9, not 128/142): the budget check
    # calibrates 2 plans at a small q, 1 s instead of 14 s; validation off (GX's 4-12 s are not what is killed here:
    # the server, its watchdog and the run's fits are, and the grid's GRU-D fits still run for minutes)
    grid = tmp_path / "grid.yaml"
    grid.write_text("validation: {enabled: false}\ntraining: {dp_sgd: {epsilons: [1.0], batch_size: 16}, "
                    "expm_nf: {epsilons: [1.0]}, dp_expm_nf: {epsilons: [1.0], batch_size: 16}}\n")
    argv = [sys.executable, "-m", "privehr", "run", "--data", str(small_extract), "--no-synthesis", "--no-dvc",
            "--artifacts-dir", str(tmp_path / "artifacts"), "--run-id", "k", "--config", str(grid)]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, seen = time.monotonic() + 420, {}  # a loaded 2-core machine takes 2-4 minutes to get there
        budget = tmp_path / "artifacts" / "k" / "privacy_budget.json"  # reserved: the grid's fits are under way
        while time.monotonic() < deadline and not (budget.exists() and any("uvicorn" in _cmdline(p) for p in seen)):
            assert proc.poll() is None, "the command ended before it could be killed"
            seen |= descendants(proc.pid)
            time.sleep(0.5)
        assert budget.exists(), "the run did not reach its fits in time"
        time.sleep(2)
        seen |= descendants(proc.pid)
        assert any("uvicorn" in _cmdline(p) for p in seen) and any("privehr.cli.watchdog" in _cmdline(p) for p in seen)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 30
        while _alive(seen) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _alive(seen), [_cmdline(p) for p in _alive(seen)]
    finally:
        if proc.poll() is None:
            proc.kill()


def _healthy_server_among(pids: set[int]) -> bool:
    """Whether one of ``pids`` is a uvicorn server whose /api/health answers (Prefect's temporary server, started)."""
    import re
    import urllib.request

    for pid in pids:
        port = re.search(r"--port (\d+)", _cmdline(pid)) if "uvicorn" in _cmdline(pid) else None
        try:
            if port and urllib.request.urlopen(f"http://127.0.0.1:{port[1]}/api/health", timeout=2).status == 200:
                return True
        except OSError:
            continue
    return False


def test_validate_on_a_loaded_machine_completes_or_says_why_in_one_line(tmp_path, small_extract):
    """CPU hogs on every core from the moment the command spawns its temporary server (its database created from
    nothing, as on a first run) until that server answers: it starts slowly, and the command still validates (0, or
    1 for a failed delivery) or ends with one message (2), never a traceback. The hogs load what a loaded machine
    breaks, the server's start-up against its timeout; the command's imports before it and GX after it are not
    that, and on CI's two cores the hogs took the other worker's CPU too (126 s for this test, hogs to the end)."""
    env = own_prefect_env(str(tmp_path / "prefect"))
    proc = subprocess.Popen([sys.executable, "-m", "privehr", "validate", str(small_extract), "--json",
                             "--artifacts-dir", str(tmp_path / "artifacts")], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    hogs, loaded, deadline = [], 0.0, time.monotonic() + 600
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            spawned = descendants(proc.pid)
            if not hogs and any("uvicorn" in _cmdline(p) for p in spawned):
                hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                        for _ in range(os.cpu_count() or 2)]
            if hogs and _healthy_server_among(spawned):
                break
            time.sleep(0.2)
            loaded += 0.2 if hogs else 0.0
    finally:
        for hog in hogs:
            hog.kill()
    try:
        _, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert hogs and loaded > 2, f"the server's start-up was not under load ({loaded:.1f} s)"
    assert proc.returncode in (0, 1, 2) and "Traceback" not in stderr, stderr[-2000:]
    if proc.returncode == 2:
        assert "PREFECT_API_URL" in stderr


def test_quick_commands_start_no_prefect_server(tmp_path, small_extract):
    env = own_prefect_env(str(tmp_path / "prefect"))
    commands = [["inspect", str(small_extract)], ["config"], ["privacy", "ledger", "--ledger", str(tmp_path / "l")],
                ["privacy", "convert", "--sigma", "1", "--sample-rate", "0.01", "--steps", "100"]]
    for command in commands:
        out = subprocess.run([sys.executable, "-m", "privehr", *command, "--json"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "temporary server" not in out.stderr.lower(), command
    assert not (tmp_path / "prefect" / "prefect.db").exists()


def _processes_with(text: str) -> list[int]:
    """Living processes whose environment mentions ``text`` (this test's PREFECT_HOME)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_a_server_that_never_starts_is_retried_once_and_leaves_no_process(tmp_path, small_extract):
    """Start-up timeout 0: both attempts fail at once; the message names PREFECT_API_URL, and neither
    half-started server survives, even without the console's watchdog (main() called from Python)."""
    home = str(tmp_path / "prefect-never")
    env = own_prefect_env(home, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="0")
    code = (f"import sys; from privehr.cli import main; sys.exit(main(['validate', {str(small_extract)!r}, "
            f"'--artifacts-dir', {str(tmp_path / 'a')!r}]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 2 and "PREFECT_API_URL" in out.stderr and "trying once more" in out.stderr
    assert "Traceback" not in out.stderr
    deadline = time.monotonic() + 15
    while _processes_with(home) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _processes_with(home), [_cmdline(p) for p in _processes_with(home)]
