"""Files a run writes are its owner's alone: private directories 0700, private files 0600.

A run directory holds patient-level files (imputed patients, quarantined rows, cohort arrays) beside its
aggregates, and its ledger and key decide every dataset's budget. Each flow runs under :func:`private_umask`
(umask 077: whatever a task, Great Expectations, pandas or torch creates is born owner-only), restored when the
flow returns, so an in-process caller keeps its own. Nothing a run writes is group- or world-readable; what a
steward publishes beyond the hospital is copied out of the run on purpose, not served from it.

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
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["PRIVATE_UMASK", "private_umask", "private_run"]

PRIVATE_UMASK = 0o077  # files 0600, directories 0700


@contextmanager
def private_umask() -> Iterator[None]:
    """Create files owner-only for the duration (the umask is the process's: every thread of the run shares it)."""
    previous = os.umask(PRIVATE_UMASK)
    try:
        yield
    finally:
        os.umask(previous)


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
