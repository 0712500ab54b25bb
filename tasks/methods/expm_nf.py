"""ExpM+NF in the training grid: fit one flow per (cell, seed), evaluate its samples on test.

References:
    Bridges, Tombs, Stanley (2023). Are Normalizing Flows the Key to Unlocking the Exponential Mechanism?
    arXiv:2311.09200.

Evaluation as in Bridges et al. 2023: the flow draws ``eval_samples`` parameter vectors; each is one candidate
private release, scored by test AUROC; the row reports their median (and quartiles), the Bayesian
mode (posterior-predictive average over the draws) and the MAP draw (highest utility on the
*training* data), and the fit gap (spread of log q - eps~ u / 2s). The single private release is the
first draw; the flow itself stays in the run directory (each further draw would cost privacy, if
the mechanism were exact). Every draw's test AUROC goes to ``<model file>.draws.json`` for the
report's box plots.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from privehr.models.batched_utility import BatchedUtility
from privehr.models.classifiers import build_classifier
from privehr.models.expm_nf import (ExpMNFHyperparameters, draw_probabilities, draw_utilities, fit_gap, map_index,
                            posterior_predictive, sample_parameters, train_expm_nf)
from typing import ClassVar

from privehr.core.config import Cell, PrivacyConfig, TrainingConfig
from privehr.models.metrics import binary_metrics
from privehr.models.privacy_ledger import LedgerEntry
from privehr.tasks.evaluation import save_predictions
from privehr.tasks.methods.base import TrainingMethod, register_method
from privehr.tasks.progress import progress_artifact

__all__ = ["ExpMNF", "fit_expm_nf"]


@register_method
class ExpMNF(TrainingMethod):
    """ExpM+NF cells: the l2 loss (its utility), eps~ from ``training.expm_nf.epsilons``, no proven DP."""

    name: ClassVar[str] = "expm_nf"

    def epsilons(self, training: TrainingConfig) -> list[float | None]:
        return list(training.expm_nf.epsilons)

    def losses(self, training: TrainingConfig) -> list[str]:
        return ["l2"]  # the utility is minus the squared error, whatever training.losses says

    def trains(self, model: str, training: TrainingConfig) -> bool:
        return model in training.expm_nf.models

    def seeds(self, training: TrainingConfig) -> int:
        return training.expm_nf.seeds or training.seeds

    def default_hyperparameters(self, cell: Cell, training: TrainingConfig) -> dict:
        c, grud = training.expm_nf, cell.model == "grud"
        hp = {"flow": c.flow, "layers": c.layers, "m": c.m, "reflections": c.reflections, "base_sigma": c.base_sigma,
              "affine": c.affine, "samples": c.grud_samples if grud else c.samples, "steps": c.steps,
              "learning_rate": c.learning_rate, "optimizer": c.optimizer, "l1": c.l1,
              "batch_size": c.grud_batch_size if grud else c.batch_size}
        if grud:
            hp["hidden_size"] = training.grud.hidden_size
        return hp

    def guarantee(self, privacy: PrivacyConfig, training: TrainingConfig, what: str = "final fit") -> str:
        return "unproven"

    def planned_entry(self, cell, n, hyperparameters, privacy, training, what) -> LedgerEntry:
        return LedgerEntry("", "", "expm_nf", cell.target_epsilon, what=what)

    def search_trial(self, cell, hyperparameters, training, privacy, data, dev_data, seed, reservation, what):
        """A trial's flow is scored on dev and never saved or released (the search draws no reservation)."""
        return {"dev_auroc": fit_expm_nf(cell, hyperparameters, training, data, seed, dev_data)["auroc"],
                "epochs": None}

    def final_fit(self, cell, hyperparameters, training, privacy, data, test_data, seed, reservation, run_dir,
                  model_path):
        if reservation is None:
            raise RuntimeError(f"{cell.cell_id} seed {seed}: no reservation from the budget check")
        entry = self.planned_entry(cell, len(data[1]), hyperparameters, privacy, training, "final fit")
        metrics = fit_expm_nf(cell, hyperparameters, training, data, seed, test_data, model_path,
                              on_released=lambda p: save_predictions(run_dir, cell, seed, p),
                              before_saving=lambda: self.record(privacy, reservation, entry))
        return metrics, {}


def fit_expm_nf(cell: Cell, hp: dict, training: TrainingConfig, data, seed: int, eval_data,
                out: Path | None = None, before_saving=None, on_released=None) -> dict:
    """Train the flow on ``data`` (inputs, y, n_vars, n_hours); evaluate on ``eval_data`` (inputs, y);
    save the flow and the released draw to ``out`` (the search passes None), calling ``before_saving()``
    first (the ledger entry of the release); ``on_released`` receives the released draw's probabilities
    on ``eval_data``."""
    inputs, y, n_vars, n_hours = data
    template = build_classifier(cell.model, n_vars, n_hours, seed=seed, hidden_size=hp.get("hidden_size", 32)
                                ).to(y.device)
    utility = BatchedUtility(template, inputs, y, l1=hp["l1"])
    params = ExpMNFHyperparameters(epsilon=cell.target_epsilon, seed=seed,
                                   **{k: hp[k] for k in ("flow", "layers", "m", "reflections", "base_sigma", "affine",
                                                         "samples", "steps", "learning_rate", "optimizer",
                                                         "batch_size")})
    result = train_expm_nf(utility, params, device=y.device,
                           progress=progress_artifact(f"{cell.cell_id} seed {seed}: ExpM+NF flow steps"))
    theta, log_q = sample_parameters(result.flow, training.expm_nf.eval_samples, seed + 10_000)
    eval_inputs, eval_y = eval_data
    y_np = eval_y.cpu().numpy()
    chunk = 8 if cell.model == "grud" else 64  # GRU-D holds (draws, records, hours, variables) tensors
    probabilities = draw_probabilities(utility, theta, eval_inputs, chunk)  # (draws, eval records), once
    draws = np.array([[m["auroc"], m["auprc"]] for m in (binary_metrics(y_np, p) for p in probabilities)])
    aurocs = draws[:, 0]
    released = theta[0]  # the single private release
    bayes = binary_metrics(y_np, posterior_predictive(probabilities))
    utilities = draw_utilities(utility, theta, chunk)  # on the training data, computed once
    map_metrics = binary_metrics(y_np, probabilities[map_index(utilities)])
    single = binary_metrics(y_np, probabilities[0])
    gap = fit_gap(cell.target_epsilon, utility.sensitivity, utilities, log_q)
    if before_saving is not None:
        before_saving()
    if on_released is not None:
        on_released(probabilities[0])
    if out is not None:
        out.with_suffix(".draws.json").write_text(json.dumps({"auroc": draws[:, 0].tolist(),
                                                             "auprc": draws[:, 1].tolist()}))
        torch.save({"cell": cell.model_dump(), "seed": seed, "hyperparameters": hp, "flow": result.flow.state_dict(),
                    "released_theta": released.cpu(), "loss_curve": result.history,
                    "note": "ExpM+NF: eps~ is a training parameter; no DP guarantee is proven"}, out)
    return {"auroc": float(np.nanmedian(aurocs)), "auprc": float(np.nanmedian(draws[:, 1])),
            "auroc_q25": float(np.nanpercentile(aurocs, 25)), "auroc_q75": float(np.nanpercentile(aurocs, 75)),
            "auroc_single_release": single["auroc"], "auroc_bayes": bayes["auroc"], "auroc_map": map_metrics["auroc"],
            "gap_std": gap["gap_std"], "gap_range": gap["gap_range"], "eval_samples": len(aurocs),
            "epochs": None, "final_loss": result.history[-1]}
