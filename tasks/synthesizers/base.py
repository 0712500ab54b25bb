"""The synthesizer interface and its registry: one class per way of making synthetic tables from a table's
training patients (``synthesis.synthesizers``: maf, hflow, aim, mst).

A :class:`SynthesisMethod` says what the budget check and the ``synthesize`` task need: the ledger entry of a
job's release, planned before anything is trained (and its DP-SGD plan, for a flow), whether it needs the
spec's bounds or the optional baselines library, and how it fits and samples. The task does the rest alike
for every synthesizer (resume, reservation, decoding, the release record) and never branches on the name.
Adding one is a module here, its name in ``privehr.core.config.Synthesizer`` and its test.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, get_args

import pandas as pd

from privehr.core.config import Budget, SynthesisConfig, Synthesizer
from privehr.core.registry import Registry
from privehr.models.column_codec import TableCodec
from privehr.models.privacy_ledger import LedgerEntry
from privehr.models.randomness import NoiseSource
from privehr.models.release_plan import ReleasePlan

__all__ = ["SynthesisMethod", "SynthesisJob", "Synthesized", "SYNTHESIZERS", "register_synthesizer",
           "get_synthesizer"]

SYNTHESIZERS: Registry["SynthesisMethod"] = Registry("synthesizer", declared=get_args(Synthesizer))
register_synthesizer = SYNTHESIZERS.register
get_synthesizer = SYNTHESIZERS.__getitem__


@dataclass
class SynthesisJob:
    """One (synthesizer, imputation, budget, run) job with its training and held-out patients."""

    job: dict
    config: SynthesisConfig
    spec: object
    train: pd.DataFrame
    test: pd.DataFrame
    attributes: list[str]
    rows: int                      # rows per synthetic table
    noise: NoiseSource             # the release's secret randomness (never stored)
    seed: int                      # public: initialisation and post-processing only
    codec: TableCodec | None       # the spec's codec where the synthesizer needs bounds
    flows_dir: Path
    device: str
    record: callable               # record(entry): enter the release in the ledger under its reservation

    @property
    def budget(self) -> Budget:
        return Budget(**self.job["budget"])


@dataclass
class Synthesized:
    """What a synthesizer released: its guarantee, the synthetic tables and what the release record says."""

    guarantee: str
    tables: list[pd.DataFrame]
    release: dict                  # mechanism, noise source, epsilon, ... (the plan's record for a flow)
    held_out: float | None         # held-out log-likelihood per patient (flows)
    scaling: dict                  # how values were scaled, and whether the guarantee covers it
    model: dict                    # the synthesizer's settings
    extra: dict = field(default_factory=dict)


class SynthesisMethod(ABC):
    name: ClassVar[str]
    what: ClassVar[str]            # the ledger's description of a release
    #: needs the optional ``privehr[baselines]`` install (private-pgm)
    needs_baselines: ClassVar[bool] = False

    def needs_bounds(self, config: SynthesisConfig) -> bool:
        """Whether it scales or bins columns by the spec's bounds (refused up front where the spec has none)."""
        return True

    def plan(self, config: SynthesisConfig, job: dict, n: int) -> ReleasePlan | None:
        """The DP-SGD plan of a flow job on ``n`` patients (None: not a DP-SGD release)."""
        return None

    @abstractmethod
    def planned_entry(self, config: SynthesisConfig, job: dict, n: int, guarantee: str) -> LedgerEntry:
        """What the job enters in the ledger (reserved by the budget check, recorded when trained)."""

    @abstractmethod
    def synthesize(self, job: SynthesisJob) -> Synthesized:
        """Fit on ``job.train``, record the release (``job.record``) before anything is saved, then sample."""
