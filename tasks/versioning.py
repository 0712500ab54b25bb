"""Versioning with DVC: pull missing raw inputs at the start of a run; at its end ``dvc add`` the run
directory (without its patient-level intermediates) and push it."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from privehr.tasks.run_logging import run_logger

__all__ = ["version_run", "pull_inputs"]


@task(name="version-run")
def version_run(run_dir: str, push: bool = True) -> dict:
    """Track ``run_dir`` with DVC in the enclosing DVC project; push to its default remote if any.

    The project's ``.dvcignore`` keeps ``artifacts/*/intermediate/`` out of the tracked directory.
    Returns what was done (a skipped step says why).
    """
    from dvc.exceptions import NotDvcRepoError
    from dvc.repo import Repo

    log = run_logger()
    run_path = Path(run_dir).resolve()
    try:
        root = Repo.find_root(str(run_path.parent))
    except NotDvcRepoError:
        log.warning("not versioned: %s is not inside a DVC project (run `dvc init`)", run_path)
        return {"versioned": False, "reason": "not inside a DVC project"}
    with Repo(root) as repo:
        repo.add([str(run_path)])
        dvc_file = run_path.with_name(run_path.name + ".dvc")
        remote = repo.config["core"].get("remote")
        pushed = 0
        if push and remote:
            pushed = repo.push(targets=[str(dvc_file)])
    result = {"versioned": True, "dvc_file": str(dvc_file), "remote": remote if push else None,
              "pushed_files": int(pushed or 0)}
    log.info("versioned %s with DVC (remote: %s, %d files pushed)", run_path.name, result["remote"],
             result["pushed_files"])
    return result


@task(name="pull-inputs")
def pull_inputs(paths: list[str]) -> dict:
    """``dvc pull`` each raw input that is missing locally, from the DVC project's default remote.

    An input that exists is never touched (a local copy is never overwritten); one outside a DVC
    project, or in a project without a default remote, is left to the run's own checks. Returns,
    per path, what was done.
    """
    from dvc.exceptions import DvcException, NotDvcRepoError
    from dvc.repo import Repo

    log, done = run_logger(), {}
    for path in map(Path, paths):
        if path.exists():
            done[str(path)] = "present"
            continue
        try:
            root = Repo.find_root(str(path.resolve().parent if path.parent.exists() else Path.cwd()))
        except NotDvcRepoError:
            done[str(path)] = "missing; not in a DVC project"
            continue
        with Repo(root) as repo:
            if not repo.config["core"].get("remote"):
                done[str(path)] = "missing; the DVC project has no default remote"
                continue
            try:
                repo.pull(targets=[str(path.resolve())])
                done[str(path)] = "pulled" if path.exists() else "missing; not tracked by DVC"
            except DvcException as err:
                done[str(path)] = f"missing; dvc pull failed: {type(err).__name__}"
    log.info("pull-inputs: %s", done)
    return done
