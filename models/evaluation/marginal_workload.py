"""k-way marginal workload error of a synthetic table: the mean total variation distance between the real and the
synthetic k-way contingency tables over all (or a fixed-seed sample of) k-column subsets.

References:
    McKenna, Mullins, Sheldon, Miklau (2022). AIM: An Adaptive and Iterative Mechanism for Differentially Private
    Synthetic Data. PVLDB 15(11). (The workload error of all 2- and 3-way marginals.)

Both tables come already discretised into integer codes (n x d, column j in 0..domain[j]-1), e.g. by
:meth:`privehr.models.synthesis.codec.TableCodec.discretise` with the same bins for the real and the synthetic rows,
so the cells of a k-way table mean the same thing in both. For one subset S of k columns, each table's counts over
the prod_{j in S} domain[j] cells are normalised to sum 1 (the tables may have different row counts), and

    TV_S = 1/2 sum_cells |p_real(cell) - p_syn(cell)|,   in [0, 1]   (half the L1 distance)

The workload error for k is the mean of TV_S over all C(d, k) subsets; where there are more than ``max_subsets`` of
them, over ``max_subsets`` distinct subsets drawn with a fixed seed (the result says so: ``sampled``). A cell index
is the row-major index of the k codes (one ``np.bincount`` per subset); where the k-way table is large the cells
either table uses are numbered first (``np.unique``), which leaves TV unchanged (an empty cell adds 0).

>>> real = np.array([[0, 0], [0, 0], [1, 1], [1, 1]])
>>> syn = np.array([[0, 0], [0, 1], [1, 1], [1, 1]])
>>> kway_tv(real, syn, (2, 2), (0, 1))
0.25
>>> workload_error(real, syn, (2, 2), 2)["mean"], workload_error(real, syn, (2, 2), 3)["subsets"]
(0.25, 0)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

__all__ = ["MAX_SUBSETS", "kway_subsets", "kway_tv", "workload_error", "marginal_workload_summary"]

MAX_SUBSETS = 2000
DENSE_CELLS = 1 << 20  # k-way tables up to this many cells are counted directly (np.bincount over every cell)


def _codes(table, domain: Sequence[int], what: str) -> np.ndarray:
    """``table`` as an (n, d) int64 array, every code checked against ``domain``."""
    array = table.to_numpy() if isinstance(table, pd.DataFrame) else np.asarray(table)
    if array.ndim != 2 or array.shape[1] != len(domain):
        raise ValueError(f"{what} must be n x {len(domain)} codes (one column per domain size); got shape "
                         f"{array.shape}")
    if array.size and not np.all(np.isfinite(array.astype(float))):
        raise ValueError(f"{what} holds missing or non-finite codes")
    codes = array.astype(np.int64)
    if array.size and not np.array_equal(codes, array):
        raise ValueError(f"{what} holds non-integer codes")
    high = np.asarray(domain, np.int64)
    if array.size and ((codes < 0).any() or (codes >= high).any()):
        bad = sorted({int(j) for j in np.nonzero(((codes < 0) | (codes >= high)).any(axis=0))[0]})
        raise ValueError(f"{what}: column(s) {bad} hold codes outside 0..domain-1")
    return codes


def kway_subsets(d: int, k: int, max_subsets: int = MAX_SUBSETS, seed: int = 0) -> tuple[list[tuple[int, ...]], bool]:
    """(subsets, sampled): every k-column subset of d columns in lexicographic order, or ``max_subsets`` distinct
    ones drawn with ``seed`` (sorted) when C(d, k) is larger.

    >>> kway_subsets(4, 3)
    ([(0, 1, 2), (0, 1, 3), (0, 2, 3), (1, 2, 3)], False)
    >>> subsets, sampled = kway_subsets(30, 3, max_subsets=100)
    >>> len(subsets), len(set(subsets)), sampled
    (100, 100, True)
    """
    if k < 1 or d < k:
        return [], False
    if math.comb(d, k) <= max_subsets:
        return list(itertools.combinations(range(d), k)), False
    rng = np.random.default_rng(seed)
    chosen: set[tuple[int, ...]] = set()
    while len(chosen) < max_subsets:
        chosen.add(tuple(sorted(int(j) for j in rng.choice(d, size=k, replace=False))))
    return sorted(chosen), True


def _tv(real: np.ndarray, synthetic: np.ndarray, dims: tuple[int, ...]) -> float:
    """TV between the normalised contingency tables of two code arrays over the same columns (n x k each)."""
    cells = math.prod(dims)
    a = np.ravel_multi_index(tuple(real.T), dims) if len(real) else np.zeros(0, np.int64)
    b = np.ravel_multi_index(tuple(synthetic.T), dims) if len(synthetic) else np.zeros(0, np.int64)
    if cells > DENSE_CELLS:  # number the cells either table uses: an empty cell adds nothing to TV
        used, index = np.unique(np.concatenate([a, b]), return_inverse=True)
        a, b, cells = index[:len(a)], index[len(a):], len(used)
    p = np.bincount(a, minlength=cells) / len(a)
    q = np.bincount(b, minlength=cells) / len(b)
    return float(0.5 * np.abs(p - q).sum())


def kway_tv(real, synthetic, domain: Sequence[int], columns: Sequence[int]) -> float:
    """TV (half L1) between the normalised contingency tables of ``columns`` in the two code tables (NaN where
    either table has no rows)."""
    domain = tuple(int(s) for s in domain)
    real, synthetic = _codes(real, domain, "real"), _codes(synthetic, domain, "synthetic")
    if not len(real) or not len(synthetic):
        return float("nan")
    columns = list(columns)
    return _tv(real[:, columns], synthetic[:, columns], tuple(domain[j] for j in columns))


def workload_error(real, synthetic, domain: Sequence[int], k: int, max_subsets: int = MAX_SUBSETS,
                   seed: int = 0) -> dict:
    """The k-way workload error: ``mean`` (and ``max``) of TV over the k-column subsets, how many ``subsets`` were
    used of how many exist (``of``), and whether they were ``sampled`` (mean NaN where d < k or a table is empty)."""
    domain = tuple(int(s) for s in domain)
    real, synthetic = _codes(real, domain, "real"), _codes(synthetic, domain, "synthetic")
    subsets, sampled = kway_subsets(len(domain), k, max_subsets, seed)
    of = math.comb(len(domain), k) if len(domain) >= k else 0
    if not subsets or not len(real) or not len(synthetic):
        return {"k": k, "mean": float("nan"), "max": float("nan"), "subsets": len(subsets), "of": of,
                "sampled": sampled}
    tvs = np.array([_tv(real[:, s], synthetic[:, s], tuple(domain[j] for j in s)) for s in subsets])
    return {"k": k, "mean": float(tvs.mean()), "max": float(tvs.max()), "subsets": len(subsets), "of": of,
            "sampled": sampled}


def marginal_workload_summary(real, synthetic, domain: Sequence[int], ks: Sequence[int] = (2, 3),
                              max_subsets: int = MAX_SUBSETS, seed: int = 0) -> dict:
    """``tv{k}_mean`` and ``tv{k}_max`` for each k in ``ks``, with ``tv{k}_subsets`` (how many were averaged) and
    ``tv{k}_sampled`` (True: a fixed-seed sample of ``max_subsets`` of the C(d, k) subsets).

    >>> real = np.array([[0, 0, 0], [1, 1, 1]])
    >>> summary = marginal_workload_summary(real, np.array([[0, 0, 1], [1, 1, 1]]), (2, 2, 2))
    >>> round(summary["tv2_mean"], 4), summary["tv3_mean"], summary["tv3_subsets"], summary["tv3_sampled"]
    (0.3333, 0.5, 1, False)
    """
    out = {}
    for k in ks:
        result = workload_error(real, synthetic, domain, k, max_subsets, seed)
        out |= {f"tv{k}_mean": result["mean"], f"tv{k}_max": result["max"], f"tv{k}_subsets": result["subsets"],
                f"tv{k}_sampled": result["sampled"]}
    return out
