"""The likelihood-ratio membership inference attack, LiRA (Carlini et al., IEEE S&P 2022, arXiv:2112.03570).

S shadow models are trained on random halves of a population, every example IN for exactly S/2 of
them. For a model's output logit z on example (x, y), the confidence is the stable log-odds of the
true label, phi = (2y - 1) z (never log(p / (1 - p)) of a rounded probability). Per example, phi is
modelled as Gaussian over the shadows where it was IN and where it was OUT (location: the median;
scale: the per-example standard deviation, or one global one with ``fixed_variance`` and wherever
fewer than two shadows are available):

    online   score = log N(phi; mu_in, s_in) - log N(phi; mu_out, s_out)
    offline  score = Phi((phi - mu_out) / s_out)          (one-sided; only OUT shadows needed)

Larger scores mean "member". Evaluation is leave-one-out: each shadow in turn is the target and the
others are its shadows. Leaving the target out leaves an example the target trained on S/2 - 1 IN and
S/2 OUT shadows, and the reverse for one it did not; with few shadows that asymmetry alone moves the
AUC far from 1/2 when there is no membership signal at all (0.36 at S = 6 for the online attack). So each
example's larger side drops one shadow (the first, by index: membership is random, so the choice is
independent of phi) and both sides keep S/2 - 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import norm
from sklearn.metrics import roc_auc_score, roc_curve

__all__ = ["shadow_membership", "logit_confidence", "lira_scores", "roc_summary", "leave_one_out", "balanced_shadows",
           "AttackROC"]


def shadow_membership(n_shadows: int, n_examples: int, seed: np.random.Generator | int = 0) -> np.ndarray:
    """(S, N) boolean: every example IN for exactly S/2 shadows (S even); ``seed`` a generator or an int."""
    if n_shadows < 2 or n_shadows % 2:
        raise ValueError("the number of shadows must be even and at least 2")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    order = rng.random((n_shadows, n_examples)).argsort(0)
    return order < n_shadows // 2


def logit_confidence(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """phi = (2y - 1) z for a single-logit sigmoid classifier."""
    return (2 * np.asarray(labels, dtype=float) - 1) * np.asarray(logits, dtype=float)


def _scale(phi: np.ndarray, fixed_variance: bool, eps: float) -> np.ndarray:
    """Per-example std over the non-NaN shadows; the global std where fixed, or where fewer than 2 shadows."""
    global_std = np.nanstd(phi)
    if fixed_variance:
        return np.full(phi.shape[1], max(global_std, eps))
    count = np.sum(~np.isnan(phi), axis=0)
    per_example = np.nanstd(np.where(count >= 2, phi, 0.0), axis=0)
    return np.maximum(np.where(count >= 2, per_example, global_std), eps)


def lira_scores(target_phi: np.ndarray, shadow_phi: np.ndarray, shadow_in: np.ndarray, online: bool = True,
                fixed_variance: bool = False, eps: float = 1e-30, use: np.ndarray | None = None) -> np.ndarray:
    """Membership scores of the target's examples (larger = more likely a member); ``use`` (shadows x
    examples, boolean) leaves a shadow out of an example's estimates where it is False."""
    shadow_in = shadow_in.astype(bool)
    if use is not None:
        shadow_phi = np.where(use, shadow_phi, np.nan)
    out_phi = np.where(~shadow_in, shadow_phi, np.nan)
    mu_out = np.nanmedian(out_phi, axis=0)
    s_out = _scale(out_phi, fixed_variance, eps)
    if not online:
        return norm.cdf((target_phi - mu_out) / s_out)
    in_phi = np.where(shadow_in, shadow_phi, np.nan)
    mu_in = np.nanmedian(in_phi, axis=0)
    s_in = _scale(in_phi, fixed_variance, eps)
    return norm.logpdf(target_phi, mu_in, s_in) - norm.logpdf(target_phi, mu_out, s_out)


@dataclass
class AttackROC:
    fpr: np.ndarray
    tpr: np.ndarray
    auc: float
    tpr_at: dict[float, float]


def roc_summary(scores: np.ndarray, members: np.ndarray, fprs=(1e-3, 1e-2)) -> AttackROC:
    """ROC of a score against true membership; TPR at each FPR = the best TPR with FPR <= it."""
    fpr, tpr, _ = roc_curve(members.astype(int), scores)
    tpr_at = {f: float(tpr[fpr <= f].max()) if (fpr <= f).any() else 0.0 for f in fprs}
    return AttackROC(fpr, tpr, float(roc_auc_score(members.astype(int), scores)), tpr_at)


def balanced_shadows(shadow_in: np.ndarray) -> np.ndarray:
    """(shadows x examples) mask keeping as many IN as OUT shadows per example: where one side is larger,
    its first shadows (by index) are dropped."""
    shadow_in = shadow_in.astype(bool)
    n_in = shadow_in.sum(0)
    keep = np.minimum(n_in, shadow_in.shape[0] - n_in)
    rank_in = np.cumsum(shadow_in, 0)  # 1-based rank of each shadow within its side, counted from the top
    rank_out = np.cumsum(~shadow_in, 0)
    # drop the first (side size - keep) shadows of each side
    return np.where(shadow_in, rank_in > n_in - keep, rank_out > (shadow_in.shape[0] - n_in) - keep)


def leave_one_out(phi: np.ndarray, membership: np.ndarray, online: bool = True, fixed_variance: bool = False,
                  fprs=(1e-3, 1e-2)) -> list[AttackROC]:
    """Attack every shadow in turn with the others as its shadows, balanced per example (module docstring)."""
    out = []
    for t in range(phi.shape[0]):
        rest = np.arange(phi.shape[0]) != t
        scores = lira_scores(phi[t], phi[rest], membership[rest], online, fixed_variance,
                             use=balanced_shadows(membership[rest]))
        out.append(roc_summary(scores, membership[t], fprs))
    return out
