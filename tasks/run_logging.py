"""The run logger inside Prefect, a plain logger outside (e.g. ``task.fn(...)`` in tests), the test for being
inside a Prefect run at all, and what may be logged where.

Log counts and shapes, never rows or values of patients. Exact cohort, split and left-out counts go through
:func:`exact`: Prefect stores every log line in its database, and where its API is not on this machine
(``PREFECT_API_URL`` naming another host) that database is outside the hospital, so they are withheld there; the run
warns once (:func:`warn_if_logs_leave`).
"""

import ipaddress
import logging
from functools import lru_cache
from urllib.parse import urlparse

from prefect.context import get_run_context
from prefect.exceptions import MissingContextError
from prefect.logging import get_run_logger

__all__ = ["run_logger", "in_prefect_run", "exact", "prefect_api_is_local", "warn_if_logs_leave", "publishes_artifacts"]


def run_logger():
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("privehr")


def in_prefect_run() -> bool:
    """True inside a flow or task run (where artifacts can be created)."""
    try:
        get_run_context()
        return True
    except MissingContextError:
        return False


def prefect_api_is_local() -> bool:
    """Whether Prefect's API (its database, where every log line goes) is on this machine: unset (a temporary local
    server), or a loopback host."""
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    if not url:
        return True
    host = (urlparse(str(url)).hostname or "").strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exact(value):
    """An exact count of patients or stays, or a number that one patient's presence moves (the most spent patient's
    epsilon), as it may be logged: itself where Prefect's API is local, else withheld."""
    return value if prefect_api_is_local() else "(withheld: Prefect's API is not on this machine)"


@lru_cache(maxsize=1)
def warn_if_logs_leave() -> bool:
    """Warn once per process that the logs go to a Prefect API on another host; return whether they do."""
    if prefect_api_is_local():
        return False
    run_logger().warning("Prefect's API (PREFECT_API_URL) is not on this machine: every log line of this run leaves it. "
                         "Exact cohort, split and left-out counts are withheld from the logs, and summary artifacts are "
                         "not written there; both are in the run directory.")
    return True


def publishes_artifacts() -> bool:
    """Whether a task may write its summary artifacts (tables of counts and results) to Prefect's database: inside a
    run, and only where that database is on this machine; elsewhere they stay in the run directory."""
    return in_prefect_run() and prefect_api_is_local()
