"""Training-grid tasks: a hyperparameter search per cell, then one fit-and-evaluate per cell and seed.

Search: configurations are trained on train and scored by dev AUROC (non-private runs early-stop on
dev and record the best epoch). Final fits: the chosen configuration on train+dev, evaluated once on
test (seed 000, Appendix D). Every task writes its files into the run directory and returns only
aggregate numbers.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch
from prefect import task

from models.classifiers import build_classifier, classifier_inputs
from models.device import resolve_device
from models.dp_sgd import DPSGDHyperparameters, train_dp_sgd
from models.hyperparameter_search import SEARCH_SPACES, sample_configurations
from models.metrics import binary_metrics
from models.training import TrainingHyperparameters, fit_binary_classifier, predict_proba
from privehr.config import Cell, TrainingConfig
from tasks.expm_nf import default_expm_hyperparameters, fit_expm_nf
from tasks.features import load_split
from tasks.compute import share_cores
from tasks.progress import progress_artifact
from tasks.run_logging import run_logger

__all__ = ["search_hyperparameters", "fit_and_evaluate", "default_hyperparameters"]


def default_hyperparameters(cell: Cell, training: TrainingConfig) -> dict:
    if cell.method == "expm_nf":
        hp = default_expm_hyperparameters(cell, training)
    elif cell.method == "non_private":
        np_cfg = training.non_private
        hp = {"learning_rate": np_cfg.learning_rate, "weight_decay": np_cfg.weight_decay,
              "batch_size": np_cfg.batch_size, "epochs": np_cfg.max_epochs}
    else:
        dp = training.dp_sgd
        hp = {"learning_rate": dp.learning_rate, "weight_decay": dp.weight_decay, "batch_size": dp.batch_size,
              "epochs": dp.epochs, "max_grad_norm": dp.max_grad_norm}
    if cell.model == "grud":
        hp["hidden_size"] = training.grud.hidden_size
    return hp


def _data(features_dir: str, splits: list[str], cell: Cell, device) -> tuple[tuple, torch.Tensor, int, int]:
    parts = [load_split(features_dir, s) for s in splits]
    values, mask, delta = (np.concatenate([p[k] for p in parts]) for k in ("values", "mask", "delta"))
    column = list(parts[0]["label_names"]).index(cell.label)
    y = torch.as_tensor(np.concatenate([p["labels"][:, column] for p in parts]).astype(np.float32), device=device)
    return classifier_inputs(cell.model, values, mask, delta, device), y, values.shape[2], values.shape[1]


def _train(cell: Cell, hp: dict, training: TrainingConfig, data, seed: int, dev_data=None):
    """Train one model; return (model, info) where info holds epochs and, for DP-SGD, the privacy spent."""
    inputs, y, n_vars, n_hours = data
    progress = progress_artifact(f"{cell.cell_id} seed {seed}: {'search' if dev_data else 'fit'} epochs")
    model = build_classifier(cell.model, n_vars, n_hours, seed=seed, hidden_size=hp.get("hidden_size", 32),
                             batch_norm=training.grud.batch_norm and cell.method == "non_private").to(y.device)
    if cell.method == "non_private":
        params = TrainingHyperparameters(learning_rate=hp["learning_rate"], weight_decay=hp["weight_decay"],
                                         batch_size=hp["batch_size"], max_epochs=hp["epochs"],
                                         patience=training.non_private.patience, seed=seed,
                                         early_stopping=training.non_private.early_stopping)
        result = fit_binary_classifier(model, inputs, y, *(dev_data or (None, None)), params, cell.loss, progress)
        return model, {"epochs": result.best_epoch if dev_data else result.epochs_run,
                       "dev_auroc": result.best_dev_auroc}
    # data order, Poisson sampling and noise seeded per release: cells that differ only in epsilon must not share
    # their noise draws (the ledger composes releases as independent mechanisms)
    release_seed = int(hashlib.sha256(f"{cell.cell_id}/seed{seed}".encode()).hexdigest()[:8], 16)
    params = DPSGDHyperparameters(learning_rate=hp["learning_rate"], weight_decay=hp["weight_decay"],
                                  batch_size=hp["batch_size"], epochs=hp["epochs"],
                                  max_grad_norm=hp["max_grad_norm"], seed=release_seed)
    model, result = train_dp_sgd(model, inputs, y, params, cell.target_epsilon, training.dp_sgd.delta, cell.loss,
                                 progress=progress)
    info = {"epochs": hp["epochs"], **result.privacy.as_dict()}
    if dev_data:
        info["dev_auroc"] = binary_metrics(dev_data[1].cpu().numpy(), predict_proba(model, dev_data[0]))["auroc"]
    return model, info


def _result_key(run_dir: str, *parts) -> str:
    """Identity of a result: the raw input's sha256 (as DVC tracks it), the split, and the task's parameters."""
    run = Path(run_dir)
    digest = hashlib.sha256(json.loads((run / "ingest.json").read_text())["sha256"].encode())
    digest.update((run / "split_manifest.json").read_bytes())
    digest.update(json.dumps(parts, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def _reuse(path: Path, key: str, field: str = "value"):
    """``field`` of the result saved at ``path`` if it was computed for ``key`` (a resumed run), else None."""
    if path.exists():
        saved = json.loads(path.read_text())
        if saved.get("key") == key:
            return saved[field]
    return None


@task(name="search-hyperparameters")
def search_hyperparameters(features_dir: str, cell: Cell, training: TrainingConfig, run_dir: str,
                           device: str = "auto") -> dict:
    """Try ``training.search_budget`` configurations on train/dev; write ``search/<cell>.json``; return the best."""
    out = Path(run_dir) / "search" / f"{cell.cell_id}.json"
    key = _result_key(run_dir, cell.model_dump(), training.model_dump())
    if (chosen := _reuse(out, key, "chosen")) is not None:
        run_logger().info("search %s: reused the result of an earlier attempt", cell.cell_id)
        return chosen
    share_cores()
    dev = resolve_device(device)
    defaults = default_hyperparameters(cell, training)
    trials = []
    if training.search_budget == 1 and cell.method in ("dp_sgd", "expm_nf"):
        chosen = defaults  # nothing to choose: a fixed, accounted number of epochs (DP-SGD) or steps (ExpM+NF)
    else:
        space = {k: v for k, v in SEARCH_SPACES[(cell.model, cell.method)].items() if k in defaults}
        configs = sample_configurations(defaults, space, training.search_budget, training.search_seed)
        train = _data(features_dir, ["train"], cell, dev)
        dev_inputs, dev_y, *_ = _data(features_dir, ["dev"], cell, dev)
        for hp in configs:
            if cell.method == "expm_nf":
                info = {"dev_auroc": fit_expm_nf(cell, hp, training, train, training.search_seed,
                                                 (dev_inputs, dev_y))["auroc"], "epochs": None}
            else:
                _, info = _train(cell, hp, training, train, training.search_seed, (dev_inputs, dev_y))
            trials.append({"hyperparameters": hp, "dev_auroc": info["dev_auroc"], "epochs": info["epochs"]})
        scores = [t["dev_auroc"] if np.isfinite(t["dev_auroc"]) else -np.inf for t in trials]
        best = trials[int(np.argmax(scores))]
        chosen = dict(best["hyperparameters"])
        if best["epochs"] is not None:
            chosen["epochs"] = max(1, int(best["epochs"]))
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"key": key, "cell": cell.model_dump(), "budget": training.search_budget, "trials": trials,
                               "chosen": chosen, "note": "tuned on private dev data; not accounted"}, indent=1))
    run_logger().info("search %s: %d configuration(s) trained, chose %s", cell.cell_id, len(trials), chosen)
    return chosen


@task(name="fit-and-evaluate")
def fit_and_evaluate(features_dir: str, cell: Cell, hyperparameters: dict, seed: int, training: TrainingConfig,
                     run_dir: str, device: str = "auto") -> dict:
    """Fit on train+dev with the chosen hyperparameters and ``seed``; return test metrics (aggregates only).

    The row is saved next to the model; a resumed run returns it instead of training again.
    """
    out_dir = Path(run_dir) / "models"
    out_dir.mkdir(exist_ok=True)
    key = _result_key(run_dir, cell.model_dump(), hyperparameters, seed, training.model_dump())
    result_path = out_dir / f"{cell.cell_id}-seed{seed}.json"
    if (row := _reuse(result_path, key)) is not None:
        run_logger().info("fit %s seed %d: reused the result of an earlier attempt", cell.cell_id, seed)
        return row
    share_cores()
    start = time.perf_counter()
    dev = resolve_device(device)
    data = _data(features_dir, ["train", "dev"], cell, dev)
    test_inputs, test_y, *_ = _data(features_dir, ["test"], cell, dev)
    if cell.method == "expm_nf":
        metrics = fit_expm_nf(cell, hyperparameters, training, data, seed, (test_inputs, test_y),
                              out_dir / f"{cell.cell_id}-seed{seed}.pt")
        info = {}
    else:
        model, info = _train(cell, hyperparameters, training, data, seed)
        metrics = binary_metrics(test_y.cpu().numpy(), predict_proba(model, test_inputs))
        torch.save({"cell": cell.model_dump(), "seed": seed, "hyperparameters": hyperparameters,
                    "state_dict": {k: v.cpu() for k, v in model.state_dict().items()}, "training": info},
                   out_dir / f"{cell.cell_id}-seed{seed}.pt")
    row = {**cell.model_dump(), "seed": seed, "device": str(dev), **metrics,
           **{k: info.get(k) for k in ("epochs", "epsilon_prv", "epsilon_rdp", "noise_multiplier", "sample_rate",
                                        "steps", "delta", "accountant")},
           "fit_seconds": round(time.perf_counter() - start, 2)}
    result_path.write_text(json.dumps({"key": key, "value": row}))  # last: marks the cell as done
    run_logger().info("fit %s seed %d: test AUROC %.3f%s", cell.cell_id, seed, metrics["auroc"],
                      f", epsilon {info['epsilon']:.3g} ({info['accountant']})" if "epsilon" in info else "")
    return row
