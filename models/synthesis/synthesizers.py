"""The synthesizer interface and its registry: one class per way of making synthetic tables from a table's
training patients (``synthesis.synthesizers``: maf, hflow, aim, mst, aim_dyadic).

A :class:`SynthesisMethod` is configured by the synthesis settings and says what the budget check and the
``synthesize`` task need: the plan of a job's release and its ledger entry, known before anything is trained;
whether it needs the spec's bounds or the optional baselines library; and how it fits and samples
(``fit(job, data, plan, noise) -> Synthesized``). It is pure: the task reserves the plan, hands that same plan
to ``fit``, records the entry, and saves the state and the tables alike for every synthesizer, never branching
on the name. The class also says which budget kinds it makes a release for (``budget_kinds``: :func:`synthesis_jobs`
builds the grid from them) and where reports list it (``report_rank``). Adding one is a module in this package (the
package imports every module in it) and its test: docs/architecture.md's recipe, which a test runs as written.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import pandas as pd

from privehr.core.config import Budget, SynthesisConfig, default_synthesizers
from privehr.core.registry import Registry
from privehr.models.privacy.ledger import LedgerEntry
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import ReleasePlan

__all__ = ["SynthesisMethod", "SynthesisData", "Synthesized", "SYNTHESIZERS", "register_synthesizer",
           "get_synthesizer", "create_synthesizer", "synthesizer_display_name", "synthesizer_rank",
           "choose_synthesizers", "synthesis_jobs"]

SYNTHESIZERS: Registry["SynthesisMethod"] = Registry("synthesizer", requires=("display_name", "report_rank"))
register_synthesizer = SYNTHESIZERS.register
get_synthesizer = SYNTHESIZERS.__getitem__
create_synthesizer = SYNTHESIZERS.create


def synthesizer_display_name(name: str) -> str:
    """A synthesizer's name for people (its class's ``display_name``); an unknown name as it is."""
    try:
        return SYNTHESIZERS[name].display_name
    except (KeyError, ValueError):
        return name


def synthesizer_rank(name: str) -> int:
    """Where reports list a synthesizer (its class's ``report_rank``); an unknown name first."""
    return SYNTHESIZERS[name].report_rank if name in SYNTHESIZERS else 0


def choose_synthesizers(config: SynthesisConfig, spec) -> SynthesisConfig:
    """``config`` with ``synthesizers`` chosen for ``spec`` where they were left to the default
    (:func:`~privehr.core.config.default_synthesizers`); where none of those takes any of the run's budget kinds
    (aim_dyadic takes epsilon budgets only, a run may set mus alone), the MAF, which takes every kind."""
    if config.synthesizers is not None:
        return config
    chosen = default_synthesizers(spec)
    kinds = {budget.kind for budget in config.budgets()}
    if not any(kinds & SYNTHESIZERS[name].budget_kinds for name in chosen):
        chosen = ["maf"]
    return config.model_copy(update={"synthesizers": chosen})


def synthesis_jobs(config: SynthesisConfig) -> list[dict]:
    """(synthesizer, imputation, budget, run), one release each, for every budget of a kind the synthesizer takes
    (its class's ``budget_kinds``: the marginal ones have no non-private form and no mu-GDP calibration). With
    missing: in_release a synthesizer trains on the table as delivered, not on an imputation: imputation 0 only (its
    index names the real imputation the tables are evaluated against)."""
    if config.synthesizers is None:
        raise RuntimeError("synthesizers are chosen for the table's spec first (choose_synthesizers)")
    imputations = range(config.mice.m if config.missing == "mice_first" else 1)
    return [{"synthesizer": name, "imputation": i, "budget": b.model_dump(), "run": r,
             "job_id": f"{SYNTHESIZERS[name].job_prefix()}imp{i}-{b.label}-run{r}"}
            for name in config.synthesizers for i in imputations for b in config.budgets() for r in range(config.runs)
            if b.kind in SYNTHESIZERS[name].budget_kinds]


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
    #: the budget kinds (``Budget.kind``) it makes a release for; the grid's others make none of its
    budget_kinds: ClassVar[frozenset[str]] = frozenset({"mu", "epsilon", "non_private"})
    #: where reports list it: before every synthesizer of a higher rank (each sets its own)
    report_rank: ClassVar[int]

    @classmethod
    def job_prefix(cls) -> str:
        """What its job ids start with: its name and a dash."""
        return f"{cls.name}-"

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
