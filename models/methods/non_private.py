"""Non-private training: AdamW with early stopping on dev; the baseline every DP curve is judged against."""

from __future__ import annotations

from typing import ClassVar

from privehr.models.classifiers.training import TrainingHyperparameters, fit_binary_classifier
from privehr.models.methods.base import ClassifierMethod, register_method

__all__ = ["NonPrivate"]


@register_method
class NonPrivate(ClassifierMethod):
    name: ClassVar[str] = "non_private"
    display_name: ClassVar[str] = "non-private"
    fixed_without_search: ClassVar[bool] = False  # its search early-stops on dev and chooses the epoch count
    batch_norm: ClassVar[bool] = True
    baseline: ClassVar[bool] = True  # the curve every DP method's is judged against

    @classmethod
    def epsilon_label(cls, target_epsilon, accounted):
        return "-"  # no privacy parameter
    search_spaces: ClassVar[dict[str, dict]] = {
        "grud": {"learning_rate": ("log", 5e-4, 1e-2), "hidden_size": ("int", 16, 64),
                 "weight_decay": ("log", 1e-5, 1e-1), "batch_size": ("choice", [64, 128, 256])},
        "logistic_regression": {"learning_rate": ("log", 1e-4, 1e-2), "weight_decay": ("log", 1e-4, 1.0),
                                "batch_size": ("choice", [64, 128, 256])},
    }

    def default_hyperparameters(self, cell) -> dict:
        c = self.training.non_private
        hp = {"learning_rate": c.learning_rate, "weight_decay": c.weight_decay, "batch_size": c.batch_size,
              "epochs": c.max_epochs}
        if cell.model == "grud":
            hp["hidden_size"] = self.training.grud.hidden_size
        return hp

    def chosen(self, hyperparameters: dict, best_epochs: int | None) -> dict:
        out = dict(hyperparameters)
        if best_epochs is not None:
            out["epochs"] = max(1, int(best_epochs))
        return out

    def guarantee(self, what: str = "final fit") -> str:
        return "non_private"

    def train(self, model, spec, data, plan, noise) -> tuple[object, dict]:
        hp, c = spec.hyperparameters, self.training.non_private
        params = TrainingHyperparameters(learning_rate=hp["learning_rate"], weight_decay=hp["weight_decay"],
                                         batch_size=hp["batch_size"], max_epochs=hp["epochs"],
                                         patience=c.patience, seed=spec.seed, early_stopping=c.early_stopping)
        result = fit_binary_classifier(model, data.inputs, data.y, *(data.dev or (None, None)), params,
                                       spec.cell.loss, self.epochs_progress(spec))
        return model, {"epochs": result.best_epoch if data.dev else result.epochs_run,
                       "dev_auroc": result.best_dev_auroc}
