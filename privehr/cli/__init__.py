"""``privehr``: the command line in front of every user-facing action.

Every command takes ``--json`` for machine-readable output. Errors in the input print one message
naming the problem and the fix (exit status 2), not a traceback.

The package, one module per command group:

- :mod:`privehr.cli.app`: the parser, assembled from the modules below, and :func:`main` (the console script
  ``privehr``): input errors as one message, one retry of Prefect's temporary server, the watchdog
- :mod:`privehr.cli.common`: the ``--json``/``--debug`` parent options, output, the ``PipelineConfig`` options and
  loading, the settings of releasing runs (``--config`` YAML, then the options given)
- :mod:`privehr.cli.data`: ``demo-data mimic|ehr``, ``inspect``
- :mod:`privehr.cli.expectations`: ``expectations build``, ``spec draft``
- :mod:`privehr.cli.validate`: ``validate``, ``ehr-prepare``
- :mod:`privehr.cli.run`: ``run``, ``config``
- :mod:`privehr.cli.privacy`: ``privacy ledger``, ``privacy convert``
- :mod:`privehr.cli.synthesize`: ``synthesize``
- :mod:`privehr.cli.infer`: ``infer``
- :mod:`privehr.cli.audit`: ``audit``
- :mod:`privehr.cli.serve`: ``serve``
- :mod:`privehr.cli.watchdog`: ends the processes of a killed command (Prefect's temporary server)

Heavy libraries (prefect, torch, great_expectations, pandas) are imported inside the handlers that need them, so
that ``privehr --help``, ``privehr config`` and ``privehr inspect`` start quickly.
"""

from __future__ import annotations

from privehr.cli.app import main

__all__ = ["main"]
