import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.versioning import version_run

DVC = [sys.executable, "-m", "dvc"]


def _run(cmd, cwd):
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def dvc_project(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    project = tmp_path / "project"
    project.mkdir()
    _run(["git", "init", "-q"], project)
    _run(DVC + ["init", "-q"], project)
    _run(DVC + ["remote", "add", "-d", "local", str(tmp_path / "remote")], project)
    shutil.copy(Path(__file__).resolve().parents[2] / ".dvcignore", project / ".dvcignore")
    return project


def test_run_directory_is_added_and_pushed_without_intermediates(dvc_project, tmp_path):
    run_dir = dvc_project / "artifacts" / "run-1"
    (run_dir / "intermediate").mkdir(parents=True)
    (run_dir / "metrics.json").write_text('{"auroc": 0.8}')
    (run_dir / "intermediate" / "cohort.npz").write_bytes(b"patient-level")
    result = version_run.fn(str(run_dir))
    assert result["versioned"] and result["remote"] == "local"
    dvc_file = Path(result["dvc_file"])
    assert dvc_file.exists() and "nfiles: 1" in dvc_file.read_text()  # metrics.json only
    stored = [p for p in (tmp_path / "remote").rglob("*") if p.is_file()]
    assert any(p.read_bytes() == b'{"auroc": 0.8}' for p in stored)
    assert not any(p.read_bytes() == b"patient-level" for p in stored)


def test_outside_a_dvc_project_is_reported_not_hidden(tmp_path):
    run_dir = tmp_path / "loose" / "run-1"
    run_dir.mkdir(parents=True)
    assert version_run.fn(str(run_dir)) == {"versioned": False, "reason": "not inside a DVC project"}
