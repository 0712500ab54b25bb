"""Small random records for the classifiers' tests (test-only): hourly values, mask, delta and a label that
follows the first variable, as the grid's classifiers take them."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["random_records"]


def random_records(n=64, t=6, v=3, seed=0):
    """(values, mask, delta) of shape (n, t, v) and labels y (n,) from a fixed public seed.

    >>> [a.shape for a in random_records(4, 2, 3)[:3]]
    [(4, 2, 3), (4, 2, 3), (4, 2, 3)]
    """
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((n, t, v)).astype(np.float32)
    mask = (rng.random((n, t, v)) > 0.4).astype(np.float32)
    delta = rng.random((n, t, v)).astype(np.float32)
    y = torch.tensor((values[:, :, 0].mean(1) + 0.3 * rng.standard_normal(n) > 0).astype(np.float32))
    return values, mask, delta, y
