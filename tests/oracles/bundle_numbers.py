"""The differencing attack's reader: every number of a bundle file, by its path (test-only; never shipped)."""

from __future__ import annotations

import math

import torch

__all__ = ["leaves"]


def leaves(value, key=()):
    """Every finite number of a JSON value or a saved torch object, by its path (tensors element by element).

    >>> dict(leaves({"a": [1, 2.5], "b": {"c": True, "d": float("nan")}, "t": torch.tensor([3.0])}))
    {('a', 0): 1, ('a', 1): 2.5, ('t', 0): 3.0}
    """
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, (*key, k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from leaves(v, (*key, i))
    elif isinstance(value, torch.Tensor):
        for i, v in enumerate(value.flatten().tolist()):
            yield (*key, i), v
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        yield key, value
