"""The synthesizer interface and its registry: one class per way of making synthetic tables from a table's
training patients (``synthesis.synthesizers``: maf, hflow, aim, mst, aim_dyadic).

A :class:`SynthesisMethod` is configured by the synthesis settings and says what the budget check and the
``synthesize`` task need: the plan of a job's release and its ledger entry, known before anything is trained;
whether it needs the spec's bounds or the optional baselines library; and how it fits and samples
(``fit(job, data, plan, noise) -> Synthesized``). It is pure: the task reserves the plan, hands that same plan
to ``fit``, records the entry, and saves the state and the tables alike for every synthesizer, never branching
on the name. Adding one is a module in this package, its name in ``privehr.core.config.Synthesizer`` and its
test.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, get_args

import pandas as pd

from privehr.core.config import Budget, SynthesisConfig, Synthesizer
from privehr.core.registry import Registry
from privehr.models.privacy.ledger import LedgerEntry
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import ReleasePlan

__all__ = ["SynthesisMethod", "SynthesisData", "Synthesized", "SYNTHESIZERS", "register_synthesizer",
           "get_synthesizer", "create_synthesizer", "synthesizer_display_name"]

SYNTHESIZERS: Registry["SynthesisMethod"] = Registry("synthesizer", declared=get_args(Synthesizer),
                                                     requires=("display_name",))
register_synthesizer = SYNTHESIZERS.register
get_synthesizer = SYNTHESIZERS.__getitem__
create_synthesizer = SYNTHESIZERS.create


def synthesizer_display_name(name: str) -> str:
    """A synthesizer's name for people (its class's ``display_name``); an unknown name as it is."""
    try:
        return SYNTHESIZERS[name].display_name
    except (KeyError, ValueError):
        return name


@dataclass(frozen=True)
class SynthesisData:
    """A job's training and held-out patients, the table's spec, and the public sizes and seed of its tables."""

    train: pd.DataFrame
    test: pd.DataFrame
    attributes: list[str]
    spec: object
    rows: int                      # rows per synthetic table
    seed: int                      # public: initialisation and post-processing only


@dataclass
class Synthesized:
    """What a synthesizer released: its ledger entry and guarantee, the synthetic tables, what the release record
    says, and the learned state the task keeps with the patient-level files (``state_``: name -> object)."""

    entry: LedgerEntry
    guarantee: str
    tables: list[pd.DataFrame]
    release: dict                  # mechanism, noise source, epsilon, ... (the plan's record for a flow)
    held_out: float | None         # held-out log-likelihood per patient (flows)
    scaling: dict                  # how values were scaled, and whether the guarantee covers it
    model: dict                    # the synthesizer's settings
    extra: dict = field(default_factory=dict)
    state_: dict = field(default_factory=dict)


class SynthesisMethod(ABC):
    name: ClassVar[str]
    what: ClassVar[str]            # the ledger's description of a release
    display_name: ClassVar[str]    # how reports and figures name it
    #: needs private-pgm (mbi): a dependency since aim_dyadic became a default, missing from older installs
    needs_baselines: ClassVar[bool] = False

    def __init__(self, config: SynthesisConfig, device: str = "cpu", progress=None):
        self.config, self.device = config, device
        self.progress = progress or (lambda description: None)

    def needs_bounds(self) -> bool:
        """Whether it scales or bins columns by the spec's bounds (refused up front where the spec has none)."""
        return True

    def plan(self, job: dict, n: int) -> ReleasePlan | None:
        """The DP-SGD plan of a job's release on ``n`` patients, built once (None: not a DP-SGD release)."""
        return None

    @abstractmethod
    def entry(self, job: dict, plan: ReleasePlan | None, guarantee: str) -> LedgerEntry:
        """What the job enters in the ledger (reserved by the budget check, recorded when trained)."""

    @abstractmethod
    def fit(self, job: dict, data: SynthesisData, plan: ReleasePlan | None, noise: NoiseSource) -> Synthesized:
        """Fit on ``data.train`` by ``plan`` (the reserved one) with ``noise``, then sample the tables."""

    @staticmethod
    def budget(job: dict) -> Budget:
        return Budget(**job["budget"])
