"""Marginal-based DP synthetic data: the AIM and MST baselines, on private-pgm's ``mbi`` >= 2.

* AIM: McKenna, Mullins, Sheldon, Miklau, "AIM: An Adaptive and Iterative Mechanism for
  Differentially Private Synthetic Data", VLDB 2022, arXiv:2201.12677 (Algorithm 1).
* MST: McKenna, Miklau, Sheldon, "Winning the NIST Contest: A scalable and general approach to
  differentially private synthetic data", Journal of Privacy and Confidentiality 2021,
  arXiv:2108.04978 (Algorithm 1 and Section 4).
* Private-PGM, the estimation both rest on: McKenna, Sheldon, Miklau, "Graphical-model based
  estimation and inference for differential privacy", ICML 2019, arXiv:1901.09136;
  https://github.com/ryan112358/private-pgm, packaged on PyPI as ``mbi`` (``pip install
  privehr[baselines]``).

Input and output are per-column integer codes: ``codes[i, j]`` in ``0 .. domain[j] - 1``. The caller
discretises continuous columns into bins from public bounds; nothing here looks at the data to
choose a domain. The module imports without ``mbi``; :func:`marginal_available` says whether it can
run.

What comes from ``mbi`` 2.x and what is ours
---------------------------------------------
``mbi`` 2.0.0 ships the estimation machinery only; AIM and MST exist upstream as scripts in
private-pgm's ``mechanisms/`` folder, which are not part of the package. From ``mbi``: ``Domain``,
``LinearMeasurement`` (and its ``compress``, used for MST's domain compression),
``estimation.MirrorDescent`` (Private-PGM: fit a graphical model to noisy marginals, with its
jitted HUGIN message passing inside each step), ``junction_tree`` (junction trees, message
schedules, the model size of a candidate set of cliques) and ``MarkovRandomField.synthetic_data``
(sampling records from the fitted model). Ours, written from the papers: the zCDP budget and its
conversion from (epsilon, delta), the Gaussian and exponential mechanisms and all their
randomness, AIM's workload, candidate weights, size filter, quality score, budget annealing and
stopping rule, MST's budget split, domain compression rule, Kruskal-style private tree selection
and decompression; and, for speed, a numpy pass for the clique marginals of a model (Shafer-Shenoy
on mbi's junction tree) that mbi's estimator calls eagerly (its own HUGIN inside JAX traces) and
that answers the marginals over cliques a model does not contain.

Defaults and runtime
--------------------
MST runs as in its paper. AIM's defaults are sized for privehr's tables (d ~ 10-20 columns of up to
~32 bins, n in the hundreds to thousands) rather than the paper's: the workload is all 2-way
marginals with weight 1; the per-round budget starts as if there were T = 4d rounds (the paper
assumes 16d; annealing and the stopping rule then decide the real number of rounds, as in the
paper); the model may grow to 2 MB (the paper: 80 MB); each round refits with 250 warm-started
mirror-descent steps, the final model with 1000. Each AIM round fits a new model structure, which
JAX compiles (seconds on CPU), so the number of rounds sets the runtime: on one core, n = 500,
d = 15 (bins 8 and 32), AIM took 9 s at epsilon 1 (7 rounds), 45 s at epsilon 10 (16 rounds),
65 s at epsilon 50 (22 rounds), and 110 s at epsilon 50 with d = 20 (29 rounds); MST took 10-17 s.
``rounds=16 * d`` and ``max_model_size=80`` restore the paper's settings; ``rounds=16 * d`` alone
took 73 s at epsilon 10 and 185 s at epsilon 50 (23 and 41 rounds) on the same table, with about
the same 2-way marginal errors.

The other cost grows with d: every round, AIM's size filter asks for the junction-tree size of the
model with each of the O(d^2) candidates. ``mbi.junction_tree.hypothetical_model_size`` builds that
tree with networkx (its greedy elimination rescans every clique for every column at every step), so
a round cost O(d^5) Python work; :func:`_model_size_mb` computes the same number on the graph
itself in O(d^2) (equal to mbi's on random clique sets, tested). Synthesis with
``missing: in_release`` gives AIM every attribute's missingness indicator too (2d columns): on
WHAS500 so (32 columns, 375 rows, epsilon 4, one core) the filter took 32 s of a 67 s fit with
mbi's function and 1 s of 29 s with ours, the selections and rows equal; one round of it at 48
columns took 16.6 s with mbi's and 0.5 s with ours (``bench/aim_speed.py``). What is left is JAX
compiling each round's new model structure (2-4 s a round on one core).

Privacy
-------
Neighbouring tables differ by adding or removing one record. A marginal (a vector of counts) then
has L2 sensitivity 1, so measuring it with N(0, sigma^2) noise per cell is 1 / (2 sigma^2)-zCDP
(Bun and Steinke, "Concentrated Differential Privacy", TCC 2016, arXiv:1605.02065, Prop. 1.6).
Both mechanisms select marginals with the exponential mechanism at epsilon_t on a quality of
sensitivity Delta; that is epsilon_t^2 / 8-zCDP (Cesar and Rogers, "Bounding, Concentrating, and
Truncating: Unifying Privacy Loss Composition for Data Analytics", ALT 2021, arXiv:2004.07223),
which is the accounting both papers use. zCDP composes adaptively by adding rho. The budget
``rho = cdp_rho(epsilon, delta)`` is the largest rho for which rho-zCDP implies (epsilon,
delta)-DP by Canonne, Kamath and Steinke, "The Discrete Gaussian for Differential Privacy",
NeurIPS 2020, arXiv:2004.00010, Prop. 12 / Cor. 13, as in the papers' code; every run spends
exactly that rho (``info["rho_spent"]``; the ledger ``info["measurements"]`` and
``info["selections"]`` lists each spend), so the released rows and the info dict are
(epsilon, delta)-DP under that conversion. Everything after the measurements (Private-PGM
estimation, MST's domain compression, sampling rows) only reads the noisy measurements: it is
post-processing.

Randomness: every Gaussian draw and every exponential-mechanism choice comes from the caller's
``numpy.random.Generator`` (in privehr, ``NoiseSource.secret().numpy_generator(...)``: OS entropy,
never logged). Each Gaussian coordinate is the sum of four draws halved, after one discarded draw
(Holohan and Braghin, ESORICS 2021, arXiv:2107.10138, Sect. 5.1), as
:func:`privehr.models.privacy.randomness.gaussian_noise` does. ``mbi``'s sampler draws from numpy's global
generator; it is post-processing, and it runs here with that global generator temporarily seeded
from the caller's generator (its previous state restored after), so a whole run is a function of
the generator's state: equal seeds give equal releases, which a reproducible (not DP) noise source
relies on. Other threads drawing from numpy's global generator during that call would interleave
with it (that changes nothing about privacy).

Not covered: bounded ("replace one record") neighbours would double the rho of every measurement
(L2 sensitivity sqrt(2)) and of every selection (sensitivity 2 Delta). ``rows`` is released as
given: pass a public or separately DP count, or ``None`` for the model's own estimate of n (a
function of the noisy measurements). JAX runs in float32 unless the caller enables x64; ``mbi``
warns that float32 can stall estimation above ~100k records, far above privehr's tables.
"""

from __future__ import annotations

import functools
import importlib.metadata
import itertools
import math
import warnings
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from privehr.core.registry import Registry
from privehr.models.privacy.zcdp import cdp_rho

__all__ = ["MARGINAL_MECHANISMS", "MarginalMechanism", "marginal_available", "synthesize_marginal",
           "mbi_version", "MBI_REQUIREMENT"]

MBI_REQUIREMENT = "mbi>=2"  # what ``privehr[baselines]`` installs
_MBI_WARNINGS = ("JAX is running in float32 mode", "JAX persistent compilation cache is enabled")

Clique = tuple[int, ...]


# --------------------------------------------------------------------------------------------
# mbi, loaded lazily
# --------------------------------------------------------------------------------------------

def mbi_version() -> str | None:
    """The installed ``mbi`` distribution's version, or None."""
    try:
        return importlib.metadata.version("mbi")
    except importlib.metadata.PackageNotFoundError:
        return None


def _major(version: str) -> int:
    head = version.split(".")[0]
    return int(head) if head.isdigit() else 0


@functools.cache
def _mbi():
    """``import mbi`` (>= 2), without its import-time advice about JAX settings privehr leaves alone."""
    version = mbi_version()
    if version is None or _major(version) < 2:
        raise ImportError(f"marginal synthesis needs {MBI_REQUIREMENT} (found {version}): "
                          "install privehr[baselines]")
    with warnings.catch_warnings():
        for message in _MBI_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
        import mbi
    return mbi


def marginal_available() -> bool:
    """True when ``mbi`` >= 2 (and so JAX) is installed and imports."""
    try:
        _mbi()
    except Exception:  # noqa: BLE001 - a broken jax/jaxlib install raises more than ImportError
        return False
    return True


# --------------------------------------------------------------------------------------------
# The mechanisms' randomness and budget
# --------------------------------------------------------------------------------------------

def _gaussian(rng: np.random.Generator, sigma: float, size: int) -> np.ndarray:
    """N(0, sigma^2 I) as (z1 + z2 + z3 + z4) / 2, z_i ~ N(0, sigma^2 I), after one discarded draw."""
    rng.standard_normal(1)
    return rng.normal(0.0, sigma, size=(4, size)).sum(axis=0) / 2


def _exponential_mechanism(rng: np.random.Generator, quality: np.ndarray, epsilon: float,
                           sensitivity: float) -> int:
    """Index i with probability proportional to exp(epsilon q_i / (2 sensitivity)): epsilon-DP."""
    logits = 0.5 * epsilon / sensitivity * (quality - quality.max())
    p = np.exp(logits)
    return int(rng.choice(quality.size, p=p / p.sum()))


@dataclass
class _Budget:
    """rho of one run and what has been spent from it (the ledger returned in the info dict)."""

    rho: float
    measurements: list[dict] = field(default_factory=list)
    selections: list[dict] = field(default_factory=list)
    noisy: list[np.ndarray] = field(default_factory=list)  # the released noisy marginals, in order

    @property
    def spent(self) -> float:
        return math.fsum([m["rho"] for m in self.measurements] + [s["rho"] for s in self.selections])

    @property
    def left(self) -> float:
        return self.rho - self.spent

    def _check(self) -> None:
        if self.spent > self.rho * (1 + 1e-9):
            raise RuntimeError(f"budget overrun: spent {self.spent!r} of rho {self.rho!r}")

    def gaussian(self, clique: Clique, sigma: float) -> None:
        self.measurements.append({"clique": list(clique), "sigma": float(sigma),
                                  "rho": 1.0 / (2.0 * sigma ** 2)})
        self._check()

    def selection(self, epsilon: float, candidates: int, chosen: Clique) -> None:
        self.selections.append({"epsilon": float(epsilon), "rho": epsilon ** 2 / 8.0,
                                "candidates": int(candidates), "chosen": list(chosen)})
        self._check()


@contextmanager
def _global_numpy_seeded(seed: int):
    """numpy's global generator seeded with ``seed`` inside, its previous state restored after."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


# --------------------------------------------------------------------------------------------
# Data side: true marginals of the codes (what the mechanisms measure)
# --------------------------------------------------------------------------------------------

class _Table:
    """The private table as codes, and its marginals (counts, C order over the clique's columns)."""

    def __init__(self, codes: np.ndarray, domain: Sequence[int]):
        self.codes = codes
        self.domain = tuple(int(k) for k in domain)
        self._cache: dict[Clique, np.ndarray] = {}

    def marginal(self, clique: Clique) -> np.ndarray:
        if clique not in self._cache:
            shape = tuple(self.domain[j] for j in clique)
            flat = np.ravel_multi_index(tuple(self.codes[:, j] for j in clique), shape)
            self._cache[clique] = np.bincount(flat, minlength=math.prod(shape)).astype(float)
        return self._cache[clique]

    def size(self, clique: Clique) -> int:
        return math.prod(self.domain[j] for j in clique)


def _measure(table: _Table, clique: Clique, sigma: float, rng: np.random.Generator, budget: _Budget, mbi):
    """The Gaussian mechanism on one marginal, recorded in the budget."""
    budget.gaussian(clique, sigma)  # charged (and checked against rho) before any noise is drawn
    x = table.marginal(clique)
    y = x + _gaussian(rng, sigma, x.size)
    budget.noisy.append(y)
    return mbi.LinearMeasurement(y, clique, stddev=float(sigma))


# --------------------------------------------------------------------------------------------
# Model side: marginals of a fitted mbi model, in numpy
# --------------------------------------------------------------------------------------------

def _broadcast(values: np.ndarray, attrs: Sequence[int], target: Sequence[int]) -> np.ndarray:
    """``values`` over ``attrs`` (a subset of ``target``), transposed and reshaped to broadcast over ``target``."""
    order = sorted(range(len(attrs)), key=lambda i: target.index(attrs[i]))
    moved = np.transpose(values, order)
    present = set(attrs)
    shape = []
    it = iter(moved.shape)
    for a in target:
        shape.append(next(it) if a in present else 1)
    return moved.reshape(shape)


def _project(prob: np.ndarray, attrs: Sequence[int], query: Sequence[int]) -> np.ndarray:
    """Sum of ``prob`` (over ``attrs``) onto ``query`` (a subset), axes in ``query``'s order."""
    out = prob.sum(axis=tuple(i for i, a in enumerate(attrs) if a not in query))
    kept = [a for a in attrs if a in query]
    return np.transpose(out, [kept.index(a) for a in query])


def _tree_marginals(mbi, domain, potentials: Mapping[Clique, np.ndarray]):
    """Junction tree and its clique marginals (probabilities) of the model with log-``potentials``.

    Shafer-Shenoy message passing in log space, in numpy: a model structure is used for a handful
    of calls, where JAX would compile it first. The junction tree and the message schedule are
    mbi's.
    """
    from scipy.special import logsumexp

    cliques = list(potentials)
    tree, _ = mbi.junction_tree.make_junction_tree(domain, cliques)
    nodes = [tuple(c) for c in tree.nodes]
    belief = {c: np.zeros(tuple(domain[a] for a in c)) for c in nodes}
    for cl, values in potentials.items():
        home = min((c for c in nodes if set(cl) <= set(c)), key=len)
        belief[home] = belief[home] + _broadcast(values, cl, home)
    messages: dict[tuple[Clique, Clique], tuple[Clique, np.ndarray]] = {}

    def gathered(i: Clique, skip: Clique | None) -> np.ndarray:
        out = belief[i]
        for k in tree.neighbors(i):
            if k != skip:
                attrs, values = messages[(k, i)]
                out = out + _broadcast(values, attrs, i)
        return out

    for i, j in mbi.junction_tree.message_passing_order(tree):
        sep = tuple(a for a in i if a in j)
        values = gathered(i, j)
        axes = tuple(n for n, a in enumerate(i) if a not in j)
        messages[(i, j)] = (sep, logsumexp(values, axis=axes) if axes else values)
    prob = {}
    for i in nodes:
        values = gathered(i, None)
        values = values - values.max()
        p = np.exp(values)
        prob[i] = p / p.sum()
    return tree, prob


def _potentials(model) -> dict[Clique, np.ndarray]:
    return {tuple(c): np.asarray(model.potentials[c].values, dtype=float) for c in model.potentials.cliques}


def _numpy_oracle(potentials, total=1.0, *, constraints=()):
    """An ``mbi`` marginal oracle: mbi's HUGIN when traced by JAX, the numpy pass when called eagerly.

    mbi's estimators call their oracle eagerly to initialise and finalise each fit; with its jitted
    HUGIN that is one extra XLA compilation per model structure, more than the numpy pass costs.
    """
    import jax
    import jax.numpy as jnp

    mbi = _mbi()
    leaves = jax.tree_util.tree_leaves((potentials, total))
    if constraints or any(isinstance(x, jax.core.Tracer) for x in leaves):
        return mbi.marginal_oracles.message_passing_hugin(potentials, total, constraints=constraints)
    domain = potentials.domain
    cliques = [tuple(c) for c in potentials.cliques]
    if not cliques:
        return mbi.CliqueVector(domain, [], {})
    _, prob = _tree_marginals(mbi, domain, {c: np.asarray(potentials[c].values, dtype=float) for c in cliques})
    tables = {}
    for cl in cliques:
        home = min((c for c in prob if set(cl) <= set(c)), key=len)
        values = float(total) * _project(prob[home], home, cl)
        tables[cl] = mbi.Factor(domain.project(cl), jnp.asarray(values, dtype=jnp.result_type(float)))
    return mbi.CliqueVector(domain, cliques, tables)


class _ModelMarginals:
    """Marginals of a fitted ``MarkovRandomField`` (counts scaled to its total) over any clique.

    A query no junction-tree clique contains is answered on the smallest subtree joining cliques
    that hold its columns, where the distribution is prod_C P(C) / prod_(C, C') P(C n C') (any
    subtree of a junction tree is one), contracted by opt_einsum; columns in different components
    of the junction forest are independent.
    """

    def __init__(self, model, mbi):
        import networkx as nx

        self.tree, self.prob = _tree_marginals(mbi, model.domain, _potentials(model))
        self.total = float(model.total)
        self.home: dict[int, Clique] = {}
        for c in sorted(self.prob, key=lambda c: -len(c)):
            for a in c:
                self.home.setdefault(a, c)
        self.component = {a: k for k, comp in enumerate(nx.connected_components(self.tree)) for c in comp for a in c}
        self._nx = nx

    def _connected(self, query: list[int]) -> np.ndarray:
        """P(query) for columns in one component of the junction forest."""
        import opt_einsum

        for c in self.prob:
            if set(query) <= set(c):
                return _project(self.prob[c], c, query)
        targets = list(dict.fromkeys(self.home[a] for a in query))
        nodes = set(targets[:1])
        for t in targets[1:]:
            nodes.update(self._nx.shortest_path(self.tree, targets[0], t))
        letters = {a: opt_einsum.get_symbol(i) for i, a in enumerate(sorted({a for c in nodes for a in c}))}
        terms, operands = [], []
        for c in nodes:
            terms.append("".join(letters[a] for a in c))
            operands.append(self.prob[c])
        for c1, c2 in self.tree.subgraph(nodes).edges:
            sep = tuple(a for a in c1 if a in c2)
            p_sep = _project(self.prob[c1], c1, sep)
            terms.append("".join(letters[a] for a in sep))
            operands.append(np.divide(1.0, p_sep, out=np.zeros_like(p_sep), where=p_sep > 0))
        expr = ",".join(terms) + "->" + "".join(letters[a] for a in query)
        return opt_einsum.contract(expr, *operands, optimize="greedy")

    def __call__(self, clique: Clique) -> np.ndarray:
        """Counts of the model over ``clique`` (C order over its columns), flattened."""
        import opt_einsum

        groups: dict[int, list[int]] = {}
        for a in clique:
            groups.setdefault(self.component[a], []).append(a)
        parts = [(g, self._connected(g)) for g in groups.values()]
        letters = {a: opt_einsum.get_symbol(i) for i, a in enumerate(clique)}
        expr = ",".join("".join(letters[a] for a in g) for g, _ in parts) + "->" + "".join(
            letters[a] for a in clique)
        return self.total * opt_einsum.contract(expr, *[p for _, p in parts]).ravel()


def _estimate(mbi, domain, measurements, iters: int, warm_start=None):
    estimator = mbi.estimation.MirrorDescent(marginal_oracle=_numpy_oracle)
    return estimator.estimate(domain, list(measurements), iters=int(iters), warm_start=warm_start)


def _sample(model, rows: int | None, rng: np.random.Generator) -> np.ndarray:
    """Records from the model (mbi's randomized-rounding sampler; post-processing)."""
    n = int(rows) if rows is not None else max(1, int(round(float(model.total))))
    with _global_numpy_seeded(int(rng.integers(2 ** 32))):
        data = model.synthetic_data(rows=n)
    return np.stack([np.asarray(data.data[a], dtype=np.int64) for a in model.domain.attributes], axis=1)


# --------------------------------------------------------------------------------------------
# AIM
# --------------------------------------------------------------------------------------------

def _model_size_mb(sizes: Sequence[int], cliques) -> float:
    """``mbi.junction_tree.hypothetical_model_size`` (mbi 2.0.0), the same number, computed in O(d^2) per call.

    mbi builds the junction tree with networkx: a greedy elimination order that rescans every clique for every
    column at every step (O(d^2 |cliques|) Python work, each step making ``Domain`` objects), then triangulates and
    lists the maximal cliques. AIM asks for it once per candidate per round, so O(d^2) calls per round: at d = 32
    (16 columns and their missingness indicators) that was over half of the fit's time. Here the same elimination
    runs on the graph itself: the union of the cliques that hold a column is its closed neighbourhood
    (neighbours: columns that share a clique), a column in no clique costs 1 (mbi's empty projection), ties go to
    the lowest column as in mbi's ordered scan, and eliminating a column joins its neighbours, exactly what mbi's
    triangulation adds. The maximal cliques of that triangulated graph are the maximal sets {v} + neighbours of v
    when v is eliminated (the elimination order is perfect for it); a graph that is a tree keeps its edges (mbi
    eliminates a tree depth first, with no fill). Cells are summed as integers and converted as mbi does
    (8 bytes a cell, MB = 2**20 bytes). Equality with mbi is tested on random clique sets.
    """
    d = len(sizes)
    neighbours: list[set[int]] = [set() for _ in range(d)]
    covered = [False] * d
    for clique in cliques:
        for a in clique:
            covered[a] = True
        for a, b in itertools.combinations(clique, 2):
            if a != b:
                neighbours[a].add(b)
                neighbours[b].add(a)
    edges = sum(len(n) for n in neighbours) // 2
    if edges and edges == d - 1 and _connected(neighbours):  # a tree: its edges are the maximal cliques
        cells = sum(sizes[a] * sizes[b] for a in range(d) for b in neighbours[a] if a < b)
        return cells * 8 / 2 ** 20

    def cost(v: int) -> int:
        return math.prod(sizes[u] for u in neighbours[v]) * sizes[v] if covered[v] else 1

    costs = [cost(v) for v in range(d)]
    left = list(range(d))
    eliminated: list[frozenset[int]] = []
    for _ in range(d):
        a = min(left, key=lambda v: (costs[v], v))
        left.remove(a)
        around = neighbours[a]
        eliminated.append(frozenset(around | {a}))
        for b in around:
            neighbours[b].discard(a)
            neighbours[b].update(around - {b})
        neighbours[a] = set()
        for b in around:
            costs[b] = cost(b)
    maximal = [c for c in eliminated if not any(c < other for other in eliminated)]
    cells = sum(math.prod(sizes[v] for v in c) for c in maximal)
    return cells * 8 / 2 ** 20


def _connected(neighbours: Sequence[set[int]]) -> bool:
    """Whether the graph given by its neighbour sets is connected."""
    seen, stack = {0}, [0]
    while stack:
        for b in neighbours[stack.pop()]:
            if b not in seen:
                seen.add(b)
                stack.append(b)
    return len(seen) == len(neighbours)


def _downward_closure(cliques) -> list[Clique]:
    out = set()
    for c in cliques:
        for r in range(1, len(c) + 1):
            out.update(itertools.combinations(sorted(c), r))
    return sorted(out, key=lambda c: (len(c), c))


def _workload(d: int, degree: int, workload) -> list[tuple[Clique, float]]:
    if workload is not None:
        out = [(tuple(sorted(int(a) for a in cl)), float(w)) for cl, w in workload]
    else:
        k = max(1, min(int(degree), d))
        out = [(c, 1.0) for c in itertools.combinations(range(d), k)]
    for cl, w in out:
        if not cl or len(set(cl)) != len(cl) or cl[0] < 0 or cl[-1] >= d or w < 0:
            raise ValueError(f"bad workload entry {cl!r}, {w!r}")
    return out


def _run_aim(mbi, table: _Table, budget: _Budget, rows, rng, *, degree: int = 2, workload=None,
             rounds: int | None = None, max_model_size: float = 2.0, max_iters: int = 250,
             final_iters: int = 1000, alpha: float = 0.9):
    d = len(table.domain)
    domain = mbi.Domain(tuple(range(d)), table.domain)
    rho = budget.rho
    rounds = int(rounds) if rounds is not None else 4 * d
    if rounds < d:
        raise ValueError(f"AIM needs rounds >= the number of columns ({d}) for its one-way measurements")
    if not 0 < alpha < 1:
        raise ValueError("alpha (the share of each round's budget spent measuring) must be in (0, 1)")
    weights = _workload(d, degree, workload)
    # candidate r's weight: sum over workload cliques s of w_s |r n s| (AIM, Sect. 4)
    candidates = {r: sum(w * len(set(r) & set(s)) for s, w in weights) for r in _downward_closure(
        [s for s, _ in weights])}

    sigma = math.sqrt(rounds / (2 * alpha * rho))
    epsilon = math.sqrt(8 * (1 - alpha) * rho / rounds)
    measurements = [_measure(table, (j,), sigma, rng, budget, mbi) for j in range(d)]
    model = _estimate(mbi, domain, measurements, max_iters)
    selected: list[Clique] = []
    annealed = 0
    terminate = False
    while not terminate:
        if budget.left <= 2 * (1 / (2 * sigma ** 2) + epsilon ** 2 / 8):
            remaining = budget.left  # last round: spend what is left
            sigma = math.sqrt(1 / (2 * alpha * remaining))
            epsilon = math.sqrt(8 * (1 - alpha) * remaining)
            terminate = True
        used_after = budget.spent + 1 / (2 * sigma ** 2) + epsilon ** 2 / 8
        size_limit = max_model_size * used_after / rho
        current = [tuple(c) for c in model.cliques]
        free = set(_downward_closure(current))
        allowed = [r for r in candidates if r in free
                   or _model_size_mb(table.domain, current + [r]) <= size_limit]
        marginals = _ModelMarginals(model, mbi)
        bias = math.sqrt(2 / math.pi) * sigma
        quality = np.array([candidates[r] * (np.abs(table.marginal(r) - marginals(r)).sum()
                                             - bias * table.size(r)) for r in allowed])
        sensitivity = max(max(abs(candidates[r]) for r in allowed), 1e-12)
        chosen = allowed[_exponential_mechanism(rng, quality, epsilon, sensitivity)]
        budget.selection(epsilon, len(allowed), chosen)
        before = marginals(chosen)
        measurements.append(_measure(table, chosen, sigma, rng, budget, mbi))
        selected.append(chosen)
        model = _estimate(mbi, domain, measurements, max_iters, warm_start=model)
        after = _ModelMarginals(model, mbi)(chosen)
        if not terminate and np.abs(after - before).sum() <= bias * table.size(chosen):
            sigma, epsilon, annealed = sigma / 2, epsilon * 2, annealed + 1
    model = _estimate(mbi, domain, measurements, final_iters, warm_start=model)
    synth = _sample(model, rows, rng)
    info = {"selected": [list(c) for c in selected], "rounds": len(selected), "annealed": annealed,
            "model_cliques": [list(c) for c in model.cliques],
            "model_size_mb": float(mbi.junction_tree.hypothetical_model_size(
                domain, [tuple(c) for c in model.cliques])),
            "workload_cliques": len(weights)}
    return synth, info, model


# --------------------------------------------------------------------------------------------
# MST
# --------------------------------------------------------------------------------------------

def _run_mst(mbi, table: _Table, budget: _Budget, rows, rng, *, compress: bool = True,
             compress_threshold: float = 3.0, select_iters: int = 1000, final_iters: int = 2500):
    d = len(table.domain)
    domain = mbi.Domain(tuple(range(d)), table.domain)
    rho = budget.rho
    if d == 1:  # no pairs to select: everything goes to the one marginal
        measurements = [_measure(table, (0,), math.sqrt(1 / (2 * rho)), rng, budget, mbi)]
        model = _estimate(mbi, domain, measurements, final_iters)
        return _sample(model, rows, rng), {"selected": [], "compressed_domain": list(table.domain)}, model
    # a third of rho each for one-way marginals, tree selection, two-way marginals; the d (then
    # d - 1) measurements of a phase share its third equally: sigma^2 = d / (2 rho / 3) each
    sigma1 = math.sqrt(d * 3 / (2 * rho))
    oneway = [_measure(table, (j,), sigma1, rng, budget, mbi) for j in range(d)]

    # domain compression from the noisy one-way counts only (post-processing): values measured
    # below compress_threshold * sigma are merged into one value (MST, Sect. 4.1)
    mappings: dict[int, np.ndarray] = {}
    if compress:
        for j, m in enumerate(oneway):
            keep = np.asarray(m.noisy_measurement) >= compress_threshold * sigma1
            if not keep.all():
                mapping = np.where(keep, np.cumsum(keep) - 1, int(keep.sum())).astype(np.int64)
                mappings[j] = mapping
    small_domain = tuple(int(mappings[j].max()) + 1 if j in mappings else table.domain[j] for j in range(d))
    small_codes = table.codes.copy()
    for j, mapping in mappings.items():
        small_codes[:, j] = mapping[table.codes[:, j]]
    small = _Table(small_codes, small_domain)
    sdomain = mbi.Domain(tuple(range(d)), small_domain)
    log1 = [m.compress({j: mappings[j]}, domain) if j in mappings else m for j, m in enumerate(oneway)]

    # select a maximum spanning tree of pairwise errors of the one-way model, one edge per
    # exponential mechanism among the edges joining two components (Kruskal; MST, Alg. 1)
    model1 = _estimate(mbi, sdomain, log1, select_iters)
    marginals = _ModelMarginals(model1, mbi)
    pairs = list(itertools.combinations(range(d), 2))
    error = {p: float(np.abs(small.marginal(p) - marginals(p)).sum()) for p in pairs}
    epsilon = math.sqrt(8 * (rho / 3) / (d - 1))
    component = list(range(d))
    tree: list[Clique] = []
    for _ in range(d - 1):
        allowed = [p for p in pairs if component[p[0]] != component[p[1]]]
        chosen = allowed[_exponential_mechanism(rng, np.array([error[p] for p in allowed]), epsilon, 1.0)]
        budget.selection(epsilon, len(allowed), chosen)
        old, new = component[chosen[1]], component[chosen[0]]
        component = [new if c == old else c for c in component]
        tree.append(chosen)
    sigma2 = math.sqrt((d - 1) * 3 / (2 * rho))
    log2 = [_measure(small, p, sigma2, rng, budget, mbi) for p in tree]
    model = _estimate(mbi, sdomain, log1 + log2, final_iters, warm_start=model1)
    synth = _sample(model, rows, rng)
    # decompression: the merged value becomes one of the values it stands for, uniformly (MST,
    # Sect. 4.1); kept values map back one to one
    for j, mapping in mappings.items():
        rest = int(mapping.max())  # the merged value (kept values are 0 .. rest - 1)
        kept, merged = np.flatnonzero(mapping < rest), np.flatnonzero(mapping == rest)
        column = synth[:, j]
        is_rest = column == rest
        out = np.empty_like(column)
        out[~is_rest] = kept[column[~is_rest]]
        out[is_rest] = rng.choice(merged, size=int(is_rest.sum()))
        synth[:, j] = out
    info = {"selected": [list(c) for c in tree], "compressed_domain": list(small_domain),
            "model_cliques": [list(c) for c in model.cliques]}
    return synth, info, model


# --------------------------------------------------------------------------------------------
# Registry and entry point
# --------------------------------------------------------------------------------------------

class MarginalMechanism:
    """One registered mechanism: ``run(mbi, table, budget, rows, rng, **options)`` and its default options."""

    name: str
    reference: str
    defaults: Mapping[str, object]

    @staticmethod
    def run(mbi, table, budget, rows, rng, **options):
        raise NotImplementedError


MARGINAL_MECHANISMS: Registry[MarginalMechanism] = Registry("marginal mechanism")


@MARGINAL_MECHANISMS.register
class AIMMechanism(MarginalMechanism):
    name, reference = "aim", "McKenna, Mullins, Sheldon, Miklau, VLDB 2022, arXiv:2201.12677"
    defaults = {"degree": 2, "workload": None, "rounds": None, "max_model_size": 2.0, "max_iters": 250,
                "final_iters": 1000, "alpha": 0.9}
    run = staticmethod(_run_aim)


@MARGINAL_MECHANISMS.register
class MSTMechanism(MarginalMechanism):
    name, reference = "mst", "McKenna, Miklau, Sheldon, JPC 2021, arXiv:2108.04978"
    defaults = {"compress": True, "compress_threshold": 3.0, "select_iters": 1000, "final_iters": 2500}
    run = staticmethod(_run_mst)


def _check_codes(codes, domain) -> tuple[np.ndarray, tuple[int, ...]]:
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.shape[1] == 0:
        raise ValueError("codes must be an (n, d) array with d >= 1")
    if not np.issubdtype(codes.dtype, np.integer):
        raise ValueError("codes must be integers")
    domain = tuple(int(k) for k in domain)
    if len(domain) != codes.shape[1] or min(domain) < 1:
        raise ValueError("domain must give one size >= 1 per column")
    bad = [j for j in range(codes.shape[1]) if codes.shape[0] and
           (codes[:, j].min() < 0 or codes[:, j].max() >= domain[j])]
    if bad:
        raise ValueError(f"codes outside 0 .. domain[j] - 1 in columns {bad}")
    return codes.astype(np.int64), domain


def synthesize_marginal(mechanism: str, codes: np.ndarray, domain: Sequence[int], epsilon: float,
                        delta: float, rows: int | None, rng: np.random.Generator, *,
                        keep_noisy: bool = False, rho: float | None = None, **options) -> tuple[np.ndarray, dict]:
    """Synthetic codes (rows x d) from ``codes`` (n x d) by AIM or MST at (epsilon, delta)-DP.

    ``rng`` draws all DP noise and selections: pass a generator seeded from OS entropy (never one
    seeded from names or configuration) for a DP release. ``options`` override
    ``MARGINAL_MECHANISMS[mechanism].defaults``. ``rows`` is released as given (None: the model's
    DP estimate of n). The info dict records the mechanism, epsilon, delta, the zCDP rho they
    convert to, the rho spent and its ledger (every measurement's clique and sigma, every
    selection's epsilon and choice), the selected cliques and the mbi and JAX versions; with
    ``keep_noisy`` also the noisy marginals measured (DP outputs, for checks). ``rho`` spends less than the
    (epsilon, delta) budget converts to (a caller that spends the rest elsewhere, as the hybrid of
    :mod:`privehr.models.synthesis.within_bin` does); it may not exceed it.
    """
    spec = MARGINAL_MECHANISMS[mechanism]  # an unknown name: ValueError naming the known ones
    unknown = set(options) - set(spec.defaults)
    if unknown:
        raise TypeError(f"{mechanism} has no option(s) {sorted(unknown)}; options: {sorted(spec.defaults)}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator (seeded from OS entropy for a DP release)")
    if rows is not None and int(rows) < 1:
        raise ValueError("rows must be >= 1 (or None for the model's estimate of n)")
    codes, domain = _check_codes(codes, domain)
    budget_rho = cdp_rho(epsilon, delta)
    if rho is None:
        rho = budget_rho
    elif not 0 < rho <= budget_rho:
        raise ValueError(f"rho {rho!r} must be positive and at most the budget's {budget_rho!r}")
    mbi = _mbi()
    import jax

    budget = _Budget(rho)
    synth, extra, model = spec.run(mbi, _Table(codes, domain), budget, rows, rng, **{**spec.defaults, **options})
    info = {"mechanism": mechanism, "reference": spec.reference, "epsilon": float(epsilon),
            "delta": float(delta), "rho": rho, "rho_spent": budget.spent,
            "conversion": "rho = cdp_rho(epsilon, delta): rho-zCDP implies (epsilon, delta)-DP "
                          "(Canonne, Kamath, Steinke 2020, Prop. 12)",
            "neighbours": "add/remove one record", "columns": len(domain), "domain": list(domain),
            "rows": int(len(synth)), "estimated_total": float(model.total),
            "measurements": budget.measurements, "selections": budget.selections,
            "options": {**spec.defaults, **options}, "mbi_version": mbi_version(),
            "jax_version": jax.__version__, **extra}
    if keep_noisy:
        info["noisy_measurements"] = [y.copy() for y in budget.noisy]
    return synth, info
