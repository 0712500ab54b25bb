"""The training-method interface and its registry: one class per way of training a grid cell.

A :class:`TrainingMethod` is configured by its settings (``training``, ``privacy``) and says everything the
grid, the budget check, the search and the final fit need to know about one method: the epsilons, losses,
models and seeds of its cells, its default hyperparameters and search space (by model), and, for one release
(a :class:`FitSpec`: cell, hyperparameters, seed, what), its plan and ledger entry before any training, its fit
and its evaluation. The method is pure: it touches no file, no ledger and no Prefect. The training task
builds the plan once (``plan``) at the budget check, reserves it, hands that same plan object to ``fit``,
records the release's entry in the ledger and saves what it returns.

Adding a method is one new module in this package that subclasses :class:`TrainingMethod` and decorates it
with :func:`register_method` (the package imports every module in it), and its test: the configuration takes any
method name, and the registry refuses one it does not hold in one line (docs/architecture.md's recipe is run by
``tests/models/methods/test_training_methods.py``). The pattern is Opacus's accountant registry
(``create_accountant``).

>>> from privehr.core.config import Cell, PrivacyConfig, TrainingConfig
>>> method = create_method("dp_sgd", TrainingConfig(), PrivacyConfig())
>>> cell = Cell(label="mort_icu", model="logistic_regression", method="dp_sgd", loss="bce", target_epsilon=1.0)
>>> spec = FitSpec(cell, method.default_hyperparameters(cell))
>>> plan = method.plan(spec, 2000)
>>> plan.epsilon <= 1.0, method.entry(spec, plan).mechanism
(True, 'dp_sgd')
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from privehr.core.config import Cell, PrivacyConfig, TrainingConfig
from privehr.core.registry import Registry
from privehr.models.classifiers import build_classifier
from privehr.models.classifiers.training import predict_logits, predict_proba
from privehr.models.evaluation.metrics import binary_metrics
from privehr.models.privacy.ledger import LedgerEntry
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import ReleasePlan

__all__ = ["TrainingMethod", "ClassifierMethod", "FitSpec", "CellData", "Release", "Evaluation", "register_method",
           "method_display_name", "is_baseline", "epsilon_label",
           "get_method", "create_method", "TRAINING_METHODS", "grid", "seeds_of", "fit_groups", "Progress"]

TRAINING_METHODS: Registry["TrainingMethod"] = Registry("training method", requires=("display_name",))
register_method = TRAINING_METHODS.register
get_method = TRAINING_METHODS.__getitem__
create_method = TRAINING_METHODS.create


def method_display_name(name: str, figure: bool = False) -> str:
    """A method's name for people (its class's ``display_name``, or ``figure_label`` in a figure); an unknown name
    (a results file of a method no longer registered) as it is."""
    try:
        method = TRAINING_METHODS[name]
    except (KeyError, ValueError):
        return name
    return (method.figure_label or method.display_name) if figure else method.display_name


def is_baseline(name: str) -> bool:
    """Whether the cells of method ``name`` are the baseline the DP curves are judged against (its ``baseline``);
    an unknown name is not."""
    return name in TRAINING_METHODS and TRAINING_METHODS[name].baseline


def epsilon_label(name: str, target_epsilon: float | None, accounted: float | None) -> str | float | None:
    """What a results table shows as a row's epsilon (its method's :meth:`TrainingMethod.epsilon_label`); an
    unknown method's row its accounted epsilon."""
    return TRAINING_METHODS[name].epsilon_label(target_epsilon, accounted) if name in TRAINING_METHODS else accounted

#: a progress reporter's factory: description -> progress(done, total) callback (or None)
Progress = Callable[[str], Callable[[int, int], None] | None]


@dataclass(frozen=True)
class FitSpec:
    """One release of a grid cell: the cell, its hyperparameters, the fit's public seed and what it is."""

    cell: Cell
    hyperparameters: dict
    seed: int = 0
    what: str = "final fit"  # or "search trial <k>"


@dataclass(frozen=True)
class CellData:
    """A cell's training records: the classifier's inputs, labels and shape; for a search trial, the dev records
    it early-stops on or is scored on."""

    inputs: tuple
    y: torch.Tensor
    n_variables: int
    n_hours: int
    dev: tuple | None = None  # (inputs, y)

    def __len__(self) -> int:
        return len(self.y)


@dataclass
class Release:
    """A fitted release: its ledger entry, and what it learned (``*_``) and what is saved of it.

    ``state_`` is what the task saves as the model file; ``info_`` what the result row says about the fit
    (epochs, the plan's record, where the noise came from); ``model_`` the trained module, where there is one.
    """

    entry: LedgerEntry
    state_: dict
    info_: dict = field(default_factory=dict)
    model_: object | None = None
    extra_: dict = field(default_factory=dict)  # method-specific learned state (ExpM+NF's draws)
    ledger_id: str | None = None  # its id in the privacy ledger, once the task has recorded it


@dataclass
class Evaluation:
    """A release scored on held-out records: aggregate metrics, the released model's probabilities per record
    (patient-level: the task keeps them under ``intermediate/``) and, for ExpM+NF, each draw's scores."""

    metrics: dict
    probabilities: np.ndarray
    draws: dict | None = None


class TrainingMethod(ABC):
    """How one method trains a cell: grid, hyperparameters, plans, fits and evaluation; configured by its settings."""

    name: ClassVar[str]
    #: how tables, the console and the report name it
    display_name: ClassVar[str]
    #: how figure legends name it, where a legend needs more than the name (a guarantee it lacks); default the name
    figure_label: ClassVar[str | None] = None
    #: with a single configuration there is nothing to choose, so no search run is trained (a fixed,
    #: accounted number of epochs or steps); a method whose search early-stops on dev still trains it
    fixed_without_search: ClassVar[bool] = True
    #: its cells are the baseline every DP curve of the same label and model is judged against (the report's checks)
    baseline: ClassVar[bool] = False
    #: model -> parameter -> ("log", low, high) | ("int", low, high) | ("choice", [values]); a DP method's space
    #: holds only what leaves its privacy plan unchanged (see models.classifiers.hyperparameter_search)
    search_spaces: ClassVar[dict[str, dict]] = {}

    def __init__(self, training: TrainingConfig, privacy: PrivacyConfig | None = None,
                 progress: Progress | None = None):
        self.training, self.privacy = training, privacy or PrivacyConfig()
        self.progress = progress or (lambda description: None)

    @classmethod
    def epsilon_label(cls, target_epsilon: float | None, accounted: float | None) -> str | float | None:
        """What a results table shows as a row's epsilon: the accounted (PRV) epsilon of its release; a method
        without one, or whose epsilon means something else, says so."""
        return accounted

    # --- the grid -------------------------------------------------------------------------------------------
    def epsilons(self) -> list[float | None]:
        """The target epsilons of its cells (None: no privacy parameter)."""
        return [None]

    def losses(self) -> list[str]:
        return list(self.training.losses)

    def trains(self, model: str) -> bool:
        """Whether the grid has cells of this method for ``model``."""
        return True

    def seeds(self) -> int:
        """Final fits per cell."""
        return self.training.seeds

    # --- hyperparameters ------------------------------------------------------------------------------------
    @abstractmethod
    def default_hyperparameters(self, cell: Cell) -> dict:
        """The configuration a search starts from (and the only one with ``search_budget: 1``)."""

    def search_space(self, cell: Cell) -> dict:
        """Ranges the random search draws from (``models.classifiers.hyperparameter_search``'s format)."""
        return self.search_spaces[cell.model]

    def chosen(self, hyperparameters: dict, best_epochs: int | None) -> dict:
        """The final fit's hyperparameters given the search's best trial (and its best epoch, if any)."""
        return dict(hyperparameters)

    # --- releases -------------------------------------------------------------------------------------------
    @abstractmethod
    def guarantee(self, what: str = "final fit") -> str:
        """The ledger guarantee (``models.privacy.ledger.GUARANTEES``) of a release of this method."""

    def reserves_search_trials(self) -> bool:
        """Whether each search trial is a release of its own (reserved and recorded like a final fit)."""
        return False

    def scores_search_privately(self) -> bool:
        """Whether its search scores each trial on dev by a DP mechanism (one Gaussian release per trial, reserved
        and recorded like the trial), so that the chosen configuration's final fit stays DP; else the search
        chooses by the exact dev AUROC."""
        return False

    def plan(self, spec: FitSpec, n: int) -> ReleasePlan | None:
        """The release's plan on ``n`` records (sigma, q, T and their epsilons), built once, before any training;
        None for a release without a DP mechanism."""
        return None

    def entry(self, spec: FitSpec, plan: ReleasePlan | None) -> LedgerEntry:
        """What the release enters in the ledger (reserved at the budget check, recorded when trained)."""
        return LedgerEntry("", "", "non_private", what=spec.what)

    # --- training and evaluation ----------------------------------------------------------------------------
    @abstractmethod
    def fit(self, spec: FitSpec, data: CellData, plan: ReleasePlan | None, noise: NoiseSource) -> Release:
        """Train on ``data`` by ``plan`` (the reserved one) with ``noise``; return the release (nothing saved)."""

    @abstractmethod
    def evaluate(self, release: Release, inputs: tuple, y: torch.Tensor) -> Evaluation:
        """Score the release on held-out records (dev for a trial, test for a final fit)."""

    def logits(self, release: Release, inputs: tuple) -> np.ndarray:
        """What the release predicts for each record of ``inputs``, as logits: its trained module's output (the
        membership audit attacks these; a method whose release is no single module says what it releases)."""
        if release.model_ is None:
            raise NotImplementedError(f"{self.name}: a release without a trained module says what its logits are")
        return predict_logits(release.model_, inputs).cpu().numpy()

    #: whether :meth:`fit_many` trains a group of releases as one batched model (else one by one)
    batches: ClassVar[bool] = False

    @classmethod
    def batches_cell(cls, cell: Cell, training: TrainingConfig, device_type: str) -> bool:
        """Whether a cell family's fits of this cell train as one group where ``training.batched`` allows it, on a
        device of ``device_type`` ("cpu", "cuda"): :attr:`batches`, unless a method knows better."""
        return cls.batches

    def fit_many(self, specs: list[FitSpec], data: CellData, plans: list[ReleasePlan | None],
                 noises: list[NoiseSource]) -> list[Release]:
        """Train several releases of one cell family (one label, model and loss) on the same records, each by its
        reserved plan with its own noise; by default one by one. A method with :attr:`batches` trains them as one
        batched model: how they are computed, never what each release is."""
        return [self.fit(spec, data, plan, noise) for spec, plan, noise in zip(specs, plans, noises)]


class ClassifierMethod(TrainingMethod):
    """A method that trains the classifier's weights directly (non-private, DP-SGD): one model per fit."""

    #: batch norm mixes samples: only a non-private method may use it
    batch_norm: ClassVar[bool] = False

    def build(self, spec: FitSpec, data: CellData):
        return build_classifier(spec.cell.model, data.n_variables, data.n_hours, seed=spec.seed,
                                hidden_size=spec.hyperparameters.get("hidden_size", 32),
                                batch_norm=self.training.grud.batch_norm and self.batch_norm).to(data.y.device)

    def fit(self, spec, data, plan, noise) -> Release:
        model, info = self.train(self.build(spec, data), spec, data, plan, noise)
        return self.release(spec, data, plan, model, info)

    def release(self, spec: FitSpec, data: CellData, plan: ReleasePlan | None, model, info: dict) -> Release:
        """The release of a trained ``model``: its entry, its saved state and (a search trial) its dev AUROC."""
        if data.dev is not None and "dev_auroc" not in info:
            info["dev_auroc"] = self.evaluate_model(model, *data.dev)["auroc"]
        state = {"cell": spec.cell.model_dump(), "seed": spec.seed, "hyperparameters": spec.hyperparameters,
                 "state_dict": {k: v.cpu() for k, v in model.state_dict().items()}, "training": info}
        return Release(self.entry(spec, plan), state, info, model)

    @staticmethod
    def evaluate_model(model, inputs, y) -> dict:
        return binary_metrics(y.cpu().numpy(), predict_proba(model, inputs))

    @abstractmethod
    def train(self, model, spec: FitSpec, data: CellData, plan: ReleasePlan | None,
              noise: NoiseSource) -> tuple[object, dict]:
        """Train ``model``; return the trained module and its info (epochs, plan record, dev AUROC)."""

    def epochs_progress(self, spec: FitSpec):
        """The progress callback of a fit's epochs (None outside a Prefect run)."""
        return self.progress(f"{spec.cell.cell_id} seed {spec.seed}: {spec.what} epochs")

    def evaluate(self, release, inputs, y) -> Evaluation:
        probabilities = predict_proba(release.model_, inputs)
        return Evaluation(binary_metrics(y.cpu().numpy(), probabilities), probabilities)


def grid(training: TrainingConfig, labels: list[str]) -> list[Cell]:
    """The training grid: label x model x method x loss x epsilon, as each method declares its cells."""
    out = []
    for label in labels:
        for model in training.models:
            for name in training.methods:
                method = create_method(name, training)
                if not method.trains(model):
                    continue
                out += [Cell(label=label, model=model, method=name, loss=loss, target_epsilon=e)
                        for loss in method.losses() for e in method.epsilons()]
    return out


def seeds_of(cell: Cell, training: TrainingConfig) -> int:
    """Final fits of ``cell``."""
    return create_method(cell.method, training).seeds()


def fit_groups(cells: list[Cell], training: TrainingConfig, batched: bool, size: int | None = None,
               device_type: str = "cpu") -> list[list[tuple[int, int]]]:
    """The grid's final fits, (cell index, seed), in groups that train together: with ``batched``, the fits of one
    cell family (label, model, method, loss: its epsilons x seeds) of a method that batches it on ``device_type``
    (:meth:`TrainingMethod.batches_cell`), in chunks of at most
    ``size`` (default ``training.group_size``; 0: no limit); every other fit alone. Every fit is in exactly one
    group."""
    groups: dict[tuple, list[tuple[int, int]]] = {}
    alone = []
    for i, cell in enumerate(cells):
        fits = [(i, seed) for seed in range(seeds_of(cell, training))]
        if batched and get_method(cell.method).batches_cell(cell, training, device_type):
            groups.setdefault((cell.label, cell.model, cell.method, cell.loss), []).extend(fits)
        else:
            alone += [[fit] for fit in fits]
    size = (training.group_size if size is None else size) or max((len(g) for g in groups.values()), default=1)
    return [g[lo:lo + size] for g in groups.values() for lo in range(0, len(g), size)] + alone
