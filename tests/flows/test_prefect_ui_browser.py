"""The product as a team uses it: a local Prefect server, `prefect deploy`, a process worker, `prefect deployment
run` of the synthesis demo deployment, then the flow run's page in headless Chromium lists its artifacts.
A screenshot of the page is saved under the run directory."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tasks.demo_data import write_demo_ehr

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def _require_browser():
    missing = [name for name, path in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if path is None]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install -e '.[test]')")
    if missing:
        message = (f"{', '.join(missing)} not installed (Debian: apt-get install chromium chromium-driver; "
                   ".ci/run installs them)")
        pytest.fail(message) if os.environ.get("PRIVEHR_REQUIRE_BROWSER") else pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _prefect(env, *args, timeout=300) -> str:
    out = subprocess.run([str(BIN / "prefect"), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, f"prefect {' '.join(args)}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


@pytest.fixture
def prefect_server(tmp_path):
    port = _free_port()
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_API_URL": f"http://127.0.0.1:{port}/api", "PREFECT_LOCAL_STORAGE_PATH": str(tmp_path / "storage")}
    server = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                              cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    worker = None
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2)
                break
            except OSError:
                time.sleep(1)
        else:
            pytest.fail("the Prefect server did not start within 120 s")
        _prefect(env, "work-pool", "create", "privehr-process", "--type", "process")
        worker = subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", "privehr-process"], cwd=ROOT,
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        yield env, port
    finally:
        for process in (worker, server):
            if process is not None:
                _stop(process)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the process group (the server runs uvicorn in a child), SIGKILL it after 30 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=30)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def test_deployment_run_shows_its_artifacts_in_the_ui(prefect_server, tmp_path):
    _require_browser()
    env, port = prefect_server
    deployed = _prefect(env, "--no-prompt", "deploy", "--all")
    for name in ("privehr-pipeline/demo", "privehr-pipeline/nightly", "privehr-synthesize/demo", "privehr-validate/steward"):
        assert name in deployed, name
    assert "0 3 * * *" in _prefect(env, "deployment", "schedule", "ls", "privehr-pipeline/nightly")
    table = write_demo_ehr(tmp_path / "EHR_dataset.csv", seed=2)["path"]
    params = {"config": {"path": str(table), "mice": {"m": 1, "trace": False}, "mus": [2.0], "runs": 1,
                         "releases": 1, "dpnf": {"steps": 30, "blocks": 2, "hidden_size": 16},
                         "artifacts_dir": str(tmp_path / "artifacts"), "run_id": "ui",
                         "privacy": {"ledger_path": str(tmp_path / "ledger.jsonl")}}}
    out = _prefect(env, "deployment", "run", "privehr-synthesize/demo", "--params", json.dumps(params), "--watch",
                   "--watch-timeout", "400", timeout=450)
    assert "Completed" in out
    flow_run_id = next(line.split()[-1] for line in out.splitlines() if "UUID" in line)
    run_dir = tmp_path / "artifacts" / "ui"
    assert (run_dir / "report.md").exists()

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get(f"http://127.0.0.1:{port}/runs/flow-run/{flow_run_id}")
        tab = WebDriverWait(driver, 90).until(lambda d: d.find_elements(By.CSS_SELECTOR, "li.p-tab#artifacts"))[0]
        tab.click()

        def listed(d):
            panel = d.find_elements(By.ID, "artifacts-content")
            return panel and "privehr-synthesis-report" in panel[0].text and panel[0].text

        text = WebDriverWait(driver, 90).until(listed)
        driver.save_screenshot(str(run_dir / "prefect_ui_artifacts.png"))
    finally:
        driver.quit()
    for expected in ("privehr-synthesis-report", "privehr-synthesis-releases", "DP-SGD steps", "validation summary"):
        assert expected in text, expected
    assert (run_dir / "prefect_ui_artifacts.png").stat().st_size > 10_000
