"""The exact exponential mechanism on a 2-D grid, to measure how close an ExpM+NF flow comes to it.

For a two-parameter model (logistic regression on one feature: weight and bias), the target
p(theta) ∝ exp(eps u(theta) / (2s)) is evaluated on a fine grid (the L1 term of u makes it proper);
its marginal CDFs give Kolmogorov-Smirnov distances to the flow's samples, and draws from the grid
(cell by probability, uniform within the cell) give an unbiased MMD^2 with a Gaussian kernel.
"""

from __future__ import annotations

import numpy as np
import torch

from privehr.models.expm.batched_utility import BatchedUtility

__all__ = ["grid_log_density", "grid_samples", "ks_marginals", "mmd2"]


@torch.no_grad()
def grid_log_density(utility: BatchedUtility, epsilon: float, axes: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Normalised log probabilities of the grid cells (len(axes[0]) x len(axes[1]))."""
    if utility.dim != 2:
        raise ValueError("the grid comparison needs a model with exactly 2 parameters")
    a, b = np.meshgrid(*axes, indexing="ij")
    theta = torch.as_tensor(np.stack([a.ravel(), b.ravel()], 1), dtype=torch.float32)
    u = torch.cat([utility(theta[i:i + 4096]) for i in range(0, len(theta), 4096)]).double().numpy()
    log_p = epsilon * u / (2 * utility.sensitivity)
    log_p -= np.logaddexp.reduce(log_p)
    return log_p.reshape(a.shape)


def grid_samples(log_p: np.ndarray, axes, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    cells = rng.choice(log_p.size, size=n, p=np.exp(log_p.ravel()) / np.exp(log_p).sum())
    i, j = np.unravel_index(cells, log_p.shape)
    step = [ax[1] - ax[0] for ax in axes]
    return np.stack([axes[0][i] + rng.uniform(-0.5, 0.5, n) * step[0],
                     axes[1][j] + rng.uniform(-0.5, 0.5, n) * step[1]], 1)


def ks_marginals(samples: np.ndarray, log_p: np.ndarray, axes) -> list[float]:
    """KS distance of each coordinate of ``samples`` to the grid marginal (CDF linear within cells)."""
    p = np.exp(log_p)
    out = []
    for k, marginal in enumerate((p.sum(1), p.sum(0))):
        ax = axes[k]
        edges = np.concatenate([[ax[0] - (ax[1] - ax[0]) / 2], (ax[1:] + ax[:-1]) / 2, [ax[-1] + (ax[1] - ax[0]) / 2]])
        cdf = np.concatenate([[0.0], np.cumsum(marginal) / marginal.sum()])
        x = np.sort(samples[:, k])
        model = np.interp(x, edges, cdf)
        empirical_hi = np.arange(1, x.size + 1) / x.size
        empirical_lo = np.arange(0, x.size) / x.size
        out.append(float(max(np.abs(empirical_hi - model).max(), np.abs(model - empirical_lo).max())))
    return out


def mmd2(x: np.ndarray, y: np.ndarray, bandwidth: float | None = None) -> float:
    """Unbiased squared MMD with a Gaussian kernel (bandwidth: median pairwise distance of the pooled set)."""
    z = np.concatenate([x, y])
    d2 = ((z[:, None, :] - z[None, :, :]) ** 2).sum(-1)
    if bandwidth is None:
        bandwidth = float(np.sqrt(np.median(d2[np.triu_indices(len(z), 1)])))
    k = np.exp(-d2 / (2 * bandwidth**2))
    n, m = len(x), len(y)
    kxx, kyy, kxy = k[:n, :n], k[n:, n:], k[:n, n:]
    return float((kxx.sum() - np.trace(kxx)) / (n * (n - 1)) + (kyy.sum() - np.trace(kyy)) / (m * (m - 1))
                 - 2 * kxy.mean())
