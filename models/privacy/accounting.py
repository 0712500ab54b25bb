"""Privacy accounting of Poisson-subsampled Gaussian mechanisms (DP-SGD, DP-NF): three accountants.

A run of T steps with sampling rate q and noise multiplier sigma (a *history* [(sigma, q, T), ...]
for heterogeneous compositions) is (epsilon, delta)-DP under add/remove-one neighbours with epsilon
from three independent implementations:

* **PRV** (Gopi, Lee, Wutschitz, "Numerical Composition of Differential Privacy", NeurIPS 2021;
  Opacus): numerically tight; Opacus returns the *upper* end of an estimate accurate to
  ``eps_error``. This is the claimed epsilon.
* **RDP** (Mironov, "Renyi Differential Privacy", CSF 2017; Opacus's analysis, vectorised in
  :mod:`privehr.models.privacy.sampled_gaussian_rdp`): an upper bound, usually
  looser. Orders up to 2^14: with Opacus's default orders (<= 63) it cannot certify epsilon below
  log(1/delta)/62 (0.19 at delta = 1e-5), and even with these it stops near 4e-3.
* **PLD** (Koskela, Jalko, Honkela 2020; Doroshenko, Ghazi, Kamath, Kumar, Manurangsi, "Connect
  the Dots", PETS 2022; Google's ``dp-accounting``): a pessimistic discretisation, an upper bound;
  its optimistic twin is a lower bound, so [lower, upper] brackets the true epsilon.

One rule names the claim: PRV where it could be computed, else RDP (:attr:`PrivacySpend.epsilon`).
The noise multiplier is calibrated so that PRV and RDP both stay at or below the target (PRV alone
below RDP's floor). An accountant that cannot give a value is reported as None.

One release of T = 1000 Poisson steps at q = 0.01 and sigma = 1, by every accountant: PRV (the claim) and RDP
both bound epsilon from above, RDP the looser; PLD's pessimistic and optimistic estimates bracket the truth.

>>> spend = epsilon_spent(1.0, 0.01, 1000, 1e-5)
>>> spend.epsilon_prv < spend.epsilon_rdp, spend.epsilon_pld_lower <= spend.epsilon_pld
(True, True)
>>> round(spend.epsilon, 1)
1.8
>>> calibrated = calibrate_noise_multiplier(1.0, 1e-5, 0.01, 1000)
>>> calibrated.epsilon <= 1.0 and calibrated.epsilon_rdp <= 1.0 < epsilon_spent(
...     0.98 * calibrated.noise_multiplier, 0.01, 1000, 1e-5).epsilon_rdp
True
"""

from __future__ import annotations

import json
import logging
import math
import threading
import warnings
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np

from privehr.models.privacy.sampled_gaussian_rdp import rdp_per_step, sigma_by_bisection

# Opacus is imported where a value is computed, not here: importing it imports torch (seconds of CPU), and the
# ledger's views and budget checks mostly read stored curves and compositions (privehr/io/accounting_cache.py)

__all__ = ["PrivacySpend", "calibrate_noise_multiplier", "epsilon_spent", "prv_epsilon", "rdp_epsilon",
           "pld_epsilon", "compose_history", "check_target_epsilon", "RDP_ORDERS", "PLD_INTERVAL", "prv_error",
           "AccountingStore", "use_store", "use_store_factory", "accounting_version", "recompose_history",
           "DEFAULT_ALPHAS", "privacy_spent"]

PRV_MAX_POINTS = 2_000_000  # PRV's discretisation grid: 2 L / mesh points, several float64 arrays each
PLD_INTERVAL = 1e-4         # PLD's discretisation of the privacy loss (dp-accounting's default)
PLD_MAX_POINTS = 1_000_000  # PLD's grid over the composed loss: the interval widens beyond epsilon / this

# Opacus's RDPAccountant.DEFAULT_ALPHAS, spelled out (a test checks they agree), then the large orders
DEFAULT_ALPHAS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))
RDP_ORDERS = DEFAULT_ALPHAS + [2.0 ** k for k in range(7, 15)]


def privacy_spent(orders, rdp, delta: float) -> tuple[float, float]:
    """(epsilon, best order) from RDP at ``orders``: Opacus's ``get_privacy_spent`` (Balle et al. 2020, Theorem 21),
    the same arithmetic without importing Opacus (a test checks they agree), and without its "optimal order at the
    edge" warning (still a valid bound)."""
    orders_vec, rdp_vec = np.atleast_1d(np.asarray(orders, dtype=float)), np.atleast_1d(np.asarray(rdp, dtype=float))
    with np.errstate(invalid="ignore"):
        eps = rdp_vec - (np.log(delta) + np.log(orders_vec)) / (orders_vec - 1) + np.log((orders_vec - 1) / orders_vec)
    if np.isnan(eps).all():
        return np.inf, np.nan
    best = int(np.nanargmin(eps))
    return float(eps[best]), float(orders_vec[best])

History = list[tuple[float, float, int]]


class AccountingStore(Protocol):
    """Where calibrations and compositions outlive a process (``privehr.io.accounting_cache``: a SQLite file).

    Keys hold public inputs only ((epsilon, delta, q, T), or a composed history of (sigma, q, T)) and the
    :func:`accounting_version` of the code that computed the value; values are what the accountants returned."""

    def get(self, kind: str, key: str) -> dict | None: ...

    def put(self, kind: str, key: str, value: dict) -> None: ...


_STORE: AccountingStore | None = None
_STORE_FACTORY = None
_STORE_LOCK = threading.Lock()


def use_store(store: AccountingStore | None) -> AccountingStore | None:
    """Keep calibrations and compositions in ``store`` from now on (None: this process only); returns the previous."""
    global _STORE, _STORE_FACTORY
    previous = _store()  # a pending factory made now: the store it makes is what a caller restores later
    with _STORE_LOCK:
        _STORE, _STORE_FACTORY = store, None
    return previous


def use_store_factory(factory) -> None:
    """Open the store with ``factory()`` at the first calibration or composition that needs it (none is opened for a
    process that never accounts); the factory may return None (no store)."""
    global _STORE_FACTORY
    with _STORE_LOCK:
        if _STORE is None:
            _STORE_FACTORY = factory


def _store() -> AccountingStore | None:
    global _STORE, _STORE_FACTORY
    if _STORE_FACTORY is not None:
        with _STORE_LOCK:
            if _STORE_FACTORY is not None:
                factory, _STORE_FACTORY = _STORE_FACTORY, None
                _STORE = factory()
    return _STORE


@lru_cache(maxsize=1)
def accounting_version() -> str:
    """What a stored value depends on besides its key: the accountants' code and this module's discretisation."""
    from importlib.metadata import version

    return json.dumps(["privehr-accounting-4", version("opacus"), version("dp-accounting"), PRV_MAX_POINTS,
                       PLD_INTERVAL, PLD_MAX_POINTS, RDP_ORDERS])


def _stored_key(*parts) -> str:
    return json.dumps([accounting_version(), *parts])

# PRV takes log(0) at the edge of its domain for large q (harmless: those points carry no mass). Filtered once here:
# ``warnings.catch_warnings`` around each call is not thread-safe, and the grid's task runs account concurrently.
warnings.filterwarnings("ignore", message="divide by zero encountered in log", category=RuntimeWarning,
                        module=r"opacus\.accountants\.analysis\.prv")


@dataclass(frozen=True)
class PrivacySpend:
    """epsilon at ``delta`` of T Poisson-subsampled Gaussian steps (sigma, q), from every accountant."""

    noise_multiplier: float
    sample_rate: float
    steps: int
    delta: float
    epsilon_prv: float | None
    epsilon_rdp: float | None
    target_epsilon: float | None = None
    epsilon_pld: float | None = None        # pessimistic PLD: an upper bound
    epsilon_pld_lower: float | None = None  # optimistic PLD: a lower bound on the true epsilon
    prv_eps_error: float | None = None      # PRV's estimate is within this of the truth (it reports the upper end)

    @property
    def accountant(self) -> str:
        """The accountant of the claim: PRV where it could be computed, else RDP."""
        if self.epsilon_prv is None and self.epsilon_rdp is None:
            raise RuntimeError("no accountant could compute epsilon")
        return "prv" if self.epsilon_prv is not None else "rdp"

    @property
    def epsilon(self) -> float:
        """The claimed epsilon (see :attr:`accountant`)."""
        return self.epsilon_prv if self.accountant == "prv" else self.epsilon_rdp

    def as_dict(self) -> dict:
        return asdict(self) | {"epsilon": self.epsilon, "accountant": self.accountant}


def check_target_epsilon(target_epsilon) -> float:
    """A target epsilon must be a finite positive number: ``inf`` is no privacy, not a budget."""
    try:
        value = float(target_epsilon)
    except (TypeError, ValueError):
        raise ValueError(f"target epsilon {target_epsilon!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"target epsilon must be a finite positive number, got {target_epsilon!r}; "
                         "train without privacy with the non_private method instead")
    return value


def _tolerance(target: float) -> float:
    """Bisection tolerance on epsilon: 1 % of the target, at most 0.01."""
    return max(min(0.01, target / 100), 1e-8)


def prv_error(target: float) -> float:
    """PRV's eps_error: it returns the *upper* end of its estimate, so a coarser error only spends less
    of the budget; 10 % of the target keeps calibrations at epsilon <= 1e-3 to seconds per evaluation."""
    return max(min(0.01, target / 10), 1e-8)


@lru_cache(maxsize=65536)  # a ledger repeats its (sigma, q): each is computed once per process
def _rdp_step_computed(noise_multiplier: float, sample_rate: float, orders: tuple[float, ...]) -> np.ndarray:
    """RDP of one Poisson-subsampled Gaussian step at each order (Opacus's analysis, vectorised:
    :mod:`privehr.models.privacy.sampled_gaussian_rdp`; T steps compose to T times it)."""
    rdp = rdp_per_step(sample_rate, noise_multiplier, orders)
    rdp.setflags(write=False)
    return rdp


@lru_cache(maxsize=65536)
def _rdp_step_stored(noise_multiplier: float, sample_rate: float, orders: tuple[float, ...]) -> np.ndarray:
    """:func:`_rdp_step_computed`, kept in the store for the ledger's compositions (a growing database brings new
    (sigma, q) every night, each composed by every later process). Never used for a release's own claims or a
    calibration's check, which stay independent of the store."""
    store = _store()
    if store is None:
        return _rdp_step_computed(noise_multiplier, sample_rate, orders)
    key = _stored_key(noise_multiplier, sample_rate, list(orders))
    stored = store.get("rdp_step", key)
    if stored is not None and len(stored.get("rdp", [])) == len(orders):
        rdp = np.asarray(stored["rdp"], dtype=float)
        rdp.setflags(write=False)
        return rdp
    rdp = _rdp_step_computed(noise_multiplier, sample_rate, orders)
    store.put("rdp_step", key, {"rdp": [float(v) for v in rdp]})
    return rdp


def _rdp_spent(history: History, delta: float, orders: tuple[float, ...],
               stored: bool = False) -> tuple[float, float]:
    """(epsilon, best order) of ``history``: Opacus's RDPAccountant.get_privacy_spent, with the per-step RDP cached
    (``stored``: also kept in the store, for the ledger's compositions)."""
    per_step = _rdp_step_stored if stored else _rdp_step_computed
    rdp = sum([per_step(float(s), float(q), orders) * int(t) for s, q, t in history])
    eps, order = privacy_spent(orders, rdp, delta)
    return float(eps), float(order)


def rdp_epsilon(history: History, delta: float, stored: bool = False) -> float:
    """RDP's epsilon; the large orders are tried where Opacus's optimum sits at its largest order (``stored``: the
    per-step curves may come from the store, as the ledger's compositions take them)."""
    with warnings.catch_warnings():  # "optimal order is the largest alpha": still a valid upper bound
        warnings.simplefilter("ignore", UserWarning)
        eps, order = _rdp_spent(history, delta, tuple(DEFAULT_ALPHAS), stored)
        if order >= max(DEFAULT_ALPHAS):
            eps = min(eps, _rdp_spent(history, delta, tuple(RDP_ORDERS), stored)[0])
    return float(eps)


def _prv(history: History, delta: float, eps_error: float, epsilon_rdp: float) -> tuple[float | None, float]:
    """(PRV's epsilon or None, the eps_error it was computed with): see :func:`prv_epsilon`."""
    steps = sum(t for _, _, t in history)
    spread = math.sqrt(steps * math.log(12 / (delta / 1000)) / 2)
    needed = 2 * (2 * epsilon_rdp) * spread / PRV_MAX_POINTS
    if needed > eps_error:
        if needed > 0.1 * epsilon_rdp:
            return None, eps_error
        eps_error = needed
    try:
        prv = _prv_accountant()()
        prv.history = list(history)
        with warnings.catch_warnings():  # log(0) at the edge of PRV's domain for large q; its RDP domain estimate's
            warnings.simplefilter("ignore", RuntimeWarning)  # "largest alpha" note: both harmless
            warnings.simplefilter("ignore", UserWarning)
            epsilon = float(prv.get_epsilon(delta, eps_error=eps_error))
            # a loss beyond PRV's domain (very long compositions) comes back infinite: no estimate, RDP stands
            return (epsilon if math.isfinite(epsilon) else None), eps_error
    except (ValueError, RuntimeError, AssertionError, MemoryError):  # known numerical failures (opacus #591, #601)
        return None, eps_error


@lru_cache(maxsize=1)
def _prv_accountant():
    """Opacus's PRVAccountant, its safe domain sized by the vectorised RDP curve (Opacus's compute_safe_domain_size
    is the same arithmetic on its own, unvectorised RDP: half of a calibration's time at q = 0.5). The domain is
    L = max(RDP epsilon of the history at delta_error / 4, of each single step at delta_error / (8 N), eps_error) + 3
    and a mesh of eps_error / sqrt(N log(12 / delta_error) / 2), as there (Gopi et al. 2021, remark 5.6)."""
    from opacus.accountants import PRVAccountant
    from opacus.accountants.analysis.prv import Domain

    class _PRVAccountant(PRVAccountant):
        def _get_domain(self, prvs, num_self_compositions, eps_error, delta_error):
            total = sum(num_self_compositions)
            steps = [(float(p.noise_multiplier), float(p.sample_rate), int(n))
                     for p, n in zip(prvs, num_self_compositions)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                bound = _rdp_spent(steps, delta_error / 4, tuple(DEFAULT_ALPHAS))[0]
                for sigma, q, _ in steps:
                    bound = max(bound, _rdp_spent([(sigma, q, 1)], delta_error / (8 * total), tuple(DEFAULT_ALPHAS))[0])
            size = max(bound, eps_error) + 3
            return Domain.create_aligned(-size, size, eps_error / np.sqrt(total * np.log(12 / delta_error) / 2))

    return _PRVAccountant


def prv_epsilon(history: History, delta: float, eps_error: float, epsilon_rdp: float) -> float | None:
    """PRV's epsilon for a (heterogeneous) history, or None where it cannot be had.

    PRV discretises the privacy loss on a grid of about 2 L / mesh points, L >= the composed epsilon
    (estimated by RDP's) and mesh = eps_error / sqrt(N log(12 / delta_error) / 2) for N steps in all:
    long, large-q compositions (DP-NF on a small table: q = 0.5, tens of thousands of steps) would need
    tens of millions of points and gigabytes. The error is widened to keep the grid under
    PRV_MAX_POINTS (the widened error is what :class:`PrivacySpend` records); if that would make it
    coarser than 10 % of the RDP value, PRV is skipped (None) and the RDP bound stands.
    """
    return _prv(history, delta, eps_error, epsilon_rdp)[0]


def pld_epsilon(history: History, delta: float, pessimistic: bool = True,
                epsilon_rdp: float | None = None) -> float | None:
    """PLD's epsilon (dp-accounting): an upper bound when ``pessimistic``, else a lower bound; None on failure.

    Each distinct (sigma, q) is discretised once and self-composed T times; distinct ones compose by
    convolution. Add/remove-one neighbours, as PRV and RDP. The loss is discretised every
    PLD_INTERVAL, widened to keep about epsilon / interval <= PLD_MAX_POINTS (epsilon estimated by
    RDP's): a coarser grid stays a valid bound, and absurd budgets (epsilon in the thousands) would
    otherwise take gigabytes.
    """
    logging.getLogger("absl").setLevel(logging.ERROR)
    epsilon_rdp = rdp_epsilon(history, delta) if epsilon_rdp is None else epsilon_rdp
    interval = max(PLD_INTERVAL, epsilon_rdp / PLD_MAX_POINTS)
    total = None
    try:
        for sigma, q, steps in history:
            one = _pld_of(float(sigma), float(q), int(steps), interval, pessimistic)
            total = one if total is None else total.compose(one)
        return None if total is None else float(total.get_epsilon_for_delta(delta))
    except (ValueError, RuntimeError, OverflowError, MemoryError):
        return None


@lru_cache(maxsize=16)  # the ledger's few distinct releases, composed again at every budget check
def _pld_of(sigma: float, q: float, steps: int, interval: float, pessimistic: bool):
    """The PLD of ``steps`` Poisson-subsampled Gaussian steps (dp-accounting; its objects are not mutated)."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    return pld.from_gaussian_mechanism(standard_deviation=sigma, sensitivity=1.0, sampling_prob=q,
                                       pessimistic_estimate=pessimistic, value_discretization_interval=interval,
                                       use_connect_dots=pessimistic).self_compose(steps)


@dataclass(frozen=True)
class Composition:
    """Every accountant's epsilon of one history at one delta."""

    prv: float | None
    rdp: float
    pld: float | None
    pld_lower: float | None
    prv_eps_error: float

    @property
    def claimed(self) -> float:
        return self.prv if self.prv is not None else self.rdp


def compose_history(history: History, delta: float, eps_error: float | None = None, bracket: bool = False,
                    max_distinct: int | None = None) -> Composition:
    """PRV (claim), RDP and PLD of ``history``; ``bracket`` also computes PLD's lower bound. With ``max_distinct``, a
    history of more distinct mechanisms than that whose composition is not already stored gets RDP alone (PRV and PLD
    None): their heterogeneous compositions take minutes once a growing database brings new (sigma, q) every night,
    and a view must not wait for them (the filter, RDP, is what a budget binds on)."""
    history = tuple((float(s), float(q), int(t)) for s, q, t in history if t > 0)
    if max_distinct is not None and len(history) > max_distinct and not _stored(history, delta, eps_error, bracket):
        return Composition(None, rdp_epsilon(list(history), delta, stored=True), None, None, 0.0)
    return _compose(history, delta, eps_error, bracket)


def _stored(history: tuple, delta: float, eps_error: float | None, bracket: bool) -> bool:
    store = _store()
    key = _stored_key([list(h) for h in sorted(history)], delta, eps_error, bracket)
    return store is not None and store.get("composition", key) is not None


@lru_cache(maxsize=256)  # the same ledger is composed again by the report, the summary and `privehr privacy ledger`
def _compose(history: tuple[tuple[float, float, int], ...], delta: float, eps_error: float | None,
             bracket: bool) -> Composition:
    history = tuple(sorted(history))  # composition is commutative: one key for every order
    if not history:
        return Composition(0.0, 0.0, 0.0, 0.0, 0.0)
    key = _stored_key([list(h) for h in history], delta, eps_error, bracket)
    store = _store()
    stored = store.get("composition", key) if store is not None else None
    if stored is not None:
        return Composition(**stored)
    composed = _compose_now(list(history), delta, eps_error, bracket, stored=True)
    if store is not None:
        store.put("composition", key, asdict(composed))
    return composed


def _compose_now(history: History, delta: float, eps_error: float | None, bracket: bool,
                 stored: bool = False) -> Composition:
    eps_rdp = rdp_epsilon(history, delta, stored)
    eps_prv, error = _prv(history, delta, eps_error if eps_error is not None else prv_error(eps_rdp), eps_rdp)
    return Composition(eps_prv, eps_rdp, pld_epsilon(history, delta, True, eps_rdp),
                       pld_epsilon(history, delta, False, eps_rdp) if bracket else None, error)


def recompose_history(history: History, delta: float, eps_error: float | None = None,
                      bracket: bool = False) -> Composition:
    """:func:`compose_history` computed afresh, past every cache and store (what ``--verify`` compares with)."""
    history = sorted((float(s), float(q), int(t)) for s, q, t in history if t > 0)
    return _compose_now(history, delta, eps_error, bracket) if history else Composition(0.0, 0.0, 0.0, 0.0, 0.0)


def _rdp_of_one(history: History, delta: float, target_epsilon: float | None) -> float:
    with warnings.catch_warnings():  # "optimal order is the largest alpha": still a valid upper bound
        warnings.simplefilter("ignore", UserWarning)
        eps_rdp = _rdp_spent(history, delta, tuple(DEFAULT_ALPHAS))[0]
        if target_epsilon is None or eps_rdp > target_epsilon:  # the large orders are slower; use them if needed
            eps_rdp = min(eps_rdp, _rdp_spent(history, delta, tuple(RDP_ORDERS))[0])
    return eps_rdp


def epsilon_spent(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                  target_epsilon: float | None = None) -> PrivacySpend:
    """epsilon after ``steps`` Poisson-subsampled Gaussian steps, from PRV, RDP and PLD (bracketed)."""
    history = [(noise_multiplier, sample_rate, steps)]
    eps_rdp = _rdp_of_one(history, delta, target_epsilon)
    eps_prv, error = _prv(history, delta, prv_error(target_epsilon or eps_rdp), eps_rdp)
    return PrivacySpend(noise_multiplier, sample_rate, steps, delta, eps_prv, eps_rdp, target_epsilon,
                        pld_epsilon(history, delta, True, eps_rdp), pld_epsilon(history, delta, False, eps_rdp), error)


def _sigma_for(accountant: str, target_epsilon: float, delta: float, sample_rate: float, steps: int):
    if accountant == "rdp":  # Opacus's orders first, the large orders only where those cannot reach
        for orders in (tuple(DEFAULT_ALPHAS), tuple(RDP_ORDERS)):
            try:  # Opacus's get_noise_multiplier, step for step, on the vectorised RDP curve
                return sigma_by_bisection(
                    lambda sigma: privacy_spent(orders, rdp_per_step(sample_rate, sigma, orders) * steps, delta)[0],
                    target_epsilon, _tolerance(target_epsilon))
            except (ValueError, RuntimeError, FloatingPointError):
                continue
        return None
    from opacus.accountants.utils import get_noise_multiplier

    try:
        with warnings.catch_warnings():  # PRV's log(0) at its domain edge; its RDP domain's "largest alpha" note
            warnings.simplefilter("ignore", UserWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            return get_noise_multiplier(target_epsilon=target_epsilon, target_delta=delta, sample_rate=sample_rate,
                                        steps=steps, accountant=accountant,
                                        epsilon_tolerance=_tolerance(target_epsilon),
                                        eps_error=prv_error(target_epsilon))
    except (ValueError, RuntimeError, AssertionError):
        return None


@lru_cache(maxsize=256)  # public inputs only; 1-3 s a calibration at q = 0.5 (bench/results/calibration_speed.json)
def calibrate_noise_multiplier(target_epsilon: float, delta: float, sample_rate: float, steps: int) -> PrivacySpend:
    """Smallest sigma (to Opacus's tolerance) for which PRV and RDP both give epsilon <= target
    (PRV alone where the target is below what RDP can certify at any sigma).

    RDP's bisection is cheap and RDP is almost always the looser bound, so its sigma is found first
    and PRV is only evaluated there; PRV's own (slow) bisection runs only if PRV still exceeds the
    target at that sigma.

    With a store (:func:`use_store`) a calibration is made once for every process: a stored one is taken only after
    RDP's epsilon at its sigma is computed again here and found equal, and at or below the target (a tenth of a
    calibration's cost at q = 0.5, a fortieth at q = 0.06), so a damaged or edited store cannot weaken a release.
    """
    target_epsilon = check_target_epsilon(target_epsilon)
    key = _stored_key(target_epsilon, float(delta), float(sample_rate), int(steps))
    store = _store()
    stored = store.get("calibration", key) if store is not None else None
    if stored is not None:
        spend = PrivacySpend(**stored)
        one = [(spend.noise_multiplier, float(sample_rate), int(steps))]
        again = _rdp_of_one(one, delta, target_epsilon)
        if spend.epsilon_rdp is not None:
            if again <= target_epsilon and math.isclose(again, spend.epsilon_rdp, rel_tol=1e-9, abs_tol=1e-12):
                return spend
        elif spend.epsilon_prv is not None and spend.epsilon_prv <= target_epsilon:  # below RDP's reach: PRV alone
            prv = _prv(one, delta, spend.prv_eps_error, again)[0]
            if prv is not None and prv <= target_epsilon:
                return spend
    spend = _calibrate(target_epsilon, delta, sample_rate, steps)
    if store is not None:
        store.put("calibration", key, asdict(spend))
    return spend


def _calibrate(target_epsilon: float, delta: float, sample_rate: float, steps: int) -> PrivacySpend:
    sigma = _sigma_for("rdp", target_epsilon, delta, sample_rate, steps)
    spend = epsilon_spent(sigma, sample_rate, steps, delta, target_epsilon) if sigma else None
    if spend is None or spend.epsilon_prv is None or spend.epsilon_prv > target_epsilon:
        sigma_prv = _sigma_for("prv", target_epsilon, delta, sample_rate, steps)
        candidates = [s for s in (sigma, sigma_prv) if s is not None]
        if not candidates:
            raise RuntimeError(f"no accountant can reach epsilon {target_epsilon} at delta {delta} with q = "
                               f"{sample_rate:.4g} and {steps} steps; raise the target or change q and steps")
        spend = epsilon_spent(max(candidates), sample_rate, steps, delta, target_epsilon)
    binding = [spend.epsilon_prv] + ([spend.epsilon_rdp] if sigma is not None else [])
    if any(e is not None and e > target_epsilon for e in binding):
        raise RuntimeError(f"calibration failed: sigma {spend.noise_multiplier} gives epsilon {spend.as_dict()} "
                           f"above the target {target_epsilon}")
    return spend
