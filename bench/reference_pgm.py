"""The authors' reference AIM and MST (private-pgm's ``mechanisms/`` scripts), run on privehr's integer codes.

privehr implements AIM and MST itself (:mod:`privehr.models.synthesis.marginal`, on ``mbi`` 2.x for estimation only).
Upstream, both mechanisms are scripts in private-pgm's ``mechanisms/`` folder, not part of the ``mbi`` package; this
module runs those scripts, imported at run time from a checkout given by path, so that the bench can compare privehr's
AIM/MST with the authors' on the same codes. No private-pgm source is copied into this repository.

* AIM: McKenna, Mullins, Sheldon, Miklau, "AIM: An Adaptive and Iterative Mechanism for Differentially Private
  Synthetic Data", VLDB 2022, arXiv:2201.12677 (``mechanisms/aim.py``).
* MST: McKenna, Miklau, Sheldon, "Winning the NIST Contest: A scalable and general approach to differentially private
  synthetic data", Journal of Privacy and Confidentiality 2021, arXiv:2108.04978 (``mechanisms/mst.py``).

The checkout
------------
``PINNED_COMMIT`` is the newest commit of private-pgm stored when this was written (2026-07-22, "Merge pull request
#207"; the repository has since been renamed ``ryan112358/mbi``, and GitHub redirects the old name). Get it with::

    git clone https://github.com/ryan112358/private-pgm && git -C private-pgm checkout 361705d7f05f8c0ac4d5b3640e688eb4f692346e

and pass ``--checkout private-pgm`` (or ``checkout=Path("private-pgm")``).

Which ``mbi``
-------------
The scripts run against the installed ``mbi`` (``pip install 'privehr[baselines]'``: ``mbi>=2,<3``), the one privehr's
own AIM/MST use. The checkout's ``src/`` is put on ``sys.path`` only when no ``mbi`` is installed and the checkout's
``src/mbi`` is itself a 2.x (the pinned commit's is 1.3.0, so with it an installed ``mbi`` 2.x is required).

No commit of private-pgm stored here has scripts that run unmodified on ``mbi`` 2.0.0: 2.0.0 removed two aliases that
1.3.0 (the pinned commit's ``src/mbi``) still kept, deprecated, and that the scripts use. While a reference mechanism
runs, this module supplies exactly those two, as 1.3.0 defined them, and nothing else:

* ``Domain.attrs`` (used by ``mst.py``): a read-only alias of ``Domain.attributes``, added to ``mbi.Domain`` for the
  duration of the call when the class has no ``attrs``;
* ``estimation.MirrorDescent().estimate(..., potentials=P)`` (used by ``aim.py`` to warm-start each round): passed on
  as ``warm_start=P``, which in 2.0.0 expands the potentials ``P`` to the new measurements' cliques exactly as 1.3.0's
  ``potentials=P`` did. The script module's ``estimation`` name points at that adapter during the call.

Settings (each script's own defaults)
-------------------------------------
AIM: ``AIM(epsilon, delta, prng=..., max_model_size=p["max_model_size"], max_iters=p["max_iters"]).run(data,
workload, num_synth_rows=rows)`` with ``p = aim.default_params()`` (at the pinned commit ``max_model_size`` 80 MB,
``max_iters`` 1000, ``degree`` 2, ``num_marginals`` None, ``max_cells`` 10000) and ``rounds`` left at the class
default (None: 16 d). The workload is privehr's AIM workload: every 2-way marginal ``(c_j, c_k)``, j < k, weight 1.0,
none dropped. That is the script's own workload (``itertools.combinations(domain, degree)``, weight 1.0, no
``num_marginals`` subsampling) whenever every pair has at most ``max_cells`` cells (true for privehr's tables, at most
32 bins a column); a pair above ``max_cells``, which the script would drop, is kept and a warning says so. The first
model is fitted on the one-way marginals (the script's default ``initial_cliques``).

MST: ``MST(data, epsilon, delta)``, the script's function, which has no settings (10000 final and 2500 selection
mirror-descent iterations, domain compression at 3 sigma, all hard-coded). It takes no row count: its final
``synthetic_data()`` draws the model's estimate of n. So that both mechanisms release ``rows`` records, the model that
adapter returns draws ``rows`` records when ``synthetic_data`` is called without a count (AIM passes its
``num_synth_rows``, so it is unaffected). This is post-processing.

Randomness
----------
Both are DP mechanisms. Each call takes fresh OS entropy (``np.random.SeedSequence()``, never logged or returned): AIM
gets ``prng = np.random.RandomState(MT19937(...))`` (the API of its default ``np.random``); and because MST's
Gaussian noise, selection and decompression and ``mbi``'s sampler all draw from numpy's global generator, that
generator is seeded from the same fresh entropy for the duration of the call and its previous state restored after.
Other threads drawing from numpy's global generator during a call would interleave with it. The scripts print their
progress; it is captured (``info["log"]``), not shown.

    python bench/reference_pgm.py --checkout /path/to/private-pgm     # smoke: both on a small random table, JSON
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import importlib.util
import io
import itertools
import json
import re
import subprocess
import sys
import threading
import time
import types
import warnings
from pathlib import Path

import numpy as np

__all__ = ["PINNED_COMMIT", "REPOSITORY", "SCRIPTS", "reference_available", "run_reference", "checkout_commit"]

PINNED_COMMIT = "361705d7f05f8c0ac4d5b3640e688eb4f692346e"
REPOSITORY = "https://github.com/ryan112358/private-pgm"  # renamed ryan112358/mbi; the old URL redirects
SCRIPTS = {"aim": "mechanisms/aim.py", "mst": "mechanisms/mst.py"}
_SUPPORTED_MBI_MAJOR = 2
_MBI_WARNINGS = ("JAX is running in float32 mode", "JAX persistent compilation cache is enabled")
_SCRIPT_HELPERS = ("mechanism", "cdp2adp")  # modules the scripts import from their own folder
_LOCK = threading.RLock()
_LOADED: dict[tuple[str, str], types.ModuleType] = {}


# --------------------------------------------------------------------------------------------
# Locating mbi and the checkout
# --------------------------------------------------------------------------------------------

def _version_major(version: str | None) -> int | None:
    match = re.match(r"\s*(\d+)", version or "")
    return int(match.group(1)) if match else None


def _checkout_mbi_version(checkout: Path) -> str | None:
    """The ``version`` in the checkout's pyproject.toml (the version of its ``src/mbi``), or None."""
    try:
        text = (Path(checkout) / "pyproject.toml").read_text()
    except OSError:
        return None
    match = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
    return match.group(1) if match else None


def checkout_commit(checkout: Path) -> str | None:
    """The commit the checkout is at (``git rev-parse HEAD``), or None when it is not a git work tree."""
    try:
        out = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if re.fullmatch(r"[0-9a-f]{40}", commit) else None


def _import_mbi(checkout: Path):
    """The installed ``mbi`` (2.x); else the checkout's ``src/mbi`` if that is a 2.x; else RuntimeError."""
    try:
        installed = importlib.metadata.version("mbi")
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed is None:
        src, version = Path(checkout) / "src", _checkout_mbi_version(checkout)
        if _version_major(version) != _SUPPORTED_MBI_MAJOR or not (src / "mbi").is_dir():
            raise RuntimeError(f"no mbi installed (pip install 'privehr[baselines]', mbi>=2,<3), and the checkout's "
                               f"src/mbi is version {version!r}, not {_SUPPORTED_MBI_MAJOR}.x")
        if str(src) not in sys.path:
            sys.path.insert(0, str(src))
    elif _version_major(installed) != _SUPPORTED_MBI_MAJOR:
        raise RuntimeError(f"mbi {installed} is installed; the reference runner supports mbi "
                           f"{_SUPPORTED_MBI_MAJOR}.x (pip install 'privehr[baselines]')")
    with warnings.catch_warnings():
        for message in _MBI_WARNINGS:
            warnings.filterwarnings("ignore", message=message)
        return importlib.import_module("mbi")


def _load_script(kind: str, checkout: Path) -> types.ModuleType:
    """Import ``mechanisms/<kind>.py`` of the checkout by path (cached per checkout and kind)."""
    checkout = Path(checkout).resolve()
    key = (str(checkout), kind)
    with _LOCK:
        if key in _LOADED:
            return _LOADED[key]
        _import_mbi(checkout)
        path = checkout / SCRIPTS[kind]
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: is {checkout} a checkout of {REPOSITORY}?")
        name = f"_privehr_reference_pgm_{kind}_{len(_LOADED)}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        saved_path = list(sys.path)
        before = {helper: sys.modules.get(helper) for helper in _SCRIPT_HELPERS}
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                for message in _MBI_WARNINGS:
                    warnings.filterwarnings("ignore", message=message)
                spec.loader.exec_module(module)  # the script puts its folder on sys.path itself
        finally:
            sys.path[:] = saved_path
            for helper, previous in before.items():  # its helpers stay bound in the module; don't leak the names
                if previous is None:
                    sys.modules.pop(helper, None)
                else:
                    sys.modules[helper] = previous
        _LOADED[key] = module
        return module


def reference_available(checkout: Path) -> bool:
    """Whether the checkout has ``mechanisms/aim.py`` and ``mechanisms/mst.py`` and both import (with this mbi)."""
    try:
        return all(callable(getattr(_load_script(kind, checkout), attr, None))
                   for kind, attr in (("aim", "AIM"), ("mst", "MST")))
    except Exception:  # noqa: BLE001 -- any failure to import means "not available"
        return False


# --------------------------------------------------------------------------------------------
# The two mbi 1.3 aliases the scripts use, and the row count
# --------------------------------------------------------------------------------------------

class _RowsModel:
    """A fitted model whose ``synthetic_data()`` without a count draws ``rows`` records; all else delegated."""

    def __init__(self, model, rows):
        self._model, self._rows = model, rows

    def __getattr__(self, name):
        return getattr(self._model, name)

    def synthetic_data(self, rows=None, *args, **kwargs):
        return self._model.synthetic_data(self._rows if rows is None else rows, *args, **kwargs)


class _EstimatorCompat:
    """An mbi 2.x estimator that also takes mbi 1.3's ``potentials=`` (as ``warm_start=``)."""

    def __init__(self, estimator, rows):
        self._estimator, self._rows = estimator, rows

    def __getattr__(self, name):
        return getattr(self._estimator, name)

    def estimate(self, domain, measurements, *args, potentials=None, **kwargs):
        if potentials is not None:
            if kwargs.get("warm_start") is not None:
                raise TypeError("both potentials= and warm_start= given")
            kwargs["warm_start"] = potentials
        model = self._estimator.estimate(domain, measurements, *args, **kwargs)
        return _RowsModel(model, self._rows) if self._rows is not None else model


class _EstimationCompat:
    """Stands in for ``mbi.estimation`` in a script: its estimators go through :class:`_EstimatorCompat`."""

    def __init__(self, estimation, rows):
        self._estimation, self._rows = estimation, rows

    def __getattr__(self, name):
        value = getattr(self._estimation, name)
        base = getattr(self._estimation, "Estimator", None)
        if isinstance(value, type) and base is not None and issubclass(value, base):
            return lambda *a, **k: _EstimatorCompat(value(*a, **k), self._rows)
        return value


@contextlib.contextmanager
def _compat(module: types.ModuleType, mbi, rows: int):
    """While a script runs: its ``estimation`` is the adapter; ``mbi.Domain.attrs`` exists (alias of attributes)."""
    added_attrs = not hasattr(mbi.Domain, "attrs")
    saved_estimation = module.__dict__.get("estimation")
    if added_attrs:
        mbi.Domain.attrs = property(lambda self: self.attributes, doc="mbi 1.3's alias of Domain.attributes")
    if saved_estimation is not None:
        module.estimation = _EstimationCompat(saved_estimation, rows)
    try:
        yield
    finally:
        if saved_estimation is not None:
            module.estimation = saved_estimation
        if added_attrs:
            del mbi.Domain.attrs


@contextlib.contextmanager
def _global_numpy(seed_sequence: np.random.SeedSequence):
    """numpy's global generator seeded from ``seed_sequence`` for the block; its previous state restored after."""
    state = np.random.get_state()
    np.random.seed(seed_sequence.generate_state(8))
    try:
        yield
    finally:
        np.random.set_state(state)


# --------------------------------------------------------------------------------------------
# Running a reference mechanism
# --------------------------------------------------------------------------------------------

def _check_codes(codes, domain) -> tuple[np.ndarray, tuple[int, ...]]:
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.shape[1] == 0 or codes.shape[0] == 0:
        raise ValueError("codes must be an (n, d) array with n, d >= 1")
    if not np.issubdtype(codes.dtype, np.integer):
        raise ValueError("codes must be integers")
    domain = tuple(int(k) for k in domain)
    if len(domain) != codes.shape[1] or min(domain) < 1:
        raise ValueError("domain must give one size >= 1 per column")
    bad = [j for j in range(codes.shape[1]) if codes[:, j].min() < 0 or codes[:, j].max() >= domain[j]]
    if bad:
        raise ValueError(f"codes outside 0 .. domain[j] - 1 in columns {bad}")
    return codes.astype(np.int64), domain


def _aim_workload(mbi_domain, attrs, params) -> list[tuple[tuple[str, ...], float]]:
    degree, num_marginals = params.get("degree", 2), params.get("num_marginals")
    if degree != 2 or num_marginals is not None:
        raise RuntimeError(f"aim.py's default_params() give degree {degree!r}, num_marginals {num_marginals!r}; "
                           "this runner (privehr's workload: all 2-way marginals, weight 1) expects 2 and None")
    pairs = list(itertools.combinations(attrs, 2))
    max_cells = params.get("max_cells")
    over = [cl for cl in pairs if max_cells is not None and mbi_domain.size(cl) > max_cells]
    if over:
        warnings.warn(f"{len(over)} 2-way marginal(s) have more than aim.py's max_cells={max_cells} cells; the "
                      "script would drop them, privehr's workload (used here) keeps them", stacklevel=3)
    return [(cl, 1.0) for cl in pairs]


def run_reference(kind: str, codes: np.ndarray, domain: tuple[int, ...], epsilon: float, delta: float, rows: int,
                  checkout: Path, *, info: dict | None = None) -> np.ndarray:
    """``rows`` x d synthetic codes from the authors' AIM or MST (``kind``) on ``codes`` at (epsilon, delta)-DP.

    ``codes`` is n x d with ``codes[:, j]`` in ``0 .. domain[j] - 1``; the output has the same column order. The
    script ``mechanisms/<kind>.py`` of ``checkout`` runs with its own default settings (module docstring), on the
    installed mbi 2.x, with fresh OS entropy. ``info``, if given, is filled with the settings used, the checkout's
    commit, the captured log, AIM's number of measured cliques (rounds, counted from its log) and the wall seconds.
    """
    if kind not in SCRIPTS:
        raise ValueError(f"kind must be one of {sorted(SCRIPTS)}, not {kind!r}")
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError("need epsilon > 0 and 0 < delta < 1")
    if int(rows) < 1:
        raise ValueError("rows must be >= 1")
    rows = int(rows)
    codes, domain = _check_codes(codes, domain)
    checkout = Path(checkout)
    module = _load_script(kind, checkout)
    mbi = _import_mbi(checkout)
    commit = checkout_commit(checkout)
    if commit is not None and commit != PINNED_COMMIT:
        warnings.warn(f"{checkout} is at {commit}, not the pinned {PINNED_COMMIT}", stacklevel=2)

    attrs = [f"c{j}" for j in range(len(domain))]
    mbi_domain = mbi.Domain(attrs, domain)
    data = mbi.Dataset({a: codes[:, j] for j, a in enumerate(attrs)}, mbi_domain)
    settings: dict = {}
    entropy = np.random.SeedSequence()  # fresh OS entropy; never logged
    aim_seed, global_seed = entropy.spawn(2)
    log = io.StringIO()
    start = time.perf_counter()
    with _LOCK, _compat(module, mbi, rows), _global_numpy(global_seed), contextlib.redirect_stdout(log), \
            warnings.catch_warnings():
        for message in _MBI_WARNINGS:
            warnings.filterwarnings("ignore", message=message)
        if kind == "aim":
            params = module.default_params()
            workload = _aim_workload(mbi_domain, attrs, params)
            mechanism = module.AIM(float(epsilon), float(delta),
                                   prng=np.random.RandomState(np.random.MT19937(aim_seed)),
                                   max_model_size=params["max_model_size"], max_iters=params["max_iters"])
            settings = {"call": "AIM(epsilon, delta, prng, max_model_size, max_iters).run(data, workload, "
                                "num_synth_rows=rows)",
                        "max_model_size": params["max_model_size"], "max_iters": params["max_iters"],
                        "rounds": mechanism.rounds, "rounds_budgeted": mechanism.rounds or 16 * len(domain),
                        "degree": params.get("degree"), "num_marginals": params.get("num_marginals"),
                        "max_cells": params.get("max_cells"), "workload": "all 2-way marginals, weight 1.0",
                        "workload_cliques": len(workload), "initial_cliques": "one-way marginals"}
            _, synth = mechanism.run(data, workload, num_synth_rows=rows)
        else:
            settings = {"call": "MST(data, epsilon, delta); final synthetic_data() draws rows records"}
            synth = module.MST(data, float(epsilon), float(delta))
    seconds = time.perf_counter() - start

    table = synth.to_dict()
    out = np.stack([np.asarray(table[a]) for a in attrs], axis=1).astype(np.int64)
    if out.shape != (rows, len(domain)):
        raise RuntimeError(f"reference {kind} returned shape {out.shape}, expected {(rows, len(domain))}")
    if any(out[:, j].min() < 0 or out[:, j].max() >= domain[j] for j in range(len(domain))):
        raise RuntimeError(f"reference {kind} returned codes outside the domain")
    if info is not None:
        text = log.getvalue()
        info.update({"kind": kind, "script": SCRIPTS[kind], "repository": REPOSITORY, "pinned_commit": PINNED_COMMIT,
                     "checkout_commit": commit, "mbi_version": getattr(mbi, "__version__", None) or _dist_version("mbi"),
                     "epsilon": float(epsilon), "delta": float(delta),
                     "rows": rows, "settings": settings, "seconds": seconds, "log": text,
                     "measured_cliques": text.count("Measuring Clique") if kind == "aim" else None,
                     "sigma_reductions": text.count("Reducing sigma") if kind == "aim" else None})
    return out


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------------------------
# Smoke
# --------------------------------------------------------------------------------------------

def _tv_1way(a: np.ndarray, b: np.ndarray, domain) -> list[float]:
    return [0.5 * float(np.abs(np.bincount(a[:, j], minlength=k) / len(a)
                               - np.bincount(b[:, j], minlength=k) / len(b)).sum())
            for j, k in enumerate(domain)]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, required=True, help="a checkout of private-pgm at PINNED_COMMIT")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--kinds", default="aim,mst")
    args = parser.parse_args(argv)
    if not reference_available(args.checkout):
        raise SystemExit(f"reference mechanisms not available from {args.checkout}: need {SCRIPTS['aim']} and "
                         f"{SCRIPTS['mst']} of {REPOSITORY} at {PINNED_COMMIT}, and mbi 2.x installed")
    data_rng = np.random.default_rng()  # the smoke table only
    domain = (2, 3, 4, 5, 6, 8)
    codes = np.stack([data_rng.integers(0, k, args.n) for k in domain], axis=1)
    report = {"pinned_commit": PINNED_COMMIT, "checkout_commit": checkout_commit(args.checkout),
              "n": args.n, "domain": list(domain), "epsilon": args.epsilon, "delta": args.delta, "runs": {}}
    for kind in args.kinds.split(","):
        info: dict = {}
        synth = run_reference(kind, codes, domain, args.epsilon, args.delta, args.n, args.checkout, info=info)
        tv = _tv_1way(codes, synth, domain)
        report["runs"][kind] = {"rows": int(len(synth)), "seconds": round(info["seconds"], 2),
                                "tv_1way_mean": float(np.mean(tv)), "tv_1way_max": float(np.max(tv)),
                                "measured_cliques": info["measured_cliques"], "settings": info["settings"]}
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
