"""Typed results that the training tasks write, the resume logic reads back and the report aggregates.

A :class:`FitRow` is one final fit of one grid cell and seed: the cell, test metrics (aggregates only),
the release's plan record for DP-SGD, its guarantee and its time. ``fit-and-evaluate`` builds it, saves it
next to the model (``RunLayout.fit_result``), and a resumed run reads it back through the same class; the
report validates every row it is given, so a number in ``results.csv`` traces back to one field here.

>>> row = FitRow(label="mort_icu", model="grud", method="dp_sgd", loss="bce", target_epsilon=1.0, seed=0,
...              device="cpu", auroc=0.81, auprc=0.42, guarantee="DP", fit_seconds=3.2, epsilon_prv=0.98)
>>> row.cell_id, row.epsilon_prv
('mort_icu-grud-dp_sgd-bce-eps1', 0.98)
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from privehr.core.config import Cell, Label, Loss, Method, Model

__all__ = ["FitRow", "IngestSummary", "SplitSummary", "ImputationSummary", "ReleasedCount", "RecordCounts",
           "RUN_RECORDS"]


class FitRow(BaseModel):
    """One final fit: every field the result files and the report carry (None where a method has none)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # the cell and the fit
    label: Label
    model: Model
    method: Method
    loss: Loss
    target_epsilon: float | None = None
    seed: int
    device: str
    # test metrics (aggregates): AUROC/AUPRC, None where a class is absent (``note`` says so)
    n: int | None = None
    positives: int | None = None
    auroc: float | None
    auprc: float | None
    note: str | None = None
    # ExpM+NF: the draws' spread, the posterior-predictive and MAP draws, and the fit gap
    auroc_q25: float | None = None
    auroc_q75: float | None = None
    auroc_single_release: float | None = None
    auroc_bayes: float | None = None
    auroc_map: float | None = None
    gap_std: float | None = None
    gap_range: float | None = None
    eval_samples: int | None = None
    final_loss: float | None = None
    # training and, for DP-SGD, the release plan's record
    epochs: int | None = None
    epsilon_prv: float | None = None
    epsilon_rdp: float | None = None
    epsilon_pld: float | None = None
    noise_multiplier: float | None = None
    sample_rate: float | None = None
    steps: int | None = None
    delta: float | None = None
    accountant: str | None = None
    noise_source: str | None = None
    guarantee: str
    fit_seconds: float  # of a batched group: its wall time over its members
    batch_members: int | None = None  # releases trained with this one as one batched model (None: alone)
    release: str | None = None  # the release's id in the privacy ledger (what a bundle's manifest cites)

    @property
    def cell(self) -> Cell:
        return Cell(label=self.label, model=self.model, method=self.method, loss=self.loss,
                    target_epsilon=self.target_epsilon)

    @property
    def cell_id(self) -> str:
        return self.cell.cell_id


class _Summary(BaseModel):
    """A run-directory summary read back by later tasks: the fields they read are typed; the rest is carried."""

    model_config = ConfigDict(extra="allow", frozen=True)


class IngestSummary(_Summary):
    """``ingest.json``: the raw file's fingerprint (as DVC tracks it) and its shape."""

    sha256: str


class SplitSummary(_Summary):
    """``split_summary.json``: stays and subjects per split, and the manifest's fingerprint."""

    counts: dict[str, dict[str, int]]
    manifest_sha256: str

    def stays(self, *splits: str) -> int:
        return sum(self.counts[s]["stays"] for s in splits)


class ImputationSummary(_Summary):
    """``imputation.json``: the spec, the imputed attributes and derived columns, the number m of datasets, patients
    per split and the quarantine's decisions."""

    spec: str
    m: int
    attributes: list[str]
    derived: list[str] = []
    patients: dict[str, int]
    decisions: dict


class ReleasedCount(_Summary):
    """``released_count.json``: the patient count released with epsilon-DP noise."""

    count: int                  # the noisy total (the tables' rows)
    epsilon: float
    train: int | None = None    # the noisy training count every DP plan is built from
    release: str | None = None  # the ledger's release of the counts


class RecordCounts(_Summary):
    """``record_counts.json``: the stays per split every plan is built from; ``source`` is "dp" (geometric noise at
    ``epsilon``, the ledger's ``release``), "reproducible" (the same mechanism with reproducible noise: not DP) or
    "public" (the exact counts, by the run's explicit choice)."""

    source: str
    stays: dict[str, int]
    epsilon: float | None
    release: str | None

    def of(self, *splits: str) -> int:
        return sum(self.stays[s] for s in splits)


#: which record each run-directory summary is read as (``RunLayout`` attribute -> class)
RUN_RECORDS = {"ingest": IngestSummary, "split_summary": SplitSummary, "imputation": ImputationSummary,
               "released_count": ReleasedCount, "record_counts": RecordCounts}
