"""Data Docs open in a real browser, offline: headless Chromium, every host unresolvable, renders the index with a
link to every suite's validation; no page loads anything from another host (GX's pages load jQuery, Bootstrap and
a logo that carries the data context's id from CDNs, and draw the index's list with JavaScript). The browser is in
dark mode, where GX's style fetches its logo from S3, and its network log shows no request a page made leave
file://."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from privehr.core.specs import load_ehr_spec, load_mimic_spec
from privehr.io.data_docs_offline import EXTERNAL_RESOURCE
from privehr.io.demo_data import write_demo_ehr
from privehr.io.expectation_suites import suite_names
from privehr.io.validation import validate_ehr, validate_extract

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--host-resolver-rules=MAP * ~NOTFOUND",  # a hospital without internet access
         "--force-dark-mode", "--blink-settings=preferredColorScheme=0"]  # prefers-color-scheme: dark (0 is dark)


def _dom(index, profile, net_log) -> str:
    out = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--log-net-log={net_log}", "--dump-dom",
                          index.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _page_requests(net_log) -> list[str]:
    """The URLs of the network requests a file:// page made (Chromium's own, to its update and account services,
    are keyed to no page); a file it reads from disk is no network request and is not logged."""
    log = json.loads(Path(net_log).read_text())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [e["params"]["url"] for e in log["events"] if e["type"] == start
            and "file://" in e["params"].get("network_isolation_key", "")]


def test_chromium_renders_data_docs_with_every_suite(tmp_path, small_extract):
    if CHROMIUM is None:
        message = "Chromium not installed (Debian: apt-get install chromium chromium-driver; .ci/run installs it)"
        pytest.fail(message) if os.environ.get("PRIVEHR_REQUIRE_BROWSER") else pytest.skip(message)
    mimic = validate_extract(small_extract, tmp_path, load_mimic_spec())
    ehr, _ = validate_ehr(write_demo_ehr(tmp_path / "ehr.csv")["path"], tmp_path, load_ehr_spec("harrod_ehr"))
    for summary, spec in ((mimic, load_mimic_spec()), (ehr, load_ehr_spec("harrod_ehr"))):
        site = Path(summary["data_docs"]).parent
        doms = {}
        for i, page in enumerate(sorted(site.rglob("*.html"))):
            assert not EXTERNAL_RESOURCE.search(page.read_text()), page.relative_to(site)
            net_log = tmp_path / f"{spec.name}-{i}.netlog.json"
            doms[page] = _dom(page, tmp_path / "profile", net_log)
            assert [url for url in _page_requests(net_log) if not url.startswith("file:")] == [], page
        dom = doms[Path(summary["data_docs"])]
        assert "Data Docs" in dom and "<tbody><tr>" in dom
        for name in suite_names(spec):
            assert re.search(rf'<a href="validations/{name}/[^"]+\.html">Success</a>', dom), name
