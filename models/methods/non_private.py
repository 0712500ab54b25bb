"""Non-private training: AdamW with early stopping on dev; the baseline every DP curve is judged against."""

from __future__ import annotations

from typing import ClassVar

from privehr.models.classifiers.batched_training import fit_binary_classifiers_batched, fits_together
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

    def _hyperparameters(self, spec) -> TrainingHyperparameters:
        hp, c = spec.hyperparameters, self.training.non_private
        return TrainingHyperparameters(learning_rate=hp["learning_rate"], weight_decay=hp["weight_decay"],
                                       batch_size=hp["batch_size"], max_epochs=hp["epochs"], patience=c.patience,
                                       seed=spec.seed, early_stopping=c.early_stopping)

    batches: ClassVar[bool] = True

    @classmethod
    def batches_cell(cls, cell, training, device_type):
        """A cell's final fits (its seeds: one configuration, a fixed epoch count, no dev split) train together,
        unless GRU-D has batch norm, which would mix the members' rows. On CPU under ``auto`` only GRU-D's: stacked
        logistic regressions ran at 0.3-0.55x one at a time there (bench/grid_batch.py: memory-bound gathers)."""
        if cell.model == "grud" and training.grud.batch_norm:
            return False
        return cls.batches and not (device_type == "cpu" and training.batched == "auto"
                                    and cell.model == "logistic_regression")

    def fit_many(self, specs, data, plans, noises):
        """The fits of one cell trained as one stacked model (:func:`fit_binary_classifiers_batched`), each its own
        seed's shuffles and AdamW state; one at a time where they cannot (a dev split to early-stop on, batch norm,
        different batch sizes or epoch counts)."""
        models, hps = [self.build(spec, data) for spec in specs], [self._hyperparameters(spec) for spec in specs]
        if data.dev is not None or not fits_together(models, hps):
            return super().fit_many(specs, data, plans, noises)
        first = specs[0].cell
        results = fit_binary_classifiers_batched(models, data.inputs, data.y, hps, first.loss, self.progress(
            f"{first.cell_id}: {len(specs)} fits batched, epochs"))
        return [self.release(spec, data, plan, model, {"epochs": result.epochs_run,
                                                       "dev_auroc": result.best_dev_auroc,
                                                       "batch_members": len(specs)})
                for spec, plan, model, result in zip(specs, plans, models, results)]

    def train(self, model, spec, data, plan, noise) -> tuple[object, dict]:
        result = fit_binary_classifier(model, data.inputs, data.y, *(data.dev or (None, None)),
                                       self._hyperparameters(spec), spec.cell.loss, self.epochs_progress(spec))
        return model, {"epochs": result.best_epoch if data.dev else result.epochs_run,
                       "dev_auroc": result.best_dev_auroc}
