"""Strict JSON for everything privehr writes: the ledger, result files, ``metrics.json``, ``--json`` output.

Python's ``json`` writes ``Infinity`` and ``NaN`` by default, which no strict parser reads. Here every
non-finite float (numpy's too) becomes ``null`` and ``allow_nan=False`` guards the rest.

>>> strict_dumps({"epsilon": float("inf"), "auroc": [0.5, float("nan")]})
'{"epsilon": null, "auroc": [0.5, null]}'
"""

from __future__ import annotations

import json
import math

import numpy as np

__all__ = ["strict_json", "strict_dumps"]


def strict_json(value):
    """``value`` with every non-finite float (numpy's too) replaced by None, through dicts, lists and tuples."""
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def strict_dumps(value, **kwargs) -> str:
    """``json.dumps`` of :func:`strict_json` (``value``), refusing any non-finite float left (``allow_nan=False``)."""
    return json.dumps(strict_json(value), allow_nan=False, **kwargs)
