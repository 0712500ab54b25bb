"""Membership inference against a synthetic table: the DOMIAS density-ratio attack, scored by TPR at low FPR.

References:
    van Breugel, Sun, Qian, van der Schaar (2023). Membership Inference Attacks against Synthetic Data through
    Overfitting Detection (DOMIAS). AISTATS. arXiv:2302.12580.
    Stadler, Oprisanu, Troncoso (2022). Synthetic Data -- Anonymisation Groundhog Day. USENIX Security.
    Houssiau, Jordon, Cohen, Daniel, Elliott, Geddes, Mole, Rangel-Smith, Szpruch (2022). TAPAS: a Toolbox for
    Adversarial Privacy Auditing of Synthetic Data. NeurIPS Workshop on Synthetic Data for Empowering ML Research.
    Carlini, Chien, Nasr, Song, Terzis, Tramer (2022). Membership Inference Attacks From First Principles. IEEE S&P
    (why TPR at a low FPR, not AUROC alone, measures a privacy attack).

Distance checks (DCR, "share closer to train") can pass while records still leak (arXiv 2505.01524); Stadler et al.
2022 and Houssiau et al. 2022 attack synthetic tables with shadow synthesizers instead. DOMIAS needs no shadow
fits: an attacker holding the synthetic table and a *reference* sample of real people from the same population
scores a candidate record x by

    score(x) = p_syn(x) / p_ref(x),

high where the generator put more mass than the population has (it overfitted x). Both densities are Gaussian
kernel density estimates here, on columns standardised by the reference sample's means and standard deviations (a
reference column with SD 0 keeps SD 1). The kernel is isotropic in those units with Scott's bandwidth
h = n ** (-1 / (d + 4)), n the rows of the sample it smooths (the synthetic table for p_syn, the reference for
p_ref): standardising by the *reference* keeps one metric for both densities, and an isotropic kernel needs no
covariance matrix, so a synthetic column that came out constant (a marginal synthesizer can do that) or two
collinear columns do not make the estimate singular, as scipy's full-covariance ``gaussian_kde`` would.
Discrete columns (category codes 0..k-1, binary 0/1) are treated as numbers after standardisation: a kernel over
codes, as DOMIAS's own KDE does. Missing values: a cell that is missing (or not finite) in any frame is filled with
the reference's mean of its column (0 after standardisation); a column missing in every reference row is dropped.

The "local overfitting" baseline (``syn_only_*``) scores by p_syn(x) alone (p_ref := 1): DOMIAS's ablation, which
flags any record in a dense region, member or not.

Scott's bandwidth is chosen for a smooth density, not for spotting copies: in few dimensions it is wider than the
spacing of the records, and even a table of copied training rows barely moves p_syn at a member (2 columns, 500
copied rows: AUROC ~0.55; 10 columns: ~0.98). A low AUROC is therefore a lower bound on what a stronger attacker
(a tuned bandwidth, a flow density, shadow synthesizers) could infer, never a proof of privacy. On FLCHAIN (10
columns, several of them discrete) a table that *is* the training rows scores AUROC 0.63 and TPR 5 % at FPR 1 %
with Scott's bandwidth (``bench/synthesis_membership.py``): ``bandwidth_factor`` narrows both kernels, and at 0.1
the p_syn-only score catches such a copy almost perfectly (a distance-to-closest-synthetic-record attack), while
the ratio stays weaker because p_ref -> 0 around outlying non-members inflates their scores.

Evaluation: members are the synthesizer's training records, non-members real records of the same population
that it did not see and that are not in the reference sample. AUROC of the score, and the TPR at FPR 10 %, 1 % and
0.1 %: the largest share of members scored above a threshold that at most floor(FPR * n_nonmembers) non-members
exceed (ties counted against the attacker, as ``sklearn.metrics.roc_curve`` groups them). With n non-members the
smallest non-zero FPR is 1 / n: a target FPR below it is not resolvable, and its TPR is reported as ``None`` (named
in ``unresolvable_fprs``) rather than as the TPR at FPR 0. Everything here is deterministic; the only randomness
(``max_members`` subsampling) has a fixed public seed: the attack is an evaluation, not a DP mechanism.

>>> rng = np.random.default_rng(0)
>>> members, reference, nonmembers = (rng.normal(size=(200, 8)) for _ in range(3))
>>> copied = members + rng.normal(scale=0.01, size=members.shape)  # a "synthesizer" that copies its rows
>>> result = domias_attack(copied, members, nonmembers, reference)
>>> result["auroc"] > 0.9, result["tpr_at_0p1pct"], result["unresolvable_fprs"], result["min_resolvable_fpr"]
(True, None, [0.001], 0.005)
>>> round(domias_attack(rng.normal(size=(200, 8)), members, nonmembers, reference)["auroc"], 1)
0.5
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.special import logsumexp
from sklearn.metrics import roc_auc_score, roc_curve

__all__ = ["FPRS", "domias_attack", "domias_scores", "gaussian_kde_log_density", "holdout_split",
           "tpr_at_fpr", "metric_key"]

FPRS = (0.001, 0.01, 0.1)  # 0.1 %, 1 %, 10 %
SEED = 20230425  # public: the order of a member subsample, nothing secret


def metric_key(fpr: float) -> str:
    """``tpr_at_0p1pct`` for 0.001, ``tpr_at_1pct`` for 0.01, ``tpr_at_10pct`` for 0.1."""
    percent = f"{100 * fpr:g}".replace(".", "p")
    return f"tpr_at_{percent}pct"


def _matrix(frame) -> np.ndarray:
    values = frame.to_numpy(float) if isinstance(frame, pd.DataFrame) else np.asarray(frame, float)
    return values.reshape(len(values), -1)


def gaussian_kde_log_density(points: np.ndarray, sample: np.ndarray, factor: float = 1.0,
                             chunk: int = 2048) -> np.ndarray:
    """log of the isotropic Gaussian KDE of ``sample`` (n x d, already standardised) at ``points``, bandwidth
    ``factor`` times Scott's rule h = n ** (-1 / (d + 4))."""
    n, d = sample.shape
    h = factor * n ** (-1.0 / (d + 4))
    norm = -np.log(n) - d * np.log(h) - 0.5 * d * np.log(2 * np.pi)
    sample_sq = (sample ** 2).sum(axis=1)
    out = np.empty(len(points))
    for start in range(0, len(points), chunk):
        block = points[start:start + chunk]
        sq = (block ** 2).sum(axis=1)[:, None] + sample_sq[None, :] - 2.0 * block @ sample.T
        out[start:start + chunk] = logsumexp(-0.5 * np.maximum(sq, 0.0) / h ** 2, axis=1) + norm
    return out


def _standardise(reference: np.ndarray, *others: np.ndarray) -> tuple[np.ndarray, ...]:
    """Every frame standardised by the reference's column means and SDs; missing cells -> the reference mean (0);
    columns missing in every reference row dropped."""
    reference = np.where(np.isfinite(reference), reference, np.nan)
    keep = ~np.isnan(reference).all(axis=0)
    mean = np.nanmean(reference[:, keep], axis=0)
    sd = np.nanstd(reference[:, keep], axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    out = []
    for frame in (reference, *others):
        z = (frame[:, keep] - mean) / sd
        out.append(np.where(np.isfinite(z), z, 0.0))
    return tuple(out)


def domias_scores(synthetic, candidates, reference, bandwidth_factor: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(log p_syn(x) - log p_ref(x), log p_syn(x)) for every candidate row x: the DOMIAS score and its
    p_ref := 1 baseline, both as logs (the same ranking)."""
    reference, synthetic, candidates = _standardise(_matrix(reference), _matrix(synthetic), _matrix(candidates))
    log_syn = gaussian_kde_log_density(candidates, synthetic, bandwidth_factor)
    log_ref = gaussian_kde_log_density(candidates, reference, bandwidth_factor)
    return log_syn - log_ref, log_syn


def tpr_at_fpr(members: np.ndarray, nonmembers: np.ndarray, fpr: float) -> float | None:
    """The largest TPR at an FPR <= ``fpr`` (higher score = member); None where fpr < 1 / len(nonmembers)."""
    if fpr * len(nonmembers) < 1 - 1e-9:
        return None
    y = np.r_[np.ones(len(members)), np.zeros(len(nonmembers))]
    fprs, tprs, _ = roc_curve(y, np.r_[members, nonmembers], drop_intermediate=False)
    return float(tprs[fprs <= fpr + 1e-12].max())


def _summary(members: np.ndarray, nonmembers: np.ndarray, fprs, prefix: str = "") -> dict:
    y = np.r_[np.ones(len(members)), np.zeros(len(nonmembers))]
    out = {f"{prefix}auroc": float(roc_auc_score(y, np.r_[members, nonmembers]))}
    return out | {f"{prefix}{metric_key(f)}": tpr_at_fpr(members, nonmembers, f) for f in fprs}


def domias_attack(synthetic, members, nonmembers, reference, fprs=FPRS, max_members: int | None = None,
                  bandwidth_factor: float = 1.0) -> dict:
    """DOMIAS against one synthetic table: AUROC and TPR at each FPR of the density-ratio score and of its
    p_syn-only baseline, with the candidate counts and the FPRs the non-member count cannot resolve.

    ``synthetic``, ``members`` (the synthesizer's training rows), ``nonmembers`` (real rows it did not see) and
    ``reference`` (other real rows it did not see: the attacker's sample of the population): frames or arrays with
    the same columns in the same order. ``bandwidth_factor`` scales Scott's bandwidth of both densities (1: Scott's
    rule; a narrower kernel, e.g. 0.1, turns the p_syn-only score into a near-copy detector). ``max_members``
    subsamples the members (public seed) to bound the cost; the non-members, which set the resolvable FPRs, are never subsampled."""
    members, nonmembers = _matrix(members), _matrix(nonmembers)
    if len(members) < 1 or len(nonmembers) < 1:
        raise ValueError("the attack needs at least one member and one non-member candidate")
    if max_members is not None and len(members) > max_members:
        members = members[np.sort(np.random.default_rng(SEED).choice(len(members), max_members, replace=False))]
    candidates = np.r_[members, nonmembers]
    score, syn_only = domias_scores(synthetic, candidates, reference, bandwidth_factor)
    m = len(members)
    n = len(nonmembers)
    return {**_summary(score[:m], score[m:], fprs), **_summary(syn_only[:m], syn_only[m:], fprs, "syn_only_"),
            "n_members": int(m), "n_nonmembers": int(n), "n_reference": int(len(_matrix(reference))),
            "n_synthetic": int(len(_matrix(synthetic))), "bandwidth_factor": float(bandwidth_factor),
            "min_resolvable_fpr": 1.0 / n,
            "unresolvable_fprs": [f for f in fprs if f * n < 1 - 1e-9]}


def holdout_split(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(reference, non-members): the held-out rows at even positions and at odd positions of the frame's order, a
    public rule that needs no randomness and splits any order (sorted or not) into halves of the same kind."""
    return frame.iloc[0::2], frame.iloc[1::2]
