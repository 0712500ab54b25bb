"""ExpM+NF in the training grid: fit one flow per (cell, seed), evaluate its samples on held-out records.

References:
    Bridges, Tombs, Stanley (2023). Are Normalizing Flows the Key to Unlocking the Exponential Mechanism?
    arXiv:2311.09200.

Evaluation as in Bridges et al. 2023: the flow draws ``eval_samples`` parameter vectors; each is one candidate
private release, scored by test AUROC; the row reports their median (and quartiles), the Bayesian
mode (posterior-predictive average over the draws) and the MAP draw (highest utility on the
*training* data), and the fit gap (spread of log q - eps~ u / 2s). The single private release is the
first draw; the flow itself stays in the run directory (each further draw would cost privacy, if
the mechanism were exact). Every draw's test AUROC is returned for the report's box plots.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from privehr.models.classifiers import build_classifier
from privehr.models.evaluation.metrics import binary_metrics
from privehr.models.expm.batched_utility import BatchedUtility
from privehr.models.expm.mechanism import (ExpMNFHyperparameters, draw_probabilities, draw_utilities, fit_gap,
                                         map_index, posterior_predictive, sample_parameters, train_expm_nf_many)
from privehr.models.methods.base import Evaluation, Release, TrainingMethod, register_method
from privehr.models.privacy.ledger import LedgerEntry

__all__ = ["ExpMNF"]

_FLOW_SETTINGS = ("flow", "layers", "m", "reflections", "base_sigma", "affine", "samples", "steps", "learning_rate",
                  "optimizer", "batch_size")


@register_method
class ExpMNF(TrainingMethod):
    """ExpM+NF cells: the l2 loss (its utility), eps~ from ``training.expm_nf.epsilons``, no proven DP."""

    name: ClassVar[str] = "expm_nf"
    display_name: ClassVar[str] = "ExpM+NF"
    figure_label: ClassVar[str] = "ExpM+NF (eps~, no proven DP)"

    @classmethod
    def epsilon_label(cls, target_epsilon, accounted):
        return f"eps~ {target_epsilon:g}"  # a training parameter: no epsilon is accounted
    search_spaces: ClassVar[dict[str, dict]] = {
        "grud": {"learning_rate": ("log", 1e-3, 3e-2), "base_sigma": ("log", 1e-3, 0.1),
                 "l1": ("log", 1e-4, 1e-1), "hidden_size": ("int", 8, 48)},
        "logistic_regression": {"learning_rate": ("log", 1e-3, 3e-2), "base_sigma": ("log", 1e-3, 0.1),
                                "l1": ("log", 1e-4, 1e-1), "samples": ("choice", [8, 16, 32])},
    }

    def epsilons(self) -> list[float | None]:
        return list(self.training.expm_nf.epsilons)

    def losses(self) -> list[str]:
        return ["l2"]  # the utility is minus the squared error, whatever training.losses says

    def trains(self, model: str) -> bool:
        return model in self.training.expm_nf.models

    def seeds(self) -> int:
        return self.training.expm_nf.seeds or self.training.seeds

    def default_hyperparameters(self, cell) -> dict:
        c, grud = self.training.expm_nf, cell.model == "grud"
        hp = {"flow": c.flow, "layers": c.layers, "m": c.m, "reflections": c.reflections, "base_sigma": c.base_sigma,
              "affine": c.affine, "samples": c.grud_samples if grud else c.samples, "steps": c.steps,
              "learning_rate": c.learning_rate, "optimizer": c.optimizer, "l1": c.l1,
              "batch_size": c.grud_batch_size if grud else c.batch_size}
        if grud:
            hp["hidden_size"] = self.training.grud.hidden_size
        return hp

    def guarantee(self, what: str = "final fit") -> str:
        return "unproven"

    def entry(self, spec, plan) -> LedgerEntry:
        return LedgerEntry("", "", "expm_nf", spec.cell.target_epsilon, what=spec.what)

    def fit(self, spec, data, plan, noise) -> Release:
        """Train the flow on ``data`` and draw ``eval_samples`` parameter vectors; the first is the release.

        A search trial's flow is scored on dev and never saved or released (the search reserves nothing)."""
        return self.fit_many([spec], data, [plan], [noise])[0]

    batches: ClassVar[bool] = True

    @classmethod
    def batches_cell(cls, cell, training, device_type):
        """Only flows whose utility reads every record (``batch_size`` None: logistic regression by default) share a
        pass; GRU-D's minibatched flows would gain nothing from a group and hold K releases' draws until evaluated."""
        c = training.expm_nf
        return cls.batches and (c.grud_batch_size if cell.model == "grud" else c.batch_size) is None

    def fit_many(self, specs, data, plans, noises):
        """Several flows of one cell family trained together (:func:`train_expm_nf_many`: one pass over the
        training records a step serves every flow); each flow, its draws and its release are what :meth:`fit` makes
        of it alone."""
        utilities, params = [], []
        for spec in specs:
            cell, hp, seed = spec.cell, spec.hyperparameters, spec.seed
            template = build_classifier(cell.model, data.n_variables, data.n_hours, seed=seed,
                                        hidden_size=hp.get("hidden_size", 32)).to(data.y.device)
            utilities.append(BatchedUtility(template, data.inputs, data.y, l1=hp["l1"]))
            params.append(ExpMNFHyperparameters(epsilon=cell.target_epsilon, seed=seed,
                                                **{k: hp[k] for k in _FLOW_SETTINGS}))
        first = specs[0]
        label = (f"{first.cell.cell_id} seed {first.seed}" if len(specs) == 1 else
                 f"{first.cell.label}/{first.cell.model}/expm_nf: {len(specs)} flows together")
        results = train_expm_nf_many(utilities, params, device=data.y.device,
                                     progress=self.progress(f"{label}: ExpM+NF flow steps"))
        return [self._release(spec, plan, utility, result, len(specs))
                for spec, plan, utility, result in zip(specs, plans, utilities, results)]

    def _release(self, spec, plan, utility, result, members: int) -> Release:
        cell, hp, seed = spec.cell, spec.hyperparameters, spec.seed
        theta, log_q = sample_parameters(result.flow, self.training.expm_nf.eval_samples, seed + 10_000)
        chunk = 8 if cell.model == "grud" else 64  # GRU-D holds (draws, records, hours, variables) tensors
        utilities = draw_utilities(utility, theta, chunk)  # on the training data, computed once
        gap = fit_gap(cell.target_epsilon, utility.sensitivity, utilities, log_q)
        state = {"cell": cell.model_dump(), "seed": seed, "hyperparameters": hp, "flow": result.flow.state_dict(),
                 "released_theta": theta[0].cpu(), "loss_curve": result.history,
                 "note": "ExpM+NF: eps~ is a training parameter; no DP guarantee is proven"}
        info = {"epochs": None, "final_loss": result.history[-1], **gap, **({"batch_members": members}
                                                                             if members > 1 else {})}
        return Release(self.entry(spec, plan), state, info,
                       extra_={"utility": utility, "theta": theta, "utilities": utilities, "chunk": chunk})

    def logits(self, release, inputs) -> np.ndarray:
        """The single private release's (the first draw's) logits."""
        x = release.extra_
        return x["utility"].logits(x["theta"][:1], inputs)[0].detach().cpu().numpy()

    def evaluate(self, release, inputs, y) -> Evaluation:
        x = release.extra_
        y_np = y.cpu().numpy()
        probabilities = draw_probabilities(x["utility"], x["theta"], inputs, x["chunk"])  # (draws, records)
        draws = np.array([[m["auroc"], m["auprc"]] for m in (binary_metrics(y_np, p) for p in probabilities)])
        aurocs = draws[:, 0]
        bayes = binary_metrics(y_np, posterior_predictive(probabilities))
        map_metrics = binary_metrics(y_np, probabilities[map_index(x["utilities"])])
        single = binary_metrics(y_np, probabilities[0])
        info = release.info_
        metrics = {"auroc": float(np.nanmedian(aurocs)), "auprc": float(np.nanmedian(draws[:, 1])),
                   "auroc_q25": float(np.nanpercentile(aurocs, 25)), "auroc_q75": float(np.nanpercentile(aurocs, 75)),
                   "auroc_single_release": single["auroc"], "auroc_bayes": bayes["auroc"],
                   "auroc_map": map_metrics["auroc"], "gap_std": info["gap_std"], "gap_range": info["gap_range"],
                   "eval_samples": len(aurocs), "epochs": None, "final_loss": info["final_loss"]}
        return Evaluation(metrics, probabilities[0], {"auroc": draws[:, 0].tolist(), "auprc": draws[:, 1].tolist()})
