"""Errors a user can act on: each names the input, the problem and the fix."""


class InputError(ValueError):
    """Bad input data or configuration. ``str(err)`` is the whole message shown to the user."""
