"""Data Docs open in a real browser, offline: headless Chromium, every host unresolvable, renders the index with a
link to every suite's validation; no page loads anything from another host (GX's pages load jQuery, Bootstrap and
a logo that carries the data context's id from CDNs, and draw the index's list with JavaScript)."""

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
         "--host-resolver-rules=MAP * ~NOTFOUND"]  # a hospital without internet access


def _dom(index, profile) -> str:
    out = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", index.resolve().as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_chromium_renders_data_docs_with_every_suite(tmp_path, small_extract):
    if CHROMIUM is None:
        message = "Chromium not installed (Debian: apt-get install chromium chromium-driver; .ci/run installs it)"
        pytest.fail(message) if os.environ.get("PRIVEHR_REQUIRE_BROWSER") else pytest.skip(message)
    mimic = validate_extract(small_extract, tmp_path, load_mimic_spec())
    ehr, _ = validate_ehr(write_demo_ehr(tmp_path / "ehr.csv")["path"], tmp_path, load_ehr_spec("harrod_ehr"))
    for summary, spec in ((mimic, load_mimic_spec()), (ehr, load_ehr_spec("harrod_ehr"))):
        site = Path(summary["data_docs"]).parent
        for page in site.rglob("*.html"):
            assert not EXTERNAL_RESOURCE.search(page.read_text()), page.relative_to(site)
        dom = _dom(Path(summary["data_docs"]), tmp_path / "profile")
        assert "Data Docs" in dom and "<tbody><tr>" in dom
        for name in suite_names(spec):
            assert re.search(rf'<a href="validations/{name}/[^"]+\.html">Success</a>', dom), name
