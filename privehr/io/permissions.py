"""Files a run writes are its owner's alone: private directories 0700, private files 0600.

A run directory holds patient-level files (imputed patients, quarantined rows, cohort arrays) beside its
aggregates, and its ledger and key decide every dataset's budget. Each flow runs under :func:`private_umask`
(umask 077: whatever a task, Great Expectations, pandas or torch creates is born owner-only), restored when the
flow returns, so an in-process caller keeps its own. Nothing a run writes is group- or world-readable; what a
steward publishes beyond the hospital is copied out of the run on purpose, not served from it. A private file a
command writes where the user points it (``spec draft --out``, ``predict --out``) goes through :func:`private_file`
(0600 also over an existing file); trees another tool writes in its own modes (DVC's cache and local remote) are
made owner-only afterwards by :func:`make_private`.

>>> import os, tempfile
>>> with private_umask(), tempfile.TemporaryDirectory() as d:
...     open(os.path.join(d, "f"), "w").close()
...     oct(os.stat(os.path.join(d, "f")).st_mode & 0o777)
'0o600'
"""

from __future__ import annotations

import functools
import inspect
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["PRIVATE_UMASK", "private_umask", "private_run", "private_file", "make_private"]

PRIVATE_UMASK = 0o077  # files 0600, directories 0700


@contextmanager
def private_umask() -> Iterator[None]:
    """Create files owner-only for the duration (the umask is the process's: every thread of the run shares it)."""
    previous = os.umask(PRIVATE_UMASK)
    try:
        yield
    finally:
        os.umask(previous)


@contextmanager
def private_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a fresh 0600 file beside ``path`` to write; when the block ends without error it replaces ``path``.

    Writing over an existing file in place keeps that file's mode (a 0644 file opened for writing stays 0644), so a
    private file is never written in place: it is born owner-only and renamed over the old one. Missing parent
    directories are made owner-only (0700). On error the temporary file is removed and ``path`` is left as it was.
    """
    target = Path(path)
    with private_umask():
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)  # 0600
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o600)  # whatever the writer did to it
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def make_private(root: str | os.PathLike) -> int:
    """Take group and other permissions off ``root`` and everything under it (links are not followed); returns
    how many entries were changed. For trees a third-party tool writes with its own modes (DVC's cache and remote
    store files 0444 and make directories 0755)."""
    changed = 0
    if not os.path.lexists(root):
        return 0
    paths = [root]
    for folder, dirs, files in os.walk(root):  # links to directories are listed, not entered
        paths += [os.path.join(folder, name) for name in dirs + files]
    for path in paths:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode) or not stat.S_IMODE(mode) & 0o077:
            continue
        os.chmod(path, stat.S_IMODE(mode) & ~0o077)
        changed += 1
    return changed


def private_run(fn):
    """Decorate a flow's function (under ``@flow``): its whole run under :func:`private_umask`. The wrapper carries
    ``fn``'s signature with its annotations resolved, so Prefect builds the same parameter schema."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with private_umask():
            return fn(*args, **kwargs)
    signature = inspect.signature(fn, eval_str=True)
    del run.__wrapped__
    run.__signature__ = signature
    run.__annotations__ = {**{n: p.annotation for n, p in signature.parameters.items()
                              if p.annotation is not inspect.Parameter.empty},
                           **({"return": signature.return_annotation}
                              if signature.return_annotation is not inspect.Signature.empty else {})}
    return run
