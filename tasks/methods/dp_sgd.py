"""DP-SGD (Abadi et al. 2016) by Poisson sampling, per-sample clipping and Gaussian noise, sigma calibrated
to each cell's target epsilon by the PRV accountant (RDP and PLD alongside): the grid's DP method.

A release trains by its :class:`~privehr.models.release_plan.ReleasePlan` (the one the budget check
reserved) with noise from ``NoiseSource.for_release``, and enters the ledger as soon as it is trained.
"""

from __future__ import annotations

from typing import ClassVar

from privehr.core.config import Cell, PrivacyConfig, TrainingConfig
from privehr.models.dp_sgd import DPSGDHyperparameters, train_dp_sgd
from privehr.models.metrics import binary_metrics
from privehr.models.privacy_ledger import LedgerEntry
from privehr.models.randomness import NoiseSource
from privehr.models.release_plan import ReleasePlan
from privehr.models.training import predict_proba
from privehr.tasks.methods.base import ClassifierMethod, register_method

__all__ = ["DPSGD", "dp_sgd_plan"]


def dp_sgd_plan(n: int, hp: dict, cell: Cell, privacy: PrivacyConfig) -> ReleasePlan:
    """The release plan of a DP-SGD fit of ``hp`` on ``n`` stays at the cell's target epsilon."""
    return ReleasePlan.for_epochs(n, hp["batch_size"], hp["epochs"], target_epsilon=cell.target_epsilon,
                                  delta=privacy.delta, max_grad_norm=hp["max_grad_norm"])


@register_method
class DPSGD(ClassifierMethod):
    name: ClassVar[str] = "dp_sgd"

    def epsilons(self, training: TrainingConfig) -> list[float | None]:
        return list(training.dp_sgd.epsilons)

    def default_hyperparameters(self, cell: Cell, training: TrainingConfig) -> dict:
        c = training.dp_sgd
        hp = {"learning_rate": c.learning_rate, "weight_decay": c.weight_decay, "batch_size": c.batch_size,
              "epochs": c.epochs, "max_grad_norm": c.max_grad_norm}
        if cell.model == "grud":
            hp["hidden_size"] = training.grud.hidden_size
        return hp

    def guarantee(self, privacy: PrivacyConfig, training: TrainingConfig, what: str = "final fit") -> str:
        """DP unless its noise is reproducible or (a final fit) its hyperparameters were chosen by dev AUROC
        among several (a non-DP use of the dev patients)."""
        if privacy.reproducible_noise:
            return "reproducible"
        return "tuned" if what == "final fit" and training.search_budget > 1 else "dp"

    def planned_entry(self, cell, n, hyperparameters, privacy, training, what) -> LedgerEntry:
        plan = dp_sgd_plan(n, hyperparameters, cell, privacy)
        return plan.ledger_entry(self.guarantee(privacy, training, what), what)

    def reserves_search_trials(self, training: TrainingConfig) -> bool:
        return training.search_budget > 1

    def train(self, model, cell, hyperparameters, training, privacy, data, seed, reservation, what, dev_data,
              progress) -> tuple[object, dict]:
        inputs, y, *_ = data
        hp = hyperparameters
        if reservation is None:
            raise RuntimeError(f"{cell.cell_id} {what}: a DP-SGD release needs a reservation from the budget check")
        plan = dp_sgd_plan(len(y), hp, cell, privacy)
        noise = NoiseSource.for_release(privacy.reproducible_noise, cell.cell_id, what, seed)
        model, _ = train_dp_sgd(model, inputs, y, DPSGDHyperparameters(hp["learning_rate"], hp["weight_decay"]),
                                plan, noise, cell.loss, grad_sample_mode=training.dp_sgd.clipping, progress=progress)
        self.record(privacy, reservation, plan.ledger_entry(self.guarantee(privacy, training, what), what))
        info = {"epochs": hp["epochs"], **plan.record(), "noise_source": noise.kind}
        if dev_data:
            info["dev_auroc"] = binary_metrics(dev_data[1].cpu().numpy(), predict_proba(model, dev_data[0]))["auroc"]
        return model, info
