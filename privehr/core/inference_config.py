"""``privehr-private-inference``: posterior inference from private records, by DP-NF-VI and by VI on DP synthetic
data (Su et al. 2023, Section 4). Defaults are the paper's settings.

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from privehr.core.config import DPNFConfig, PositiveFloat, PrivacyConfig, _ledger_beside_runs, _resume_needs_run_id, _Strict, RunId

__all__ = ["VIConfig", "RecordDensityConfig", "SyntheticVIConfig", "InferenceConfig"]


class VIConfig(_Strict):
    """The variational flow and its training, private (Algorithm 2) or not (Su et al. 2023: one MADE of 10 hidden
    units, m = 1000 draws, q = 500/6000, lr 0.01 decaying by 0.999 per step, T = 8000, C = 10)."""

    blocks: int = Field(1, ge=1, description="MADE blocks of the flow over the parameters")
    hidden_size: int = Field(10, ge=2)
    hidden_layers: int = Field(1, ge=1)
    draws: int = Field(1000, ge=1, description="Monte Carlo draws m of the parameters per step")
    steps: int = Field(8000, ge=1, description="steps T (DP and non-private)")
    sample_rate: float = Field(500 / 6000, gt=0, le=1, description="Poisson rate q of records per DP step; the "
                                                                   "non-private minibatch is ceil(q n)")
    max_grad_norm: PositiveFloat = Field(10.0, description="per-record clipping norm C")
    learning_rate: PositiveFloat = 0.01
    lr_decay: float = Field(0.999, gt=0, le=1, description="exponential learning-rate decay per step")
    optimizer: Literal["adam", "rmsprop"] = Field(
        "rmsprop", description="RMSprop (Su et al. 2023 allow Adam or RMSprop): as the flow contracts onto the "
        "posterior its gradients shrink by orders of magnitude, and Adam's second moment, averaged over ~1000 "
        "steps, then holds its steps far below the learning rate (measured: SD 10x the exact posterior's after 8000 "
        "steps)")


class RecordDensityConfig(DPNFConfig):
    """The DP-NF of the records in route (b) (Su et al. 2023: one MADE of 10 hidden units with batch norm, RMSprop
    at lr 0.01 decaying by 0.999 per step, T = 8000, q = 500/6000, C = 10); here two MADE blocks of 16 hidden units, no
    batch norm (training-mode batch norm mixes records and releases un-noised statistics), and Adam at a constant
    lr 0.01 (privehr's DP-NF trainer, privehr.models.dpsgd.density)."""

    blocks: int = Field(2, ge=1, description="MADE blocks, reversed order between blocks")
    hidden_size: int = Field(16, ge=2)
    steps: int = Field(8000, ge=1, description="DP-SGD steps T")
    sample_rate: float = Field(500 / 6000, gt=0, le=1, description="Poisson rate q of records")
    learning_rate: float = Field(0.01, gt=0, description="Adam")


class SyntheticVIConfig(_Strict):
    """Route (b): a DP-NF density of the records, ``datasets`` synthetic tables, NF-VI on each (Su et al. 2023,
    Table 7)."""

    datasets: int = Field(5, ge=1, description="synthetic tables per DP-NF; their posteriors are pooled")
    density: RecordDensityConfig = RecordDensityConfig()


class InferenceConfig(_Strict):
    """Everything one run of ``privehr-private-inference`` needs."""

    model: str = Field("nonlinear_repeated_measures", description="the likelihood, by its registered name "
                                                                 "(privehr.models.inference.likelihood.LIKELIHOODS)")
    data_path: Path | None = Field(None, description="a CSV of records, one row per subject (one DP unit) with the "
                                                     "model's columns (read only); default: simulate the paper's design")
    subjects: int = Field(6000, ge=2, description="simulated subjects (with no data_path)")
    data_seed: int = Field(2023, description="seed of the simulated records (the stand-in for private data)")
    routes: list[Literal["dp_nf_vi", "synthetic_vi"]] = Field(
        default_factory=lambda: ["dp_nf_vi", "synthetic_vi"], min_length=1,
        description="dp_nf_vi: Algorithm 2 (Table 6); synthetic_vi: VI on DP-NF synthetic data (Table 7)")
    mus: list[PositiveFloat] = Field(default_factory=lambda: [6.68, 1.12, 0.50, 0.27], min_length=1,
                                     description="mu-GDP budgets (epsilon 50, 5, 2, 1 at delta 1e-5 by the paper's "
                                                 "conversion; the PRV and RDP epsilons are reported)")
    runs: int = Field(5, ge=1, description="releases per (route, loss, mu): mean (SD) over runs")
    losses: list[Literal["free_energy", "tempered"]] = Field(
        default_factory=lambda: ["free_energy", "tempered"], min_length=1,
        description="DP-NF-VI losses: the paper's free energy, and the tempered free energy (alternative)")
    temperature: float = Field(0.1, gt=0, lt=1, description="tau of the tempered loss (its draws are shrunk back "
                                                            "by sqrt(tau))")
    non_private: bool = Field(True, description="also the exact posterior and the non-private NF-VI (recorded in "
                                                "the ledger as non-private)")
    reference_draws: int = Field(20000, ge=100, description="importance-sampling draws of the exact posterior")
    summary_draws: int = Field(20000, ge=100, description="draws from each fitted flow for its summaries")
    vi: VIConfig = VIConfig()
    synthetic: SyntheticVIConfig = SyntheticVIConfig()
    privacy: PrivacyConfig = PrivacyConfig()
    artifacts_dir: Path = Field(Path("artifacts"), description="runs go to <artifacts_dir>/<run-id>/")
    run_id: RunId | None = None
    resume: bool = Field(False, description="continue run_id's directory: fits whose result exists are not redone")

    _resume_needs_run_id = model_validator(mode="after")(lambda self: _resume_needs_run_id(self))
    _ledger_beside_runs = model_validator(mode="after")(lambda self: _ledger_beside_runs(self))

    @model_validator(mode="after")
    def _distinct(self):
        labels = [f"{mu:g}" for mu in self.mus]
        if len(set(labels)) != len(labels):
            raise ValueError(f"mus must be distinct (as printed to 6 digits): {', '.join(labels)}; a budget given "
                             "twice would be one reservation for two releases")
        for name in ("routes", "losses"):
            if len(set(getattr(self, name))) != len(getattr(self, name)):
                raise ValueError(f"{name} lists an entry twice")
        return self

    def jobs(self) -> list[dict]:
        """One fit each: the non-private NF-VI runs, then every (route, loss, mu, run)."""
        jobs = [{"route": "nf_vi", "loss": "free_energy", "mu": None, "run": r, "job_id": f"nf_vi-run{r}"}
                for r in range(self.runs if self.non_private else 0)]
        for mu in self.mus:
            for r in range(self.runs):
                if "dp_nf_vi" in self.routes:
                    jobs += [{"route": "dp_nf_vi", "loss": loss, "mu": mu, "run": r,
                              "job_id": f"dp_nf_vi-{loss}-mu{mu:g}-run{r}"} for loss in self.losses]
                if "synthetic_vi" in self.routes:
                    jobs.append({"route": "synthetic_vi", "loss": "free_energy", "mu": mu, "run": r,
                                 "job_id": f"synthetic_vi-mu{mu:g}-run{r}"})
        assert len({j["job_id"] for j in jobs}) == len(jobs), "job ids must be unique (one reservation each)"
        return jobs
