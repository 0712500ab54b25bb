"""The product as a team uses it: a local Prefect server, `prefect deploy`, a process worker, `prefect deployment
run` of the synthesis demo deployment, then the flow run's page in headless Chromium lists its artifacts.
A screenshot of the page is saved under the run directory."""

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from privehr.io.demo_data import write_demo_ehr

from oracles import servers

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


def _prefect(env, *args, timeout=300) -> str:
    out = subprocess.run([str(BIN / "prefect"), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, f"prefect {' '.join(args)}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory):
    """One server and one process worker for the module's tests (each reads only what its own run made: its run
    directory, and the artifacts that link under its own pages port)."""
    tmp_path = tmp_path_factory.mktemp("prefect-server")
    base = {**os.environ, "PREFECT_LOCAL_STORAGE_PATH": str(tmp_path / "storage")}
    # nothing reads the server or the worker once the module's tests are done: 5 s to stop on SIGTERM, then
    # SIGKILL (after the deployment run, one of them sat out the whole 30 s grace in CI's teardown and here)
    with servers.prefect_server(tmp_path / "prefect-home", base, startup_s=120, stop_grace_s=5) as (env, port):
        _prefect(env, "work-pool", "create", "privehr-process", "--type", "process")
        # the worker asks for scheduled runs every 2 s instead of every 10 s: a deployment run starts when it is due
        worker = subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", "privehr-process"], cwd=ROOT,
                                  env=env | {"PREFECT_WORKER_QUERY_SECONDS": "2"},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        try:
            yield env, port
        finally:
            servers.stop(worker, grace_s=5)


def test_deployment_run_shows_its_artifacts_in_the_ui(prefect_server, tmp_path):
    _require_browser()
    env, port = prefect_server
    deployed = _prefect(env, "--no-prompt", "deploy", "--all")
    for name in ("privehr-pipeline/demo", "privehr-pipeline/nightly", "privehr-synthesize/demo", "privehr-validate/steward"):
        assert name in deployed, name
    assert "0 3 * * *" in _prefect(env, "deployment", "schedule", "ls", "privehr-pipeline/nightly")
    table = write_demo_ehr(tmp_path / "EHR_dataset.csv", seed=2)["path"]
    # one DP release (mu 2): what is shown in the UI is the claim, not the grid (the default epsilons and the
    # non-private flow tripled the run's time; two MICE rounds, not ten, impute the one table the flow trains on)
    params = {"config": {"path": str(table), "mice": {"m": 1, "max_iter": 2, "trace": False}, "mus": [2.0],
                         "epsilons": [],
                         "non_private": False, "runs": 1, "releases": 1, "dpnf": {"steps": 30, "blocks": 2, "hidden_size": 16},
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


def _chrome(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path / 'chromium-profile-pages'}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def _link_artifacts(port: int, base_url: str) -> dict[str, str]:
    """{key or description: artifact id} of the server's artifacts that link under ``base_url`` (Prefect 3.8
    stores a link artifact as markdown: ``[text](url)``)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/artifacts/filter", method="POST",
                                     data=b"{}", headers={"Content-Type": "application/json"})
    artifacts = json.loads(urllib.request.urlopen(request, timeout=30).read())
    return {(a["key"] or a["description"] or ""): a["id"] for a in artifacts
            if isinstance(a["data"], str) and f"]({base_url}/" in a["data"]}


def test_the_ui_artifacts_link_the_served_data_docs_and_report(prefect_server, tmp_path):
    """From the Prefect UI's link artifacts of a pipeline run (its validation, its report) to the pages over http:
    `privehr serve` serves the artifacts directory where `pages.base_url` says, and patient-level files 404."""
    _require_browser()
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from privehr.io.demo_data import write_demo_mimic

    env, port = prefect_server
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    pages_port = servers.free_port()
    base_url = f"http://127.0.0.1:{pages_port}"
    serve = subprocess.Popen([str(BIN / "privehr"), "serve", "--artifacts-dir", str(artifacts), "--port",
                              str(pages_port)], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        assert base_url in serve.stdout.readline()
        extract = tmp_path / "all_hourly_data.h5"
        write_demo_mimic(extract, n_stays=300, seed=4)
        config = tmp_path / "run.json"
        config.write_text(json.dumps({
            "data": {"hdf5_path": str(extract)}, "labels": ["mort_icu"], "artifacts_dir": str(artifacts),
            "run_id": "pages", "versioning": {"dvc": False}, "pages": {"base_url": base_url}, "synthesis": None,
            "privacy": {"ledger_path": str(tmp_path / "ledger.jsonl")},
            # the pages and the links are the claim, not the numbers: 100 bootstrap resamples of the test stays and
            # of the DP evaluation (the report's intervals are printed, not tested, here), DP-SGD batches of 16 of
            # 142 (q 1/9, whose calibration takes 1 s, not 5 s at q 0.9)
            "evaluation": {"bootstrap_resamples": 100}, "release": {"interval_resamples": 100},
            "training": {"models": ["logistic_regression"], "methods": ["non_private", "dp_sgd"], "seeds": 1,
                         "non_private": {"max_epochs": 3},
                         "dp_sgd": {"epochs": 1, "epsilons": [1.0], "batch_size": 16}}}))
        out = subprocess.run([str(BIN / "privehr"), "run", "--config", str(config), "--json"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=400)
        assert out.returncode == 0, out.stderr[-3000:]
        links = _link_artifacts(port, base_url)
        assert "privehr-run-report" in links, (links, out.stderr[-3000:])
        report_id = links["privehr-run-report"]
        docs_id = next(i for k, i in links.items() if "Data Docs" in k)
        run_dir = artifacts / "pages"
        # patient-level files are not served
        for private in ("intermediate/cohort.npz", "intermediate/features_test.npz"):
            assert (run_dir / private).exists()
            with pytest.raises(urllib.error.HTTPError, match="404"):
                urllib.request.urlopen(f"{base_url}/pages/{private}", timeout=10)

        driver = _chrome(tmp_path)
        try:
            landed = {}
            for name, artifact_id in (("data_docs", docs_id), ("report", report_id)):
                driver.get(f"http://127.0.0.1:{port}/artifacts/artifact/{artifact_id}")
                anchor = WebDriverWait(driver, 90).until(
                    lambda d: d.find_elements(By.CSS_SELECTOR, f'a[href^="{base_url}/pages/"]'))[0]
                href = anchor.get_attribute("href")
                driver.get(href)  # what a click does (the UI opens links in a new tab)
                WebDriverWait(driver, 60).until(lambda d: d.execute_script("return document.readyState") == "complete")
                shot = run_dir / f"followed_{name}.png"
                driver.save_screenshot(str(shot))
                images = driver.execute_script(
                    "return Array.from(document.images).filter(i => i.complete && i.naturalWidth > 100).length")
                landed[name] = (href, driver.title, driver.page_source, images, shot)
        finally:
            driver.quit()
    finally:
        servers.stop(serve)
    href, title, text, _, shot = landed["data_docs"]
    assert href.startswith(f"{base_url}/pages/validation/") and href.endswith("index.html")
    assert "Data Docs" in text and "Validation Results" in text
    assert "mimic_extract_patients" in text and shot.stat().st_size > 10_000  # the suites (listed by its script)
    href, title, text, images, shot = landed["report"]
    assert href == f"{base_url}/pages/report.html" and title == "privehr run pages"
    assert "Uncertainty and calibration" in text and "Subgroups" in text and images >= 2
    assert shot.stat().st_size > 10_000
