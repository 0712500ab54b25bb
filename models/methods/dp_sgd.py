"""DP-SGD (Abadi et al. 2016) by Poisson sampling, per-sample clipping and Gaussian noise, sigma calibrated
to each cell's target epsilon by the PRV accountant (RDP and PLD alongside): the grid's DP method.

A release trains by the :class:`~privehr.models.privacy.release_plan.ReleasePlan` that the budget check built
and reserved (``plan``), with the noise the task hands it (``NoiseSource.for_release``). A group of releases of one
cell family (its epsilons x seeds) can train as one batched model (:meth:`DPSGD.fit_many`,
:mod:`privehr.models.dpsgd.batched`): each keeps its own plan, sample, clipping and noise.
"""

from __future__ import annotations

from typing import ClassVar

from privehr.models.classifiers.stacking import same_architecture
from privehr.models.dpsgd.batched import train_dp_sgd_batched
from privehr.models.dpsgd.trainer import DPSGDHyperparameters, train_dp_sgd
from privehr.models.methods.base import ClassifierMethod, register_method
from privehr.models.privacy.release_plan import ReleasePlan

__all__ = ["DPSGD"]


@register_method
class DPSGD(ClassifierMethod):
    name: ClassVar[str] = "dp_sgd"
    display_name: ClassVar[str] = "DP-SGD"
    # batch size and epochs set the plan: they are not searched, so every plan is known before the search
    search_spaces: ClassVar[dict[str, dict]] = {
        "grud": {"learning_rate": ("log", 1e-3, 5e-2), "hidden_size": ("int", 8, 48),
                 "max_grad_norm": ("log", 0.1, 5.0)},
        "logistic_regression": {"learning_rate": ("log", 1e-3, 5e-2), "max_grad_norm": ("log", 0.1, 5.0)},
    }

    def epsilons(self) -> list[float | None]:
        return list(self.training.dp_sgd.epsilons)

    def default_hyperparameters(self, cell) -> dict:
        c = self.training.dp_sgd
        hp = {"learning_rate": c.learning_rate, "weight_decay": c.weight_decay, "batch_size": c.batch_size,
              "epochs": c.epochs, "max_grad_norm": c.max_grad_norm}
        if cell.model == "grud":
            hp["hidden_size"] = self.training.grud.hidden_size
        return hp

    def guarantee(self, what: str = "final fit") -> str:
        """DP unless its noise is reproducible or (a final fit) its hyperparameters were chosen by exact dev AUROC
        among several (``training.tuning: exact``, a non-DP use of the dev patients). Chosen by DP dev scores
        (``tuning: dp``), the final fit is DP: the trials, their noisy scores and the fit compose in the ledger."""
        if self.privacy.reproducible_noise:
            return "reproducible"
        return "tuned" if what == "final fit" and self.training.search_budget > 1 \
            and self.training.tuning == "exact" else "dp"

    def reserves_search_trials(self) -> bool:
        return self.training.search_budget > 1

    def scores_search_privately(self) -> bool:
        return self.training.search_budget > 1 and self.training.tuning == "dp"

    def plan(self, spec, n) -> ReleasePlan:
        """``epochs`` passes over ``n`` records at the cell's target epsilon."""
        hp = spec.hyperparameters
        return ReleasePlan.for_epochs(n, hp["batch_size"], hp["epochs"], target_epsilon=spec.cell.target_epsilon,
                                      delta=self.privacy.delta, max_grad_norm=hp["max_grad_norm"])

    def entry(self, spec, plan):
        return plan.ledger_entry(self.guarantee(spec.what), spec.what)

    batches: ClassVar[bool] = True

    @classmethod
    def batches_cell(cls, cell, training, device_type):
        """On CPU, ``auto`` batches only with ghost clipping, the engine measured there (bench/README.md): Opacus's
        hooks and torch.func train one fit at a time (``on`` batches them by ghost clipping or torch.func)."""
        return cls.batches and not (device_type == "cpu" and training.batched == "auto"
                                    and training.dp_sgd.clipping != "ghost")

    def fit_many(self, specs, data, plans, noises):
        """The releases of one cell family trained as batched models, one stack per architecture (GRU-D's hidden
        size may differ between cells after a search); each by its reserved plan, clipped at its chosen C."""
        families = {(s.cell.label, s.cell.model, s.cell.loss) for s in specs}
        if len(families) != 1 or any(p is None for p in plans):
            raise ValueError(f"a batched DP-SGD group is one label, model and loss, each release with its reserved "
                             f"plan; got {sorted(families)}")
        releases = [None] * len(specs)
        models = [self.build(spec, data) for spec in specs]
        stacks: list[list[int]] = []
        for i, model in enumerate(models):  # members of one architecture train together
            stack = next((s for s in stacks if same_architecture([models[s[0]], model])), None)
            stack.append(i) if stack is not None else stacks.append([i])
        for stack in stacks:
            clipped = [plans[i].clipped_at(specs[i].hyperparameters["max_grad_norm"]) for i in stack]
            hps = [DPSGDHyperparameters(specs[i].hyperparameters["learning_rate"],
                                        specs[i].hyperparameters["weight_decay"]) for i in stack]
            first = specs[stack[0]]
            progress = self.progress(f"{first.cell.label}/{first.cell.model}/dp_sgd/{first.cell.loss}: "
                                     f"{len(stack)} fits batched, epochs")
            fits = train_dp_sgd_batched([models[i] for i in stack], data.inputs, data.y, hps, clipped,
                                        [noises[i] for i in stack], first.cell.loss, progress,
                                        "functorch" if self.training.dp_sgd.clipping == "functorch" else "auto")
            for i, plan, (model, _) in zip(stack, clipped, fits):
                info = {"epochs": specs[i].hyperparameters["epochs"], **plan.record(), "noise_source": noises[i].kind,
                        "batch_members": len(stack)}
                releases[i] = self.release(specs[i], data, plans[i], model, info)
        return releases

    def train(self, model, spec, data, plan, noise) -> tuple[object, dict]:
        if plan is None:
            raise ValueError(f"{spec.cell.cell_id} {spec.what}: a DP-SGD release needs the plan the budget check "
                             "reserved")
        hp = spec.hyperparameters
        plan = plan.clipped_at(hp["max_grad_norm"])  # the search may choose C; sigma, q and T are the reserved ones
        model, _ = train_dp_sgd(model, data.inputs, data.y, DPSGDHyperparameters(hp["learning_rate"],
                                                                                 hp["weight_decay"]),
                                plan, noise, spec.cell.loss, grad_sample_mode=self.training.dp_sgd.clipping,
                                progress=self.epochs_progress(spec))
        return model, {"epochs": hp["epochs"], **plan.record(), "noise_source": noise.kind}
