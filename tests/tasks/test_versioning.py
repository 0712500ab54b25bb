import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from privehr.tasks.versioning import version_run

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
    (run_dir / "synthesis" / "intermediate" / "imputed").mkdir(parents=True)  # the synthesis subflow's run
    (run_dir / "synthesis" / "intermediate" / "imputed" / "train_0.csv").write_bytes(b"patient-level")
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


def test_missing_inputs_are_pulled_and_present_ones_left_alone(dvc_project):
    from privehr.tasks.versioning import pull_inputs

    table = dvc_project / "data" / "ehr" / "t.csv"
    table.parent.mkdir(parents=True)
    table.write_text("a,b\n1,2\n")
    _run(DVC + ["add", "-q", "data"], dvc_project)
    _run(DVC + ["push", "-q"], dvc_project)
    table.unlink()
    untracked = dvc_project / "data" / "other.h5"
    done = pull_inputs.fn([str(table), str(untracked)])
    assert done == {str(table): "pulled", str(untracked): "missing; not tracked by DVC"}
    assert table.read_text() == "a,b\n1,2\n"
    table.write_text("a,b\n9,9\n")  # a local copy differing from the versioned one is never overwritten
    assert pull_inputs.fn([str(table)]) == {str(table): "present"} and table.read_text() == "a,b\n9,9\n"


def _shared(*roots: Path) -> list[str]:
    return [f"{p} {oct(stat.S_IMODE(p.lstat().st_mode))}" for root in roots for p in [root, *root.rglob("*")]
            if stat.S_IMODE(p.lstat().st_mode) & 0o077]


def test_what_a_run_versions_is_owner_only_in_the_cache_and_the_remote(dvc_project, tmp_path):
    """DVC stores files 0444 and, from a shell's umask, folders 0755: a run's files landing in a hash-prefix folder
    that `dvc add data` made would be world-readable. After the run is versioned nothing there is."""
    before = os.umask(0o022)
    try:
        (dvc_project / "data").mkdir()
        (dvc_project / "data" / "t.csv").write_text("a,b\n1,2\n")
        _run(DVC + ["add", "-q", "data"], dvc_project)
        _run(DVC + ["push", "-q"], dvc_project)
        cache, remote = dvc_project / ".dvc" / "cache", tmp_path / "remote"
        assert _shared(cache, remote)  # as DVC leaves them
        run_dir = dvc_project / "artifacts" / "run-1"
        run_dir.mkdir(parents=True)
        (run_dir / "synthetic.csv").write_text("a,b\n1,2\n")  # the same bytes as data/t.csv: the same object
        (run_dir / "metrics.json").write_text('{"auroc": 0.8}')
        assert version_run.fn(str(run_dir))["pushed_files"] >= 1
    finally:
        os.umask(before)
    assert _shared(cache, remote) == []
    _run(DVC + ["status", "-c", "-q"], dvc_project)  # DVC still reads what it stored
