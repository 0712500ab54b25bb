"""Values within a marginal method's bins: a DP dyadic histogram of each continuous column, then sampling down it.

AIM and MST (:mod:`privehr.models.synthesis.marginal`) see a continuous column as ``B`` equal-width bins of its
public bounds, and the way back draws a value uniformly within the synthetic row's bin. Clinical columns are
rarely uniform within a bin of public bounds: a follow-up time bounded by 0 and 3,000 days, or a receptor count
bounded by 0 and 1,500, puts most patients into the first bin or two, where a uniform draw misplaces them (the KS
distance of the column is then about the share of that bin). Issue 28 asked for a hybrid: "AIM's discretised
joint plus a DP model of values within bins". This module is that model.

Mechanism
---------
Each continuous column's bins are refined ``levels`` times by halving: level l (1..L) has ``B * 2**l`` cells of
width (high - low) / (B 2^l). One record adds 1 to exactly one cell per level per column, so the vector of all
levels of all m continuous columns has L2 sensitivity sqrt(L m) under adding or removing one record. Every cell
is measured once with Gaussian noise N(0, sigma^2), sigma^2 = L m / (2 rho_w): that is rho_w-zCDP (Bun and
Steinke 2016, Prop. 1.6), and it composes with the marginal method's own rho by adding (the hybrid gives the
marginal method rho - rho_w, so the whole release spends the rho of its (epsilon, delta), converted as
:mod:`privehr.models.synthesis.marginal` does). The cells and their bounds are public (equal-width refinements
of the public bounds); no data choose them.

Sampling is post-processing of the noisy counts: a synthetic row in bin b of a column starts at the bin's node
and goes down the tree. At a node with noisy child counts (a, b), both clipped at zero, it stops where
a + b < ``stop`` * sigma * sqrt(2) (the children are mostly noise there) and otherwise moves to the left child
with probability a / (a + b); the value is then uniform within the node it stopped at. A heavy bin is thus
refined to the depth its counts support, a light one stays uniform as before: at worst the hybrid spends
``share`` of the budget for nothing. The depth reached is a function of the noisy counts only.

This is a hierarchical histogram in the manner of Hay, Rastogi, Miklau, Suciu, "Boosting the accuracy of
differentially private histograms through consistency", VLDB 2010 (there with Laplace noise and a consistency
step, here with Gaussian noise, the stopping rule above and no consistency step); the split of a budget between a
marginal method and a within-bin model follows the hybrid issue 28 proposed.

A value that was missing and stands in as the public placeholder (``synthesis.missing: in_release``) is left out of
its column's histograms (the caller passes the observed records only): the placeholder sits on a bin edge, and
counting it would pile synthetic observed values onto it. Leaving records out changes no sensitivity.

Not covered: the within-bin value of a row depends on its bin only (not on its other columns: the marginal
method's joint carries the dependence between bins, and within a bin the columns are independent); bounded
("replace one record") neighbours would double rho_w.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privehr.models.synthesis.marginal import _gaussian

__all__ = ["DyadicHistograms", "measure_dyadic", "sample_within_bins", "dyadic_sigma"]


def dyadic_sigma(columns: int, levels: int, rho: float) -> float:
    """sigma of every cell: the L2 sensitivity sqrt(levels * columns) over sqrt(2 rho).

    >>> round(dyadic_sigma(2, 4, 0.5), 6)  # sqrt(8) / sqrt(1)
    2.828427
    """
    if columns < 1 or levels < 1 or not rho > 0:
        raise ValueError("need columns >= 1, levels >= 1 and rho > 0")
    return float(np.sqrt(levels * columns / (2.0 * rho)))


@dataclass(frozen=True)
class DyadicHistograms:
    """The noisy counts of each continuous column's refinements: ``counts[j][l - 1]`` has ``bins * 2**l`` cells."""

    bins: int
    levels: int
    sigma: float
    rho: float
    counts: tuple[tuple[np.ndarray, ...], ...]


def measure_dyadic(fine, bins: int, levels: int, rho: float, rng: np.random.Generator) -> DyadicHistograms:
    """Measure every level of every column of ``fine`` with Gaussian noise at ``rho``-zCDP in all; ``rng`` draws the
    noise (OS entropy for a DP release). ``fine`` is an n x m int array or a list of m 1-D int arrays (a column's
    records may be a subset, e.g. those whose value was observed): each value a record's cell at the finest level,
    0 .. bins * 2**levels - 1. A record adds at most one cell per level per column either way."""
    columns = [np.asarray(c) for c in (list(np.asarray(fine).T) if isinstance(fine, np.ndarray) else fine)]
    if not columns or any(c.ndim != 1 for c in columns):
        raise ValueError("fine must be n x m, or a list of m >= 1 one-dimensional arrays")
    cells = bins * 2 ** levels
    if any(c.size and (c.min() < 0 or c.max() >= cells) for c in columns):
        raise ValueError(f"fine codes must lie in 0 .. {cells - 1}")
    sigma = dyadic_sigma(len(columns), levels, rho)
    counts = []
    for column in columns:
        exact = np.bincount(column.astype(np.int64), minlength=cells).astype(float)
        per_level = []
        for level in range(levels, 0, -1):  # finest first; each coarser level sums pairs of the one below
            per_level.append(exact + _gaussian(rng, sigma, exact.size))
            exact = exact.reshape(-1, 2).sum(axis=1)
        counts.append(tuple(reversed(per_level)))
    return DyadicHistograms(bins, levels, sigma, rho, tuple(counts))


def sample_within_bins(histograms: DyadicHistograms, column: int, coarse: np.ndarray, low: float, high: float,
                       rng: np.random.Generator, stop: float = 2.0) -> np.ndarray:
    """Values (frame units) for rows whose bin in ``column`` is ``coarse``: down the noisy tree while its counts
    carry signal (module docstring), then uniform within the node reached. Post-processing: ``rng`` may be public."""
    coarse = np.asarray(coarse, dtype=np.int64)
    node = coarse.copy()            # index at the current level
    depth = np.zeros(len(coarse), dtype=np.int64)
    active = np.ones(len(coarse), dtype=bool)
    threshold = stop * histograms.sigma * np.sqrt(2.0)
    for level, counts in enumerate(histograms.counts[column], start=1):
        rows = np.flatnonzero(active)
        if rows.size == 0:
            break
        left = np.clip(counts[2 * node[rows]], 0.0, None)
        right = np.clip(counts[2 * node[rows] + 1], 0.0, None)
        total = left + right
        go = total >= threshold
        rows, left, total = rows[go], left[go], total[go]
        active[:] = False
        active[rows] = True
        node[rows] = 2 * node[rows] + (rng.random(rows.size) >= left / total)
        depth[rows] = level
    width = (high - low) / (histograms.bins * 2.0 ** depth)
    return low + (node + rng.random(len(coarse))) * width
