"""Versioning with DVC: pull missing raw inputs at the start of a run; at its end ``dvc add`` the run
directory (without its patient-level intermediates) and push it.

DVC stores what it versions in its own modes: cache and local-remote files 0444, folders by the umask DVC was
imported under (0755 where ``dvc add data`` ran from a shell). Its one sharing option, ``cache.shared: group``,
only widens them. So after each add, push and pull the project's cache and a local remote are made owner-only
(:func:`~privehr.io.permissions.make_private`): what a run versions is never group- or world-readable there. A
remote elsewhere (S3, SSH) keeps its own access control.
"""

from __future__ import annotations

from pathlib import Path

from prefect import task

from privehr.io.permissions import make_private, private_umask
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
    with private_umask(), Repo(root) as repo:
        remote = repo.config["core"].get("remote")
        stores = _local_stores(repo, remote if push else None)
        for store in stores:  # owner-only before DVC writes into them, and again after
            store.mkdir(parents=True, exist_ok=True)
            make_private(store)
        dvc_file, pushed = run_path.with_name(run_path.name + ".dvc"), 0
        try:
            repo.add([str(run_path)])
            if push and remote:
                pushed = repo.push(targets=[str(dvc_file)])
        finally:  # also what a failed push left
            for store in stores:
                make_private(store)
    result = {"versioned": True, "dvc_file": str(dvc_file), "remote": remote if push else None,
              "pushed_files": int(pushed or 0)}
    log.info("versioned %s with DVC (remote: %s, %d files pushed)", run_path.name, result["remote"],
             result["pushed_files"])
    return result


def _local_stores(repo, remote: str | None) -> list[Path]:
    """The project's local cache, and the remote ``remote`` where it is a local folder."""
    stores = [Path(repo.cache.local_cache_dir)] if repo.cache.local_cache_dir else []
    if remote:
        store = repo.cloud.get_remote(remote)
        if store.fs.protocol == "local":
            stores.append(Path(store.path))
    return stores


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
                with private_umask():
                    repo.pull(targets=[str(path.resolve())])
                done[str(path)] = "pulled" if path.exists() else "missing; not tracked by DVC"
            except DvcException as err:
                done[str(path)] = f"missing; dvc pull failed: {type(err).__name__}"
            for store in [*_local_stores(repo, None), path]:  # raw patient data: the owner's alone
                make_private(store)
    log.info("pull-inputs: %s", done)
    return done
