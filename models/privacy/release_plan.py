"""The plan of one DP release, computed once before any private record is touched.

Every DP release in privehr (a DP-SGD classifier, a DP-NF flow, a DP-SGD search trial) is T steps
of the Poisson-subsampled Gaussian mechanism. Its :class:`ReleasePlan` fixes, from the number n of
private records and the configuration alone:

* the expected batch b and the sampling rate q = 1 / ceil(n / b) (Opacus's rule: one over the
  number of batches of a loader of batch size b), b = min(batch_size, n) for DP-SGD and
  b = ceil(rate * n) for DP-NF;
* the steps T (epochs * ceil(n / b) for DP-SGD; given for DP-NF), which the trainers take exactly;
* the noise multiplier sigma, calibrated to a target epsilon (PRV and RDP both at or below it) or
  to a mu-GDP budget (sigma = 1 / sqrt(log(1 + (mu / q)^2 / T)));
* delta, and epsilon from PRV (the claim), RDP and PLD (:mod:`privehr.models.privacy.accounting`).

The budget check reserves the plan's spend in the ledger, the trainer reads sigma, q and T from it
and checks that it took exactly T steps at rate q, and the ledger and the report print its epsilons:
one delta, one claim rule, one formula for q and T. :meth:`ReleasePlan.record` is what may be
written out: it leaves out n and the expected batch, which are counts of private records.

>>> plan = ReleasePlan.for_epochs(1000, batch_size=100, epochs=2, target_epsilon=1.0, delta=1e-5)
>>> plan.sample_rate, plan.steps, plan.epsilon <= 1.0
(0.1, 20, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from privehr.models.privacy.gdp import gdp_epsilon, gdp_mu, sigma_for_mu
from privehr.models.privacy.ledger import LedgerEntry
from privehr.models.privacy.accounting import PrivacySpend, calibrate_noise_multiplier, check_target_epsilon, epsilon_spent

__all__ = ["ReleasePlan", "GaussianPlan", "Reserved", "poisson_rate", "rate_batch"]


def poisson_rate(n: int, expected_batch: int) -> float:
    """q = 1 / ceil(n / b): Opacus's sampling rate for a loader of batch size b over n records."""
    if n < 1:
        raise ValueError("a DP release needs at least one private record")
    return 1 / math.ceil(n / min(max(1, expected_batch), n))


def rate_batch(n: int, rate: float) -> int:
    """b = ceil(rate n), at least 1: the expected batch of a requested sampling rate (DP-NF's ``sample_rate``)."""
    return max(1, math.ceil(rate * n))


@dataclass(frozen=True)
class ReleasePlan:
    """sigma, q, T, C and delta of one release, and what they cost (epsilon from every accountant)."""

    n: int                         # private records (never written out: see record())
    expected_batch: int            # b (likewise)
    sample_rate: float             # q
    steps: int                     # T
    noise_multiplier: float        # sigma
    max_grad_norm: float           # C (does not enter epsilon; recorded with the release)
    delta: float
    target_epsilon: float | None   # the (epsilon, delta) target, or None for a mu budget
    target_mu: float | None        # the mu-GDP budget, or None
    spend: PrivacySpend

    @classmethod
    def for_epochs(cls, n: int, batch_size: int, epochs: int, *, target_epsilon: float, delta: float,
                   max_grad_norm: float = 1.0) -> "ReleasePlan":
        """DP-SGD: ``epochs`` passes of ceil(n / b) Poisson steps at q = 1 / ceil(n / b), sigma for the target."""
        batch = min(batch_size, n)
        steps = epochs * round(1 / poisson_rate(n, batch))
        return cls._calibrated(n, batch, steps, target_epsilon, delta, max_grad_norm)

    @classmethod
    def for_mu(cls, n: int, rate: float, steps: int, *, mu: float, delta: float,
               max_grad_norm: float = 1.0) -> "ReleasePlan":
        """DP-NF, DP-VI: T Poisson steps at q = 1 / ceil(n / ceil(rate n)), sigma for a mu-GDP budget."""
        if not (math.isfinite(mu) and mu > 0):
            raise ValueError(f"mu must be a finite positive number, got {mu!r}")
        batch = rate_batch(n, rate)
        q = poisson_rate(n, batch)
        sigma = sigma_for_mu(mu, q, steps)
        return cls(n, batch, q, steps, sigma, max_grad_norm, delta, None, mu, epsilon_spent(sigma, q, steps, delta))

    @classmethod
    def for_epsilon(cls, n: int, rate: float, steps: int, *, target_epsilon: float, delta: float,
                    max_grad_norm: float = 1.0) -> "ReleasePlan":
        """DP-NF: T Poisson steps at q = 1 / ceil(n / ceil(rate n)), sigma for an (epsilon, delta) target."""
        return cls._calibrated(n, rate_batch(n, rate), steps, target_epsilon, delta, max_grad_norm)

    @classmethod
    def _calibrated(cls, n: int, batch: int, steps: int, target_epsilon: float, delta: float,
                    max_grad_norm: float) -> "ReleasePlan":
        """sigma such that PRV and RDP both stay at or below ``target_epsilon`` for T Poisson steps of batch b."""
        target_epsilon = check_target_epsilon(target_epsilon)
        q = poisson_rate(n, batch)
        spend = calibrate_noise_multiplier(target_epsilon, delta, q, steps)
        return cls(n, batch, q, steps, spend.noise_multiplier, max_grad_norm, delta, target_epsilon, None, spend)

    @classmethod
    def for_noise(cls, n: int, rate: float, steps: int, *, noise_multiplier: float, delta: float,
                  max_grad_norm: float = 1.0) -> "ReleasePlan":
        """A given sigma (benchmarks, conversions): T Poisson steps at q = 1 / ceil(n / ceil(rate n))."""
        batch = rate_batch(n, rate)
        q = poisson_rate(n, batch)
        return cls(n, batch, q, steps, noise_multiplier, max_grad_norm, delta, None, None,
                   epsilon_spent(noise_multiplier, q, steps, delta))

    def clipped_at(self, max_grad_norm: float) -> "ReleasePlan":
        """The same plan with clipping norm C: C does not enter epsilon, so nothing is calibrated again (a search
        over C trains every trial, and the final fit, by the plan the budget check reserved)."""
        return replace(self, max_grad_norm=max_grad_norm)

    @property
    def steps_per_epoch(self) -> int:
        return round(1 / self.sample_rate)

    @property
    def epsilon(self) -> float:
        """The claimed epsilon: PRV where it could be computed, else RDP."""
        return self.spend.epsilon

    @property
    def accountant(self) -> str:
        return self.spend.accountant

    @property
    def mu(self) -> float:
        return gdp_mu(self.noise_multiplier, self.sample_rate, self.steps)

    def ledger_entry(self, guarantee: str = "dp", what: str = "") -> LedgerEntry:
        """The plan as a ledger entry (dataset and release id are the ledger's to fill in)."""
        s = self.spend
        return LedgerEntry("", "", "dp_sgd", self.epsilon, self.delta, self.noise_multiplier, self.sample_rate,
                           self.steps, guarantee=guarantee, what=what, epsilon_prv=s.epsilon_prv,
                           epsilon_rdp=s.epsilon_rdp, epsilon_pld=s.epsilon_pld)

    def record(self) -> dict:
        """What is written with the release: no count of private records."""
        s = self.spend
        return {"mechanism": "dp_sgd", "noise_multiplier": self.noise_multiplier, "sample_rate": self.sample_rate,
                "steps": self.steps, "max_grad_norm": self.max_grad_norm, "delta": self.delta,
                "target_epsilon": self.target_epsilon, "target_mu": self.target_mu,
                "epsilon": self.epsilon, "accountant": self.accountant, "epsilon_prv": s.epsilon_prv,
                "epsilon_rdp": s.epsilon_rdp, "epsilon_pld": s.epsilon_pld, "epsilon_pld_lower": s.epsilon_pld_lower,
                "prv_eps_error": s.prv_eps_error, "mu": self.mu, "epsilon_gdp": gdp_epsilon(self.mu, self.delta)}


@dataclass(frozen=True)
class GaussianPlan:
    """One Gaussian mechanism on the whole private data (a sum or a histogram of sensitivity-bounded records): noise
    of standard deviation sigma times the L2 sensitivity, sigma calibrated to a target epsilon. It is the
    subsampled Gaussian at q = 1 for one step, so the ledger composes it exactly with every DP-SGD release.

    >>> plan = GaussianPlan.for_epsilon(0.5, 1e-5)
    >>> plan.ledger_entry(what="featurizer statistics").mechanism, plan.epsilon <= 0.5
    ('gaussian', True)
    """

    noise_multiplier: float
    delta: float
    target_epsilon: float
    spend: PrivacySpend

    @classmethod
    def for_epsilon(cls, target_epsilon: float, delta: float) -> "GaussianPlan":
        spend = calibrate_noise_multiplier(check_target_epsilon(target_epsilon), delta, 1.0, 1)
        return cls(spend.noise_multiplier, delta, target_epsilon, spend)

    @property
    def epsilon(self) -> float:
        return self.spend.epsilon

    def ledger_entry(self, guarantee: str = "dp", what: str = "") -> LedgerEntry:
        s = self.spend
        return LedgerEntry("", "", "gaussian", self.epsilon, self.delta, self.noise_multiplier, 1.0, 1,
                           guarantee=guarantee, what=what, epsilon_prv=s.epsilon_prv, epsilon_rdp=s.epsilon_rdp,
                           epsilon_pld=s.epsilon_pld)

    def record(self) -> dict:
        s = self.spend
        return {"mechanism": "gaussian", "noise_multiplier": self.noise_multiplier, "sample_rate": 1.0, "steps": 1,
                "delta": self.delta, "target_epsilon": self.target_epsilon, "epsilon": self.epsilon,
                "accountant": s.accountant, "epsilon_prv": s.epsilon_prv, "epsilon_rdp": s.epsilon_rdp,
                "epsilon_pld": s.epsilon_pld}


@dataclass(frozen=True)
class Reserved:
    """A release the budget check reserved: the ledger's reservation id and the plan it reserved (None for a
    release without a DP mechanism). The fit trains by this very plan: it is built once per release."""

    reservation: str
    plan: ReleasePlan | GaussianPlan | None = None
