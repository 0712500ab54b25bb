"""The run logger inside Prefect, a plain logger outside (e.g. ``task.fn(...)`` in tests), and the test
for being inside a Prefect run at all.

Log counts and shapes, never rows or values of patients.
"""

import logging

from prefect.context import get_run_context
from prefect.exceptions import MissingContextError
from prefect.logging import get_run_logger

__all__ = ["run_logger", "in_prefect_run"]


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
