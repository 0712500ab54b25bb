"""The run logger inside Prefect, a plain logger outside (e.g. ``task.fn(...)`` in tests).

Log counts and shapes, never rows or values of patients.
"""

import logging

from prefect.exceptions import MissingContextError
from prefect.logging import get_run_logger

__all__ = ["run_logger"]


def run_logger():
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("privehr")
