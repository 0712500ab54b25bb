"""The k-way marginal workload error: hand-computed TVs, identity, half-L1 (not L1), sampling of subsets."""

import itertools

import numpy as np
import pandas as pd
import pytest

from privehr.models.evaluation.marginal_workload import (kway_subsets, kway_tv, marginal_workload_summary,
                                                         workload_error)


def test_two_column_tables_by_hand():
    # real: (0,0) 1/2, (1,1) 1/2; synthetic: (0,0) 1/4, (0,1) 1/4, (1,1) 1/2 -> |diff| = 1/4 + 1/4, TV = 1/4
    real = np.array([[0, 0], [0, 0], [1, 1], [1, 1]])
    syn = np.array([[0, 0], [0, 1], [1, 1], [1, 1]])
    assert kway_tv(real, syn, (2, 2), (0, 1)) == pytest.approx(0.25)
    summary = marginal_workload_summary(real, syn, (2, 2))
    assert summary["tv2_mean"] == pytest.approx(0.25)
    assert summary["tv2_subsets"] == 1
    assert np.isnan(summary["tv3_mean"]) and summary["tv3_subsets"] == 0  # two columns have no 3-way subset


def test_half_l1_not_l1():
    # disjoint supports: L1 = 2, TV = 1 (an L1 implementation fails here)
    real = np.array([[0, 0], [1, 1]])
    syn = np.array([[0, 1], [1, 0]])
    assert kway_tv(real, syn, (2, 2), (0, 1)) == pytest.approx(1.0)
    # a partial mismatch: real (0,0) 1; synthetic (0,0) 3/5, (1,2) 2/5 -> L1 = 4/5, TV = 2/5
    real = np.zeros((5, 2), int)
    syn = np.array([[0, 0]] * 3 + [[1, 2]] * 2)
    assert workload_error(real, syn, (2, 3), 2)["mean"] == pytest.approx(0.4)


def test_three_way_by_hand():
    real = np.array([[0, 0, 0], [1, 1, 1]])
    syn = np.array([[0, 0, 1], [1, 1, 1]])
    summary = marginal_workload_summary(real, syn, (2, 2, 2))
    # 2-way: (0,1) equal -> 0; (0,2) and (1,2): real (0,0),(1,1); synthetic (0,1),(1,1) -> 1/2 each
    assert summary["tv2_mean"] == pytest.approx(1 / 3)
    assert summary["tv2_max"] == pytest.approx(0.5)
    assert summary["tv3_mean"] == pytest.approx(0.5)


def test_identical_distributions_give_zero():
    rng = np.random.default_rng(0)
    domain = (3, 4, 2, 5)
    real = np.column_stack([rng.integers(0, s, 200) for s in domain])
    summary = marginal_workload_summary(real, real[rng.permutation(200)], domain)
    assert summary["tv2_mean"] == 0.0 and summary["tv3_mean"] == 0.0
    assert summary["tv2_subsets"] == 6 and summary["tv3_subsets"] == 4
    # the same distribution in twice as many rows (the tables are normalised), as a data frame
    doubled = pd.DataFrame(np.vstack([real, real]))
    assert marginal_workload_summary(real, doubled, domain)["tv3_mean"] == 0.0


def test_large_tables_match_dense_counting():
    # 3 columns of 200 levels: 8e6 cells, counted over the used cells only; same TV as a plain dictionary count
    rng = np.random.default_rng(1)
    domain = (200, 200, 200)
    real = rng.integers(0, 5, (300, 3)) * 40
    syn = rng.integers(0, 5, (250, 3)) * 40
    expected = 0.0
    cells = set(map(tuple, real)) | set(map(tuple, syn))
    for cell in cells:
        p = np.mean((real == cell).all(axis=1))
        q = np.mean((syn == cell).all(axis=1))
        expected += 0.5 * abs(p - q)
    assert kway_tv(real, syn, domain, (0, 1, 2)) == pytest.approx(expected)


def test_subsets_sampled_with_a_fixed_seed():
    all_pairs, sampled = kway_subsets(6, 2)
    assert all_pairs == list(itertools.combinations(range(6), 2)) and not sampled
    first, sampled = kway_subsets(30, 3, max_subsets=2000)
    assert sampled and len(first) == 2000 == len(set(first))
    assert all(a < b < c for a, b, c in first)
    assert kway_subsets(30, 3, max_subsets=2000) == (first, True)
    real = np.zeros((10, 30), int)
    summary = marginal_workload_summary(real, real, (2,) * 30)
    assert summary["tv3_sampled"] and summary["tv3_subsets"] == 2000 and not summary["tv2_sampled"]


def test_bad_codes_are_refused():
    with pytest.raises(ValueError, match="outside"):
        kway_tv(np.array([[0, 2]]), np.array([[0, 1]]), (2, 2), (0, 1))
    with pytest.raises(ValueError, match="n x 2"):
        workload_error(np.zeros((3, 3), int), np.zeros((3, 2), int), (2, 2), 2)
    with pytest.raises(ValueError, match="non-integer"):
        workload_error(np.array([[0.5, 0]]), np.zeros((1, 2), int), (2, 2), 2)
