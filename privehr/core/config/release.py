"""What a run of ``privehr-pipeline`` may hand out of the hospital: the release bundle's settings.

The bundle (``artifacts/<run-id>/release/``) holds the chosen models, the featurizer statistics they need, a DP
evaluation on the test split and a model card; every number in it is public or the output of a DP mechanism the
budget check reserved and the ledger recorded. These settings say where each of those numbers comes from and what
its share of the budget is.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Literal

from pydantic import Field

from privehr.core.config.base import _Strict, PositiveFloat
from privehr.core.config.privacy import project_ledger

__all__ = ["ReleaseConfig", "FeaturizerSource", "RecordCount", "ScoringConfig", "SignerTrust"]


@dataclass(frozen=True)
class SignerTrust:
    """Whom a bundle's signature must come from (``privehr.io.bundle_signature.trusted_signer``): the key with the
    ``pinned`` fingerprint; else the hospital's own key beside ``ledger_path`` or a signer recorded there on first use;
    else, with ``trust_on_first_use``, this first signer (recorded)."""

    pinned: str | None
    ledger_path: Path
    trust_on_first_use: bool = False

FeaturizerSource = Literal["public", "dp", "exact"]
RecordCount = Literal["dp", "public"]


class ReleaseConfig(_Strict):
    """The release bundle: which models go in it, and how its featurizer, counts and evaluation are made private."""

    bundle: bool = Field(True, description="write artifacts/<run-id>/release/ (models, featurizer, DP evaluation, "
                                           "model card, manifest) when a grid cell matches `include`")
    include: list[str] = Field(
        default_factory=lambda: ["*-dp_sgd-bce-eps1"], min_length=1,
        description="cell ids (glob patterns, e.g. mort_icu-grud-dp_sgd-bce-eps1) whose seed-0 fit goes into the "
                    "bundle; chosen here, before training, never by private results (a choice by test or dev "
                    "score would be tuning outside the guarantee)")
    featurizer: FeaturizerSource = Field(
        "public", description="where the featurizer's per-variable mean and scale come from: MIMIC-Extract's "
                              "published statistics (public: no budget; every variable must be one of its LEVEL2 "
                              "names), a Gaussian mechanism on the training patients' clipped values with bounds "
                              "from the spec's valid ranges (dp: featurizer_epsilon), or the training stays exactly "
                              "(exact: the bundle is then not DP end to end, and says so)")
    featurizer_epsilon: PositiveFloat = Field(0.5, description="featurizer: dp's (epsilon, privacy.delta)")
    record_count: RecordCount = Field(
        "dp", description="the record counts that set each DP-SGD plan's sampling rate and steps: released by the "
                          "geometric mechanism at count_epsilon (dp), or taken as public (public: only where the "
                          "deployment publishes its cohort size anyway; recorded as that choice, and the bundle's "
                          "plans then reveal the counts)")
    count_epsilon: PositiveFloat = Field(0.1, description="record_count: dp's epsilon (the train, dev and test "
                                                          "counts at once: each patient is in one split)")
    evaluation_epsilon: PositiveFloat = Field(0.5, description="(epsilon, privacy.delta) of each bundled model's DP "
                                                               "evaluation: noisy per-class score histograms on test")
    evaluation_bins: int = Field(30, ge=4, le=1000, description="score bins of the DP evaluation (fixed logit-spaced "
                                                               "edges; more bins, more noise per bin)")
    interval_resamples: int = Field(1000, ge=100, description="parametric bootstrap resamples of the DP metrics' "
                                                             "intervals (test sampling and DP noise)")

    def bundles(self, cell_id: str) -> bool:
        """Whether the seed-0 fit of cell ``cell_id`` goes into the bundle."""
        return self.bundle and any(fnmatchcase(cell_id, pattern) for pattern in self.include)


class ScoringConfig(_Strict):
    """``privehr-score``: score the stays of a MIMIC-Extract file with a release bundle's models (the bundle alone)."""

    bundle: Path = Field(..., description="a run's release/ folder, or a copy of it (verified before use)")
    data: Path = Field(..., description="the MIMIC-Extract file of the stays to score")
    out: Path = Field(..., description="CSV of risks, one row per stay (or, for format meds, a directory): "
                                       "patient-level, keep it where the data may be")
    models: list[str] | None = Field(None, description="bundled models' cell ids (default: all)")
    chunk_rows: int = Field(32768, ge=1, description="hourly rows read at a time")
    format: Literal["csv", "meds"] = Field("csv", description="csv: one file, a row per stay; meds: out is a directory "
                                           "of Parquet files, one per model, in the MEDS prediction schema "
                                           "(meds-evaluation reads them), and not_scored.csv")
    recalibrate: bool = Field(False, description="also each model's risks through the logistic recalibration its DP "
                              "evaluation released (risk_recalibrated_<model>), where its DP calibration slope is "
                              "informative")
    key_fingerprint: str | None = Field(
        None, description="the fingerprint of the key the bundle must be signed by (64 hex digits, received from the "
                          "hospital by another channel); default: the hospital's own signing key beside the project's "
                          "ledger, or a signer trusted on first use")
    trust_on_first_use: bool = Field(
        False, description="where no signer is trusted yet (no fingerprint given, no own signing key, none recorded), "
                           "trust this bundle's signer and record it beside the ledger; a bundle another key signed "
                           "is refused from then on")
    ledger_path: Path = Field(default_factory=project_ledger,
                              description="the project's privacy ledger, beside which the hospital's signing key and "
                                          "the signers trusted on first use are (default: the project's)")

    def signer_trust(self) -> SignerTrust:
        """What a bundle's signer is checked against."""
        return SignerTrust(self.key_fingerprint, self.ledger_path, self.trust_on_first_use)
