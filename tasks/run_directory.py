"""Create ``artifacts/<run-id>/`` and record what the run was made from; one process at a time per run."""

from __future__ import annotations

import fcntl
import re
import json
import platform
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path

from prefect import task
from pydantic import BaseModel

from privehr.core.records import RUN_RECORDS
from privehr.core.run_layout import RunLayout  # noqa: E402
from privehr.core.config import RUN_ID_PATTERN, PipelineConfig
from privehr.core.errors import InputError
from privehr.io.ledger import Ledger
from privehr.tasks.run_logging import run_logger, warn_if_logs_leave

__all__ = ["create_run_directory", "new_run_id", "run_lock", "ledger_run"]


def new_run_id() -> str:
    """A fresh run id, ``run-`` and 12 random hex digits: no clock in it. Run and release ids are shipped in bundles,
    and a start time would time the run (its length follows the data's size); when a run started is in its
    ``provenance.json``, which stays home."""
    return f"run-{secrets.token_hex(6)}"


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _refuse_ledger_in_a_run(ledger: Path, run_dir: Path) -> None:
    """A ledger is the project's, for every run and flow: one inside a run directory (this run's, or a run that holds
    it, as a pipeline holds its synthesis subflow's) would be versioned and thrown away with that run, and the next run
    would start from a full budget."""
    place = Path(ledger).absolute()
    runs = [run_dir.absolute()] + [p for p in place.parents if RunLayout(p).provenance.exists()]
    inside = next((r for r in runs if place.is_relative_to(r)), None)
    if inside is not None:
        raise InputError(f"the privacy ledger {place} lies inside the run directory {inside}: it would be versioned and "
                         "discarded with that run, and the next run would start from a full budget. Point "
                         "privacy.ledger_path (or PRIVEHR_LEDGER) at the project's ledger, outside any run.")


@task(name="create-run-directory")
def create_run_directory(config: PipelineConfig | BaseModel) -> str:
    """Make the run directory and write ``config.json`` and ``provenance.json``; return its path.

    ``config`` is any run configuration with ``run_id`` and ``artifacts_dir`` (and optionally ``resume``
    and ``privacy``, whose ledger is proven writable here, before any private record is read)."""
    warn_if_logs_leave()
    run_id = config.run_id or new_run_id()
    run_dir = Path(config.artifacts_dir) / run_id
    if not re.fullmatch(RUN_ID_PATTERN, run_id) or run_dir.resolve().parent != Path(config.artifacts_dir).resolve():
        raise InputError(f"run id {run_id!r} does not name one directory inside {config.artifacts_dir}; use letters, "
                         "digits, '.', '_' and '-', starting with a letter or digit")
    unwritable = lambda err: InputError(  # noqa: E731
        f"cannot create the run directory {run_dir} ({err.strerror}); make {Path(config.artifacts_dir)} writable or "
        "pass another artifacts directory")
    try:  # first: the default ledger lives in it
        run_dir.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise unwritable(err) from None
    if getattr(config, "privacy", None) is not None:
        ledger = Ledger(config.privacy.ledger_path)
        _refuse_ledger_in_a_run(ledger.path, run_dir)
        if ledger.check_writable():  # a fresh budget is never silent
            run_logger().warning("privacy ledger: a NEW ledger was started at %s: every dataset starts from a full "
                                 "budget here. If this data was released before, stop and point PRIVEHR_LEDGER or "
                                 "privacy.ledger_path at its ledger", Path(ledger.path).absolute())
    resume = getattr(config, "resume", False)
    if not resume:
        try:
            run_dir.mkdir()  # atomic: of two runs given the same new id, one gets it
        except FileExistsError:
            raise InputError(f"run directory {run_dir} exists; choose another run id, or pass resume to continue "
                             "it") from None
        except OSError as err:
            raise unwritable(err) from None
    run = RunLayout(run_dir)
    if resume and run.config.exists():
        previous = type(config).model_validate_json(run.config.read_text())
        if previous.model_copy(update={"resume": True}) != config:
            raise InputError(f"run {run_id} was made with a different configuration; resume only continues the "
                             "same run (see its config.json), start a new run id otherwise")
    run_dir.mkdir(parents=True, exist_ok=True)
    run.intermediate.mkdir(exist_ok=True)
    for private in (run_dir, run.intermediate):  # owner-only, also a directory an older privehr left 0755
        private.chmod(0o700)
    saved = config.model_copy(update={"resume": False}) if resume else config
    run.config.write_text(saved.model_dump_json(indent=2))
    previous_provenance = run.provenance
    uid = (json.loads(previous_provenance.read_text()).get("run_uid") if resume and previous_provenance.exists()
           else None) or secrets.token_hex(8)
    provenance = {
        "run_id": run_id,
        "run_uid": uid,  # this run directory's identity in the privacy ledger, kept by every resume
        "created_utc": datetime.now(timezone.utc).isoformat(),
        "git_commit": _git_commit(),
        "python": platform.python_version(),
        "packages": {p: version(p) for p in ("torch", "numpy", "pandas", "prefect", "dvc", "h5py")},
    }
    run.provenance.write_text(json.dumps(provenance, indent=2))
    run_logger().info("run %s: directory %s", run_id, run_dir)
    return str(run_dir)


def ledger_run(run_dir: str | Path) -> str:
    """The run's name in the privacy ledger: "<parent>/<run>#<uid>" (artifacts/<run-id>#..., <run-id>/synthesis#...).

    The uid is drawn when the directory is created and kept by resumes: two runs with the same path in
    different checkouts, or a run id reused after its directory was deleted, are different runs."""
    uid = json.loads(RunLayout(run_dir).provenance.read_text())["run_uid"]
    return "/".join(Path(run_dir).resolve().parts[-2:]) + f"#{uid}"


@contextmanager
def run_lock(run_dir: str | Path) -> Iterator[None]:
    """Hold the run directory's lock: a second process continuing the same run is refused while this one lives."""
    path = RunLayout(run_dir).lock
    fh = open(path, "a")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        raise InputError(f"run {Path(run_dir).name} is being run by another process; wait for it to finish, or "
                         "start a new run id") from None
    try:
        yield
    finally:
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


def read_summary(run_dir: str | Path, name: str):
    """The run-directory summary ``name`` (``ingest``, ``split_summary``, ``imputation``, ``released_count``) as its
    typed record (:data:`privehr.core.records.RUN_RECORDS`), read from disk once per version of the file: a grid's
    hundreds of tasks ask for the same few summaries."""
    path = getattr(RunLayout(run_dir), name)
    stat = path.stat()
    return _read(str(path), name, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=64)
def _read(path: str, name: str, mtime_ns: int, size: int):
    return RUN_RECORDS[name].model_validate_json(Path(path).read_text())
