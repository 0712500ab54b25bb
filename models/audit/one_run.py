"""Auditing differential privacy in one training run (Steinke, Nasr, Jagielski, NeurIPS 2023).

m canaries are each included in training independently with probability 1/2. After training, an
attacker scores every canary, guesses IN for the k+ highest scores and OUT for the k- lowest, and
abstains on the rest: r = k+ + k- guesses, v of them correct. If training is (eps, delta)-DP, then
(Theorem 5.2, Appendix D)

    P[V >= v] <= beta + 2 m delta * alpha,   q = e^eps / (1 + e^eps),
    beta = P[Bin(r, q) >= v],  alpha = max_{1<=i<=v} P[v - i <= Bin(r, q) < v] / i,

so the largest eps whose p-value stays below the significance level is a lower bound on the true
eps at that confidence. Choosing (k+, k-) after looking at the scores is a multiple test: with
several candidate thresholds the significance is split among them (Bonferroni). The *ceiling* is the
bound a perfect guesser (v = r) could reach with the same m, r and delta: no attack can certify more.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

__all__ = ["p_value", "epsilon_lower_bound", "epsilon_ceiling", "OneRunAudit", "audit_scores"]


def p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """Probability that an (epsilon, delta)-DP run lets r guesses on m canaries get >= v right."""
    q = 1.0 / (1.0 + np.exp(-epsilon))
    beta = binom.sf(v - 1, r, q)
    if v == 0 or delta == 0:
        return float(min(beta, 1.0))
    running = np.cumsum(binom.pmf(np.arange(v - 1, -1, -1), r, q))  # P[v - i <= Bin < v], i = 1..v
    alpha = float(np.max(running / np.arange(1, v + 1)))
    return float(min(beta + alpha * delta * 2 * m, 1.0))


def epsilon_lower_bound(m: int, r: int, v: int, delta: float = 0.0, significance: float = 0.05) -> float:
    """Largest eps rejected at ``significance`` (bisection; returns the conservative end)."""
    if r == 0 or v == 0 or p_value(m, r, v, 0.0, delta) >= significance:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) < significance:
        hi += 1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p_value(m, r, v, mid, delta) < significance else (lo, mid)
    return lo


def epsilon_ceiling(m: int, r: int, delta: float = 0.0, significance: float = 0.05) -> float:
    """The bound a perfect guesser (all r guesses right) would certify."""
    return epsilon_lower_bound(m, r, r, delta, significance)


@dataclass(frozen=True)
class OneRunAudit:
    m: int
    k_plus: int
    k_minus: int
    correct: int
    delta: float
    significance: float
    thresholds_tried: int
    epsilon_lower: float
    epsilon_ceiling: float

    @property
    def guesses(self) -> int:
        return self.k_plus + self.k_minus


def audit_scores(scores: np.ndarray, included: np.ndarray, delta: float = 0.0, significance: float = 0.05,
                 k_grid: list[tuple[int, int]] | None = None) -> OneRunAudit:
    """Run the one-run audit on canary scores (higher = more likely IN).

    Args:
        scores: one score per canary.
        included: 1 where the canary was in the training set, else 0.
        k_grid: candidate (k+, k-) pairs; the best bound over them is reported with the significance
            split over the grid (Bonferroni). Default: a single pair, k+ = k- = m // 10.
    """
    scores = np.asarray(scores, dtype=float)
    included = np.asarray(included).astype(bool)
    m = scores.size
    k_grid = k_grid or [(m // 10, m // 10)]
    order = np.argsort(-scores, kind="stable")
    level = significance / len(k_grid)
    best = None
    for k_plus, k_minus in k_grid:
        if k_plus + k_minus > m:
            raise ValueError(f"k+ + k- = {k_plus + k_minus} exceeds the {m} canaries")
        correct = int(included[order[:k_plus]].sum() + (~included[order[m - k_minus:]]).sum()) if k_minus else \
            int(included[order[:k_plus]].sum())
        bound = epsilon_lower_bound(m, k_plus + k_minus, correct, delta, level)
        if best is None or bound > best[0]:
            best = (bound, k_plus, k_minus, correct)
    bound, k_plus, k_minus, correct = best
    return OneRunAudit(m=m, k_plus=k_plus, k_minus=k_minus, correct=correct, delta=delta, significance=significance,
                       thresholds_tried=len(k_grid), epsilon_lower=bound,
                       epsilon_ceiling=epsilon_ceiling(m, k_plus + k_minus, delta, level))
