"""DP-trained ExpM flows in the training grid: ExpM+NF's target and objective, trained by DP-SGD over records
(:mod:`privehr.models.expm.dp_trained`), so each release is DP by its plan like a DP-SGD fit.

References:
    Bridges, Tombs, Stanley (2023). Are Normalizing Flows the Key to Unlocking the Exponential Mechanism?
    arXiv:2311.09200.
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787, Algorithm 2.

Its cells sit at DP-SGD's target epsilons (``training.dp_expm_nf.epsilons``); the plan, the ledger entry (the
subsampled Gaussian mechanism on clipped per-record gradients: mechanism ``dp_sgd``), the guarantee and the DP search
are DP-SGD's. The ExpM temperature eps~ (``temperature``) shapes the target density only. The released model is the
flow (a diagonal Gaussian over the classifier's parameters); the classifier saved, bundled and evaluated is its mean,
and the row adds the posterior-predictive AUROC of ``eval_samples`` draws, their quartiles and the fit gap to the
tempered target. The gap evaluates u on every training record, so it is an exact statistic of them (as every number of
the internal report is); no loss of the private batches is written anywhere (DP-SGD's rule).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from privehr.models.evaluation.metrics import binary_metrics
from privehr.models.expm.batched_utility import BatchedUtility
from privehr.models.expm.dp_trained import (DPExpMHyperparameters, batches_together, flow_mean, train_dp_expm,
                                            train_dp_expm_many)
from privehr.models.expm.mechanism import (draw_probabilities, draw_utilities, fit_gap, posterior_predictive,
                                         sample_parameters)
from privehr.models.methods.base import Evaluation, Release, register_method
from privehr.models.methods.dp_sgd import DPSGD
from privehr.models.privacy.randomness import public_seed

__all__ = ["DPExpMNF"]


@register_method
class DPExpMNF(DPSGD):
    """ExpM's target fitted by DP-SGD: a DP release at each target epsilon, eps~ a utility knob."""

    name: ClassVar[str] = "dp_expm_nf"
    display_name: ClassVar[str] = "ExpM flow by DP-SGD"
    figure_label: ClassVar[str] = "ExpM flow by DP-SGD (mean)"
    # batch size and epochs set the plan, so they are not searched (as DP-SGD)
    search_spaces: ClassVar[dict[str, dict]] = {
        "grud": {"learning_rate": ("log", 3e-3, 1e-1), "max_grad_norm": ("log", 0.1, 5.0),
                 "temperature": ("log", 1.0, 100.0), "hidden_size": ("int", 8, 48)},
        "logistic_regression": {"learning_rate": ("log", 3e-3, 1e-1), "max_grad_norm": ("log", 0.1, 5.0),
                                "temperature": ("log", 1.0, 100.0)},
    }

    def epsilons(self) -> list[float | None]:
        return list(self.training.dp_expm_nf.epsilons)

    def losses(self) -> list[str]:
        return list(self.training.dp_expm_nf.losses)

    def trains(self, model: str) -> bool:
        return model in self.training.dp_expm_nf.models

    def default_hyperparameters(self, cell) -> dict:
        c = self.training.dp_expm_nf
        hp = {"learning_rate": c.learning_rate, "batch_size": c.batch_size, "epochs": c.epochs,
              "max_grad_norm": c.max_grad_norm, "temperature": c.temperature, "draws": c.draws,
              "init_scale": c.init_scale, "l1": c.l1}
        if cell.model == "grud":
            hp["hidden_size"] = self.training.grud.hidden_size
        return hp

    @staticmethod
    def _hyperparameters(hp: dict) -> DPExpMHyperparameters:
        return DPExpMHyperparameters(hp["temperature"], hp["learning_rate"], hp["draws"], hp["init_scale"], hp["l1"])

    def _utility(self, spec, data) -> tuple[object, BatchedUtility]:
        model = self.build(spec, data)
        return model, BatchedUtility(model, data.inputs, data.y, l1=spec.hyperparameters["l1"], loss=spec.cell.loss)

    def fit(self, spec, data, plan, noise) -> Release:
        """Train the flow by ``plan`` (the reserved one); the classifier is the flow's mean."""
        if plan is None:
            raise ValueError(f"{spec.cell.cell_id} {spec.what}: a DP-trained ExpM flow needs the plan the budget "
                             "check reserved")
        plan = plan.clipped_at(spec.hyperparameters["max_grad_norm"])
        model, utility = self._utility(spec, data)
        flow, _ = train_dp_expm(utility, self._hyperparameters(spec.hyperparameters), plan, noise,
                                self.epochs_progress(spec))
        return self._release(spec, data, plan, (model, utility, flow), {"noise_source": noise.kind})

    batches: ClassVar[bool] = True

    @classmethod
    def batches_cell(cls, cell, training, device_type):
        """Logistic regression's flows, whose record gradients are closed form (:func:`train_dp_expm_many`); GRU-D's
        go through torch.func one flow at a time."""
        return cls.batches and cell.model == "logistic_regression"

    def fit_many(self, specs, data, plans, noises):
        """The flows of one cell family trained together (:func:`train_dp_expm_many`), each by its reserved plan,
        clipped at its chosen C, with its own noise, draws and sample."""
        families = {(s.cell.label, s.cell.model, s.cell.loss) for s in specs}
        if len(families) != 1 or any(p is None for p in plans):
            raise ValueError(f"a group of DP-trained ExpM flows is one label, model and loss, each release with its "
                             f"reserved plan; got {sorted(families)}")
        clipped = [plan.clipped_at(spec.hyperparameters["max_grad_norm"]) for spec, plan in zip(specs, plans)]
        built = [self._utility(spec, data) for spec in specs]
        hps = [self._hyperparameters(spec.hyperparameters) for spec in specs]
        first = specs[0].cell
        progress = self.progress(f"{first.label}/{first.model}/dp_expm_nf/{first.loss}: {len(specs)} flows "
                                 "together, steps")
        flows = train_dp_expm_many(built[0][1], hps, clipped, noises, progress)
        members = len(specs) if batches_together(built[0][1], hps) else 1
        return [self._release(spec, data, plan, (model, utility, flow), {"noise_source": noise.kind,
                                                                         "batch_members": members})
                for spec, plan, (model, utility), flow, noise in zip(specs, clipped, built, flows, noises)]

    def _release(self, spec, data, plan, fitted: tuple, extra: dict) -> Release:
        """The release of a trained flow (``fitted``: the classifier, its utility and the flow): the classifier set to
        the flow's mean, the flow's state, the draws evaluated; ``extra`` joins the training info."""
        hp, (model, utility, flow) = spec.hyperparameters, fitted
        mean = flow_mean(flow)
        with torch.no_grad():
            for p, value in zip(model.parameters(), mean.split(utility.sizes)):
                p.copy_(value.reshape(p.shape))
        info = {"epochs": hp["epochs"], **plan.record(), **extra}
        if data.dev is not None:
            info["dev_auroc"] = self.evaluate_model(model, *data.dev)["auroc"]
        flow_state = {k: v.detach().cpu() for k, v in flow.state_dict().items()}
        state = {"cell": spec.cell.model_dump(), "seed": spec.seed, "hyperparameters": hp,
                 "state_dict": {k: v.cpu() for k, v in model.state_dict().items()}, "flow": flow_state,
                 "training": info}
        # the draws evaluated are post-processing of the release: a public seed, so a rerun can repeat them
        theta, log_q = sample_parameters(flow, self.training.dp_expm_nf.eval_samples,
                                         public_seed(f"{spec.cell.cell_id}/{spec.seed}/draws"))
        gap = fit_gap(hp["temperature"], 1.0, draw_utilities(utility, theta, 16), log_q)  # the target's eps~ u / 2
        return Release(self.entry(spec, plan), state, info, model,
                       extra_={"utility": utility, "theta": theta, "gap": gap})

    def evaluate(self, release, inputs, y) -> Evaluation:
        """The mean classifier's test metrics (the released prediction), with the draws' posterior predictive and
        quartiles and the fit gap beside them."""
        evaluation = super().evaluate(release, inputs, y)
        x, y_np = release.extra_, y.cpu().numpy()
        probabilities = draw_probabilities(x["utility"], x["theta"], inputs, 16)
        aurocs = np.array([binary_metrics(y_np, p)["auroc"] for p in probabilities], dtype=float)  # None -> nan
        evaluation.metrics |= {"auroc_bayes": binary_metrics(y_np, posterior_predictive(probabilities))["auroc"],
                               "auroc_q25": float(np.nanpercentile(aurocs, 25)),
                               "auroc_q75": float(np.nanpercentile(aurocs, 75)), "eval_samples": len(aurocs),
                               "gap_std": x["gap"]["gap_std"], "gap_range": x["gap"]["gap_range"]}
        return evaluation
