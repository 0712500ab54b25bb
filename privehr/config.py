"""Typed configuration shared by the CLI, the Prefect flows and the deployments.

One pydantic model per stage; ``PipelineConfig`` nests them. Prefect validates deployment parameters
against the same schema, so a bad value is refused before any run starts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from privehr.errors import InputError

__all__ = ["DataConfig", "SplitConfig", "LogisticRegressionConfig", "VersioningConfig",
           "PipelineConfig", "load_config"]

Label = Literal["mort_icu", "los_3"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataConfig(_Strict):
    """Where the MIMIC-Extract file is and which window of each stay the models see."""

    hdf5_path: Path = Field(Path("data/mimic/all_hourly_data.h5"),
                            description="MIMIC-Extract all_hourly_data.h5 (read only, never written)")
    window_hours: int = Field(24, ge=1, le=240, description="hours of input per stay")
    gap_hours: int = Field(6, ge=0, le=240, description="cohort: max_hours > window + gap")
    chunk_rows: int = Field(32768, ge=256, description="hourly rows read at a time (bounds memory)")


class SplitConfig(_Strict):
    """Subject-level split, stratified by the label combination."""

    train: float = Field(0.7, gt=0, lt=1)
    dev: float = Field(0.1, gt=0, lt=1)
    test: float = Field(0.2, gt=0, lt=1)
    seed: int = 1

    @model_validator(mode="after")
    def _sums_to_one(self):
        if abs(self.train + self.dev + self.test - 1.0) > 1e-9:
            raise ValueError(f"split fractions must sum to 1, got {self.train + self.dev + self.test}")
        return self


class LogisticRegressionConfig(_Strict):
    """Non-private logistic regression trained with AdamW and early stopping on dev AUROC."""

    learning_rate: float = Field(1e-3, gt=0)
    weight_decay: float = Field(1e-2, ge=0)
    batch_size: int = Field(128, ge=1)
    max_epochs: int = Field(50, ge=1)
    patience: int = Field(8, ge=1)
    seed: int = 0


class VersioningConfig(_Strict):
    """Version each run directory with DVC (``dvc add artifacts/<run-id>``, then push)."""

    dvc: bool = True
    push: bool = Field(True, description="push to the default DVC remote when one is configured")


class PipelineConfig(_Strict):
    """Everything one run of ``privehr-pipeline`` needs."""

    data: DataConfig = DataConfig()
    split: SplitConfig = SplitConfig()
    labels: list[Label] = Field(default_factory=lambda: ["mort_icu", "los_3"], min_length=1)
    logistic_regression: LogisticRegressionConfig = LogisticRegressionConfig()
    versioning: VersioningConfig = VersioningConfig()
    artifacts_dir: Path = Field(Path("artifacts"), description="runs go to <artifacts_dir>/<run-id>/")
    run_id: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]+$",
                               description="defaults to a UTC timestamp plus a random suffix")
    device: Literal["auto", "cpu", "cuda"] = "auto"


def load_config(path: str | Path | None = None, **overrides) -> PipelineConfig:
    """A ``PipelineConfig`` from a YAML/JSON file (optional) with dotted overrides applied.

    ``overrides`` maps dotted keys to values, e.g. ``{"data.hdf5_path": "x.h5"}``.
    """
    raw: dict = {}
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise InputError(f"config file not found: {path}")
        text = path.read_text()
        raw = (json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)) or {}
        if not isinstance(raw, dict):
            raise InputError(f"config file {path} must hold a mapping of settings")
    for dotted, value in overrides.items():
        if value is None:
            continue
        node = raw
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    try:
        return PipelineConfig.model_validate(raw)
    except ValueError as err:
        raise InputError(f"invalid configuration: {err}") from None
