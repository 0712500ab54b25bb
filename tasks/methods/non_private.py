"""Non-private training: AdamW with early stopping on dev; the baseline every DP curve is judged against."""

from __future__ import annotations

from typing import ClassVar

from privehr.core.config import Cell, PrivacyConfig, TrainingConfig
from privehr.models.privacy_ledger import LedgerEntry
from privehr.models.training import TrainingHyperparameters, fit_binary_classifier
from privehr.tasks.methods.base import ClassifierMethod, register_method

__all__ = ["NonPrivate"]


@register_method
class NonPrivate(ClassifierMethod):
    name: ClassVar[str] = "non_private"
    fixed_without_search: ClassVar[bool] = False  # its search early-stops on dev and chooses the epoch count
    batch_norm: ClassVar[bool] = True

    def default_hyperparameters(self, cell: Cell, training: TrainingConfig) -> dict:
        c = training.non_private
        hp = {"learning_rate": c.learning_rate, "weight_decay": c.weight_decay, "batch_size": c.batch_size,
              "epochs": c.max_epochs}
        if cell.model == "grud":
            hp["hidden_size"] = training.grud.hidden_size
        return hp

    def chosen(self, hyperparameters: dict, best_epochs: int | None) -> dict:
        out = dict(hyperparameters)
        if best_epochs is not None:
            out["epochs"] = max(1, int(best_epochs))
        return out

    def guarantee(self, privacy: PrivacyConfig, training: TrainingConfig, what: str = "final fit") -> str:
        return "non_private"

    def planned_entry(self, cell, n, hyperparameters, privacy, training, what) -> LedgerEntry:
        return LedgerEntry("", "", "non_private", what=what)

    def train(self, model, cell, hyperparameters, training, privacy, data, seed, reservation, what, dev_data,
              progress) -> tuple[object, dict]:
        inputs, y, *_ = data
        hp = hyperparameters
        params = TrainingHyperparameters(learning_rate=hp["learning_rate"], weight_decay=hp["weight_decay"],
                                         batch_size=hp["batch_size"], max_epochs=hp["epochs"],
                                         patience=training.non_private.patience, seed=seed,
                                         early_stopping=training.non_private.early_stopping)
        result = fit_binary_classifier(model, inputs, y, *(dev_data or (None, None)), params, cell.loss, progress)
        self.record(privacy, reservation, self.planned_entry(cell, len(y), hp, privacy, training, what))
        return model, {"epochs": result.best_epoch if dev_data else result.epochs_run,
                       "dev_auroc": result.best_dev_auroc}
