"""AIM and MST on mbi >= 2 (privehr.models.synthesis.marginal).

The tables are drawn from fixed generators so the checks are repeatable; the privacy claims do not
rest on these seeds (a DP release passes a generator seeded from OS entropy).
"""

import math

import numpy as np
import pytest

from privehr.models.privacy.zcdp import cdp_rho
from privehr.models.synthesis.marginal import (MARGINAL_MECHANISMS, marginal_available,
                                       synthesize_marginal)



def test_private_pgm_is_installed_and_imports():
    """private-pgm (mbi >= 2, on JAX) is a dependency: a broken install fails here, by name, instead of skipping."""
    from privehr.models.synthesis.marginal import _mbi

    mbi = _mbi()  # raises what a broken jax/jaxlib/mbi install raises
    assert marginal_available() and hasattr(mbi, "estimation")

DOMAIN = [4, 4, 3, 5, 2]
FAST_AIM = {"rounds": 10, "max_iters": 100, "final_iters": 300}  # keeps each AIM run to seconds
FAST_MST = {"select_iters": 300, "final_iters": 500}


def correlated_table(n: int = 600, seed: int = 0) -> np.ndarray:
    """Column 1 copies column 0; column 3 follows column 2 most of the time; column 4 is noise."""
    g = np.random.default_rng(seed)
    x = np.empty((n, len(DOMAIN)), dtype=np.int64)
    x[:, 0] = g.choice(4, n, p=[0.4, 0.3, 0.2, 0.1])
    x[:, 1] = x[:, 0]
    x[:, 2] = g.choice(3, n, p=[0.5, 0.3, 0.2])
    x[:, 3] = np.where(g.random(n) < 0.8, x[:, 2] + 1, g.integers(0, 5, n))
    x[:, 4] = g.integers(0, 2, n)
    return x


def one_way_tv(real: np.ndarray, synth: np.ndarray, j: int) -> float:
    p = np.bincount(real[:, j], minlength=DOMAIN[j]) / len(real)
    q = np.bincount(synth[:, j], minlength=DOMAIN[j]) / len(synth)
    return 0.5 * float(np.abs(p - q).sum())


def fast(mechanism: str) -> dict:
    return FAST_AIM if mechanism == "aim" else FAST_MST


def test_unknown_mechanism_and_bad_input_are_refused():
    with pytest.raises(ValueError, match="unknown marginal mechanism"):
        synthesize_marginal("mwem", correlated_table(), DOMAIN, 1.0, 1e-5, 10, np.random.default_rng())
    assert set(MARGINAL_MECHANISMS) == {"aim", "mst"}


def test_bad_input_is_refused_before_any_noise():
    codes = correlated_table()
    with pytest.raises(TypeError, match="Generator"):
        synthesize_marginal("mst", codes, DOMAIN, 1.0, 1e-5, 10, 7)
    with pytest.raises(ValueError, match="outside"):
        synthesize_marginal("mst", codes, [4, 4, 3, 4, 2], 1.0, 1e-5, 10, np.random.default_rng())
    with pytest.raises(TypeError, match="no option"):
        synthesize_marginal("mst", codes, DOMAIN, 1.0, 1e-5, 10, np.random.default_rng(), rounds=3)
    with pytest.raises(ValueError, match="delta"):
        synthesize_marginal("aim", codes, DOMAIN, 1.0, 0.0, 10, np.random.default_rng())


@pytest.mark.parametrize("mechanism", ["aim", "mst"])
def test_large_epsilon_keeps_marginals_and_the_copied_pair(mechanism):
    real = correlated_table()
    synth, info = synthesize_marginal(mechanism, real, DOMAIN, 50.0, 1e-5, 800, np.random.default_rng(11),
                                      **fast(mechanism))
    assert synth.shape == (800, len(DOMAIN)) and np.issubdtype(synth.dtype, np.integer)
    assert all(0 <= synth[:, j].min() and synth[:, j].max() < k for j, k in enumerate(DOMAIN))
    assert max(one_way_tv(real, synth, j) for j in range(len(DOMAIN))) < 0.05
    assert np.mean(synth[:, 1] == synth[:, 0]) > 0.9  # the copy (1.0 in the real table) survives
    assert np.mean(synth[:, 3] == synth[:, 2] + 1) > 0.7  # 0.84 in the real table, 0.2 if independent
    selected = {tuple(c) for c in info["selected"]}
    assert (0, 1) in selected
    assert info["mechanism"] == mechanism and info["epsilon"] == 50.0 and info["delta"] == 1e-5
    assert info["rho"] == cdp_rho(50.0, 1e-5) and int(info["mbi_version"].split(".")[0]) >= 2


@pytest.mark.parametrize("mechanism", ["aim", "mst"])
def test_rho_spent_is_the_budget(mechanism):
    _, info = synthesize_marginal(mechanism, correlated_table(), DOMAIN, 2.0, 1e-6, None, np.random.default_rng(5),
                                  **fast(mechanism))
    gaussian = [1 / (2 * m["sigma"] ** 2) for m in info["measurements"]]
    selection = [s["epsilon"] ** 2 / 8 for s in info["selections"]]
    assert math.fsum(gaussian + selection) == pytest.approx(info["rho"], rel=1e-9)
    assert info["rho_spent"] == pytest.approx(info["rho"], rel=1e-9)
    assert info["rho"] == cdp_rho(2.0, 1e-6)
    d = len(DOMAIN)
    if mechanism == "mst":  # a third each: d one-way, d - 1 selections, d - 1 two-way
        assert len(info["measurements"]) == 2 * d - 1 and len(info["selections"]) == d - 1
        assert math.fsum(gaussian[:d]) == pytest.approx(info["rho"] / 3, rel=1e-9)
        assert math.fsum(selection) == pytest.approx(info["rho"] / 3, rel=1e-9)
    else:  # d one-way, then one selection and one measurement per round
        assert len(info["measurements"]) == d + info["rounds"] == d + len(info["selections"])
    assert info["rows"] == pytest.approx(len(correlated_table()), rel=0.2)  # rows=None: the model's estimate of n


@pytest.mark.parametrize("mechanism", ["aim", "mst"])
def test_the_passed_generator_drives_noise_and_selection(mechanism):
    codes = correlated_table(n=300, seed=1)

    def run(seed):
        return synthesize_marginal(mechanism, codes, DOMAIN, 1.0, 1e-5, 200, np.random.default_rng(seed),
                                   keep_noisy=True, **fast(mechanism))

    synth_a, info_a = run(123)
    synth_b, info_b = run(123)
    synth_c, info_c = run(124)
    assert len(info_a["selections"]) >= 2
    assert [s["chosen"] for s in info_a["selections"]] == [s["chosen"] for s in info_b["selections"]]
    assert info_a["measurements"] == info_b["measurements"]
    assert all(np.array_equal(x, y) for x, y in zip(info_a["noisy_measurements"], info_b["noisy_measurements"]))
    assert np.array_equal(synth_a, synth_b)  # sampling is seeded from the same generator too
    first_a, first_c = info_a["noisy_measurements"][0], info_c["noisy_measurements"][0]
    assert not np.allclose(first_a, first_c)
    assert not np.array_equal(synth_a, synth_c)


def _random_cliques(g: np.random.Generator, d: int, case: int) -> list[tuple[int, ...]]:
    """Clique sets of every shape AIM's size filter sees and some it does not: one-way cliques plus pairs (AIM's
    models), trees, forests, cliques of three and four, columns in no clique, repeated cliques."""
    if case % 4 == 0 and d > 1:  # a random tree (mbi keeps its edges)
        return [(int(g.integers(0, j)), j) for j in range(1, d)]
    cliques = [tuple(sorted(int(a) for a in g.choice(d, size=int(g.integers(1, min(d, 4) + 1)), replace=False)))
               for _ in range(int(g.integers(0, 2 * d + 1)))]
    if case % 4 == 1:  # AIM's: every column's one-way clique, then the selected pairs
        cliques = [(j,) for j in range(d)] + [c[:2] for c in cliques if len(c) >= 2]
    return cliques


def test_model_size_is_mbi_hypothetical_model_size_exactly():
    """AIM's size filter computes mbi's junction-tree size itself (mbi's took O(d^5) Python work a round): the same
    float on random clique sets, up to 40 columns and domains up to 256, ties in the greedy order included."""
    from privehr.models.synthesis.marginal import _mbi, _model_size_mb

    mbi = _mbi()
    g = np.random.default_rng(42)
    for case in range(400):
        d = int(g.integers(1, 41 if case < 20 else 13))
        sizes = [int(k) for k in g.choice([1, 2, 3, 5, 16, 98, 256], size=d)]
        cliques = _random_cliques(g, d, case)
        expected = mbi.junction_tree.hypothetical_model_size(mbi.Domain(tuple(range(d)), tuple(sizes)), cliques)
        assert _model_size_mb(sizes, cliques) == expected, (sizes, cliques)


def test_aim_with_mbi_size_filter_releases_the_same(monkeypatch):
    """With a size limit that excludes candidates, AIM's selections, noisy measurements and rows are those it gives
    with mbi's own size function, from equal generators: the speed-up changes nothing AIM computes."""
    import privehr.models.synthesis.marginal as marginal

    mbi = marginal._mbi()
    codes = correlated_table(n=300, seed=3)
    options = {**FAST_AIM, "max_model_size": 3e-4}  # a pair is 8 to 25 cells, 6e-5 to 1.9e-4 MB: the limit binds

    def run():
        return synthesize_marginal("aim", codes, DOMAIN, 8.0, 1e-5, 200, np.random.default_rng(7), keep_noisy=True,
                                   **options)

    synth_ours, info_ours = run()
    monkeypatch.setattr(marginal, "_model_size_mb", lambda sizes, cliques: mbi.junction_tree.hypothetical_model_size(
        mbi.Domain(tuple(range(len(sizes))), tuple(sizes)), cliques))
    synth_mbi, info_mbi = run()
    candidates = len(DOMAIN) + len(DOMAIN) * (len(DOMAIN) - 1) // 2
    assert any(s["candidates"] < candidates for s in info_ours["selections"])  # the filter removed some
    assert info_ours["selections"] == info_mbi["selections"] and info_ours["measurements"] == info_mbi["measurements"]
    assert all(np.array_equal(x, y) for x, y in zip(info_ours["noisy_measurements"], info_mbi["noisy_measurements"]))
    assert np.array_equal(synth_ours, synth_mbi)
