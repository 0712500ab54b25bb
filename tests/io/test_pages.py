"""privehr serve: the run's pages over http, never its patient-level files; the URLs the artifacts link."""

import urllib.error
import urllib.request

import numpy as np
import pytest

from privehr.models.evaluation.subgroups import large_enough, subgroups
from privehr.io.pages import page_url, serve_artifacts


@pytest.fixture
def served(tmp_path):
    run = tmp_path / "run-1"
    for private in ("intermediate", "quarantine/delivery", "synthesis/intermediate"):
        (run / private).mkdir(parents=True)
    (run / "intermediate" / "cohort.npz").write_bytes(b"patient-level")
    (run / "quarantine" / "delivery" / "patients.csv").write_text("subject_id,age\n1,300\n")
    (run / "synthesis" / "intermediate" / "train_0.csv").write_text("x\n1\n")
    (run / ".lock").write_text("")
    (run / "report.html").write_text("<html><title>privehr run run-1</title></html>")
    (run / "calibration.png").write_bytes(b"\x89PNG")
    (run / "split_manifest.json").write_text('{"subjects": [97531864]}')  # an older run layout
    (run / "models").mkdir()
    (run / "models" / "cell-seed0.pt").write_bytes(b"weights")
    docs = run / "validation" / "delivery" / "gx" / "uncommitted" / "data_docs" / "local_site"
    docs.mkdir(parents=True)
    (docs / "index.html").write_text("<title>Data Docs</title>")
    (tmp_path / "privacy_ledger.jsonl").write_text("{}")
    (tmp_path / "privacy_ledger.jsonl.key").write_text("secret key")
    (run / "inter_link").symlink_to(run / "intermediate")
    (run / "Intermediate.png").symlink_to(run / "intermediate" / "cohort.npz")
    (run / "outside.png").symlink_to(tmp_path / "privacy_ledger.jsonl.key")
    linked = run / "validation" / "linked" / "gx" / "uncommitted" / "data_docs" / "local_site"
    linked.mkdir(parents=True)
    (linked / "index.html").symlink_to(run / "intermediate" / "cohort.npz")  # an index that is not a page
    server = serve_artifacts(tmp_path, port=0, background=True)
    yield f"http://127.0.0.1:{server.server_address[1]}", tmp_path
    server.shutdown()
    server.server_close()


def test_pages_are_served_and_patient_level_files_are_not(served):
    url, root = served
    assert b"privehr run run-1" in urllib.request.urlopen(f"{url}/run-1/report.html", timeout=10).read()
    assert urllib.request.urlopen(f"{url}/run-1/calibration.png", timeout=10).read() == b"\x89PNG"
    docs = f"{url}/run-1/validation/delivery/gx/uncommitted/data_docs/local_site/"
    assert b"Data Docs" in urllib.request.urlopen(docs, timeout=10).read()
    assert b"Data Docs" in urllib.request.urlopen(docs + "index.html", timeout=10).read()
    listing = urllib.request.urlopen(f"{url}/", timeout=10).read().decode()
    assert "run-1/report.html" in listing and "ledger" not in listing
    for path in ("run-1/intermediate/cohort.npz", "run-1/quarantine/delivery/patients.csv",
                 "run-1/synthesis/intermediate/train_0.csv", "run-1/%69ntermediate/cohort.npz", "run-1/.lock",
                 "run-1/intermediate/", "run-1/", "run-1/split_manifest.json", "run-1/models/cell-seed0.pt",
                 "privacy_ledger.jsonl", "privacy_ledger.jsonl.key", "run-1/inter_link/cohort.npz",
                 "run-1/Intermediate.png", "run-1/outside.png", "run-1/validation/", "run-1/report.html%00.png",
                 "run-1/validation/linked/gx/uncommitted/data_docs/local_site/",
                 "run-1/validation/linked/gx/uncommitted/data_docs/local_site/index.html",
                 "run-1/report.html/../intermediate/cohort.npz"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{url}/{path}", timeout=10)
        assert err.value.code == 404, path
    head = urllib.request.Request(f"{url}/privacy_ledger.jsonl.key", method="HEAD")
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(head, timeout=10)


def test_page_urls_point_under_the_base_url_or_at_the_file(tmp_path):
    page = tmp_path / "run 1" / "validation" / "index.html"
    assert page_url(page, tmp_path, "http://host:8765/") == "http://host:8765/run%201/validation/index.html"
    assert page_url(page, tmp_path, None) == page.resolve().as_uri()
    assert page_url(tmp_path.parent / "elsewhere.html", tmp_path, "http://host:8765").startswith("file://")


def test_subgroups_too_small_or_one_sided_get_no_number():
    y = np.array([1] * 12 + [0] * 48 + [1] * 2 + [0] * 58)
    groups = subgroups({"gender": np.array(["F"] * 60 + ["M"] * 60)})
    assert large_enough(y, groups[("sex", "female")], 50, 10)
    assert not large_enough(y, groups[("sex", "male")], 50, 10)  # 60 stays but 2 positives
    assert not large_enough(y, groups[("sex", "female")], 61, 10)
    assert not groups[("sex", "unknown")].any()


def test_the_index_lists_runs_by_their_start_time_not_their_random_ids(tmp_path):
    import json

    for name, started in (("run-ffff", "2026-01-01T00:00:00+00:00"), ("run-0000", "2026-03-01T00:00:00+00:00"),
                          ("run-8888", "2026-02-01T00:00:00+00:00")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.html").write_text("<html></html>")
        (tmp_path / name / "provenance.json").write_text(json.dumps({"created_utc": started}))
    server = serve_artifacts(tmp_path, port=0, background=True)
    try:
        listing = urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/", timeout=10).read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert [listing.index(n) for n in ("run-ffff", "run-8888", "run-0000")] == sorted(
        listing.index(n) for n in ("run-ffff", "run-8888", "run-0000"))
