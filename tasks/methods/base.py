"""The training-method interface and its registry: one class per way of training a grid cell.

A :class:`TrainingMethod` says everything the grid, the budget check, the search and the final fit
need to know about one method: its settings in :class:`~privehr.core.config.TrainingConfig`, the
epsilons, losses, models and seeds of its cells, its default hyperparameters and search space, the
ledger entry of each release it makes (planned before any training), and how it trains and is
evaluated. The flow and the tasks look a method up by the cell's ``method`` name and never branch on it.

Adding a method is one new module in this package that subclasses :class:`TrainingMethod` and calls
:func:`register_method`, its name in ``privehr.core.config.Method`` (the bottom layer cannot import
this registry, so the names are declared there; ``tests/tasks/test_training_methods.py`` fails when the
two disagree), and its test. The pattern is Opacus's accountant registry.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar, get_args

import torch

from privehr.core.config import Cell, Method, PrivacyConfig, TrainingConfig
from privehr.core.registry import Registry
from privehr.io.privacy_ledger import record_release
from privehr.models.classifiers import build_classifier, get_classifier
from privehr.models.metrics import binary_metrics
from privehr.models.privacy_ledger import LedgerEntry
from privehr.models.training import predict_proba
from privehr.tasks.evaluation import save_predictions
from privehr.tasks.progress import progress_artifact

__all__ = ["TrainingMethod", "ClassifierMethod", "register_method", "get_method", "TRAINING_METHODS", "grid",
           "seeds_of"]

TRAINING_METHODS: Registry["TrainingMethod"] = Registry("training method", declared=get_args(Method))
register_method = TRAINING_METHODS.register
get_method = TRAINING_METHODS.__getitem__


class TrainingMethod(ABC):
    """How one method trains a cell: grid, hyperparameters, releases and fits."""

    name: ClassVar[str]
    #: with a single configuration there is nothing to choose, so no search run is trained (a fixed,
    #: accounted number of epochs or steps); a method whose search early-stops on dev still trains it
    fixed_without_search: ClassVar[bool] = True

    # --- the grid -------------------------------------------------------------------------------------------
    def epsilons(self, training: TrainingConfig) -> list[float | None]:
        """The target epsilons of its cells (None: no privacy parameter)."""
        return [None]

    def losses(self, training: TrainingConfig) -> list[str]:
        return list(training.losses)

    def trains(self, model: str, training: TrainingConfig) -> bool:
        """Whether the grid has cells of this method for ``model``."""
        return True

    def seeds(self, training: TrainingConfig) -> int:
        """Final fits per cell."""
        return training.seeds

    # --- hyperparameters ------------------------------------------------------------------------------------
    @abstractmethod
    def default_hyperparameters(self, cell: Cell, training: TrainingConfig) -> dict:
        """The configuration a search starts from (and the only one with ``search_budget: 1``)."""

    def search_space(self, cell: Cell) -> dict:
        """Ranges the random search draws from (``models.hyperparameter_search``'s format)."""
        return get_classifier(cell.model).search_spaces[self.name]

    def chosen(self, hyperparameters: dict, best_epochs: int | None) -> dict:
        """The final fit's hyperparameters given the search's best trial (and its best epoch, if any)."""
        return dict(hyperparameters)

    # --- releases -------------------------------------------------------------------------------------------
    @abstractmethod
    def guarantee(self, privacy: PrivacyConfig, training: TrainingConfig, what: str = "final fit") -> str:
        """The ledger guarantee (``models.privacy_ledger.GUARANTEES``) of a release of this method."""

    @abstractmethod
    def planned_entry(self, cell: Cell, n: int, hyperparameters: dict, privacy: PrivacyConfig,
                      training: TrainingConfig, what: str) -> LedgerEntry:
        """The ledger entry of one release on ``n`` records, known before it is trained (the budget check)."""

    def reserves_search_trials(self, training: TrainingConfig) -> bool:
        """Whether each search trial is a release of its own (reserved and recorded like a final fit)."""
        return False

    def record(self, privacy: PrivacyConfig, reservation: str | None, entry: LedgerEntry) -> None:
        """Enter a trained release in the ledger under its reservation (before it is saved anywhere)."""
        if reservation is not None:
            record_release(privacy.ledger_path, reservation, entry)

    # --- training -------------------------------------------------------------------------------------------
    @abstractmethod
    def search_trial(self, cell: Cell, hyperparameters: dict, training: TrainingConfig, privacy: PrivacyConfig,
                     data, dev_data, seed: int, reservation: str | None, what: str) -> dict:
        """Train on ``data`` and score on ``dev_data``: ``{"dev_auroc", "epochs"}``."""

    @abstractmethod
    def final_fit(self, cell: Cell, hyperparameters: dict, training: TrainingConfig, privacy: PrivacyConfig,
                  data, test_data, seed: int, reservation: str | None, run_dir: str, model_path: Path
                  ) -> tuple[dict, dict]:
        """Train on ``data``, evaluate on ``test_data``, save the model to ``model_path``: (metrics, info)."""


class ClassifierMethod(TrainingMethod):
    """A method that trains the classifier's weights directly (non-private, DP-SGD): one model per fit."""

    #: batch norm mixes samples: only a non-private method may use it
    batch_norm: ClassVar[bool] = False

    def build(self, cell: Cell, hyperparameters: dict, training: TrainingConfig, data, seed: int):
        _, y, n_vars, n_hours = data
        return build_classifier(cell.model, n_vars, n_hours, seed=seed,
                                hidden_size=hyperparameters.get("hidden_size", 32),
                                batch_norm=training.grud.batch_norm and self.batch_norm).to(y.device)

    @abstractmethod
    def train(self, model, cell: Cell, hyperparameters: dict, training: TrainingConfig, privacy: PrivacyConfig,
              data, seed: int, reservation: str | None, what: str, dev_data, progress) -> tuple[object, dict]:
        """Train ``model``, enter it in the ledger; return the trained module and its info (epochs, plan record,
        dev AUROC)."""

    def fit(self, cell, hyperparameters, training, privacy, data, seed, reservation, what, dev_data=None):
        model = self.build(cell, hyperparameters, training, data, seed)
        progress = progress_artifact(f"{cell.cell_id} seed {seed}: {what} epochs")
        return self.train(model, cell, hyperparameters, training, privacy, data, seed, reservation, what, dev_data,
                          progress)

    def search_trial(self, cell, hyperparameters, training, privacy, data, dev_data, seed, reservation, what):
        _, info = self.fit(cell, hyperparameters, training, privacy, data, seed, reservation, what, dev_data)
        return info

    def final_fit(self, cell, hyperparameters, training, privacy, data, test_data, seed, reservation, run_dir,
                  model_path):
        model, info = self.fit(cell, hyperparameters, training, privacy, data, seed, reservation, "final fit")
        test_inputs, test_y = test_data
        probabilities = predict_proba(model, test_inputs)
        metrics = binary_metrics(test_y.cpu().numpy(), probabilities)
        save_predictions(run_dir, cell, seed, probabilities)  # patient-level: intermediate/, for the report
        torch.save({"cell": cell.model_dump(), "seed": seed, "hyperparameters": hyperparameters,
                    "state_dict": {k: v.cpu() for k, v in model.state_dict().items()}, "training": info}, model_path)
        return metrics, info


def grid(training: TrainingConfig, labels: list[str]) -> list[Cell]:
    """The training grid: label x model x method x loss x epsilon, as each method declares its cells."""
    out = []
    for label in labels:
        for model in training.models:
            for name in training.methods:
                method = get_method(name)
                if not method.trains(model, training):
                    continue
                out += [Cell(label=label, model=model, method=name, loss=loss, target_epsilon=e)
                        for loss in method.losses(training) for e in method.epsilons(training)]
    return out


def seeds_of(cell: Cell, training: TrainingConfig) -> int:
    """Final fits of ``cell``."""
    return get_method(cell.method).seeds(training)
