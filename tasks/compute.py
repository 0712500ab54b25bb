"""How concurrent task runs share the machine: a fixed number of runs at once, each with its share of
the cores for torch's intra-op threads (oversubscribed OpenMP threads spin and slow everyone down)."""

from __future__ import annotations

import os

import torch

__all__ = ["CONCURRENT_FITS", "share_cores"]

CONCURRENT_FITS = 2  # task runs a flow trains at once (its ThreadPoolTaskRunner's workers)


def share_cores() -> None:
    """Give torch cores / CONCURRENT_FITS threads (the setting is per process: every task run sets the same)."""
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // CONCURRENT_FITS))
