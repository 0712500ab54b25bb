"""Training-grid tasks: a hyperparameter search per cell, then one fit-and-evaluate per cell and seed.

Search: configurations are trained on train and scored by dev AUROC (non-private runs early-stop on
dev and record the best epoch). Final fits: the chosen configuration on train+dev, evaluated once on
test (seed 000, Appendix D). Every task writes its files into the run directory and returns only
aggregate numbers.

Privacy: a DP-SGD fit (final or search trial) trains by its :class:`~privehr.models.release_plan.ReleasePlan`
(the one the budget check reserved) with noise from ``NoiseSource.for_release``, and enters the ledger as
soon as it is trained, before its model is written anywhere (:func:`privehr.io.privacy_ledger.record_release`);
non-private and ExpM+NF fits enter it the same way, as releases without a DP guarantee.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch
from prefect import task

from privehr.models.classifiers import build_classifier, classifier_inputs
from privehr.models.device import resolve_device
from privehr.models.dp_sgd import DPSGDHyperparameters, train_dp_sgd
from privehr.models.hyperparameter_search import SEARCH_SPACES, sample_configurations
from privehr.models.metrics import binary_metrics
from privehr.models.privacy_ledger import GUARANTEES, LedgerEntry
from privehr.models.randomness import NoiseSource
from privehr.models.release_plan import ReleasePlan
from privehr.models.training import TrainingHyperparameters, fit_binary_classifier, predict_proba
from privehr.core.config import Cell, PrivacyConfig, TrainingConfig
from privehr.tasks.compute import share_cores
from privehr.tasks.expm_nf import default_expm_hyperparameters, fit_expm_nf
from privehr.tasks.evaluation import save_predictions
from privehr.tasks.features import load_split
from privehr.core.strict_json import strict_dumps, strict_json
from privehr.io.privacy_ledger import record_release
from privehr.tasks.progress import progress_artifact
from privehr.tasks.run_logging import run_logger

__all__ = ["search_hyperparameters", "fit_and_evaluate", "default_hyperparameters", "dp_sgd_plan", "guarantee",
           "search_configurations", "saved_search", "saved_fit", "fit_key", "trial_key"]


def dp_sgd_plan(n: int, hp: dict, cell: Cell, privacy: PrivacyConfig) -> ReleasePlan:
    """The release plan of a DP-SGD fit of ``hp`` on ``n`` stays at the cell's target epsilon."""
    return ReleasePlan.for_epochs(n, hp["batch_size"], hp["epochs"], target_epsilon=cell.target_epsilon,
                                  delta=privacy.delta, max_grad_norm=hp["max_grad_norm"])


def fit_key(cell: Cell, seed: int) -> str:
    return f"{cell.cell_id}/seed{seed}"


def trial_key(cell: Cell, trial: int) -> str:
    return f"{cell.cell_id}/trial{trial}"


def guarantee(method: str, privacy: PrivacyConfig, training: TrainingConfig, what: str = "final fit") -> str:
    """The guarantee of a release: a DP-SGD fit is DP unless its noise is reproducible or (a final fit) its
    hyperparameters were chosen by dev AUROC among several (a non-DP use of the dev patients)."""
    if method == "dp_sgd":
        if privacy.reproducible_noise:
            return "reproducible"
        return "tuned" if what == "final fit" and training.search_budget > 1 else "dp"
    return "unproven" if method == "expm_nf" else "non_private"


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


def _train(cell: Cell, hp: dict, training: TrainingConfig, privacy: PrivacyConfig, data, seed: int,
           reservation: str | None, what: str, dev_data=None):
    """Train one model and enter it in the ledger; return (model, info): epochs and, for DP-SGD, the plan's record."""
    inputs, y, n_vars, n_hours = data
    progress = progress_artifact(f"{cell.cell_id} seed {seed}: {what} epochs")
    model = build_classifier(cell.model, n_vars, n_hours, seed=seed, hidden_size=hp.get("hidden_size", 32),
                             batch_norm=training.grud.batch_norm and cell.method == "non_private").to(y.device)
    if cell.method == "non_private":
        params = TrainingHyperparameters(learning_rate=hp["learning_rate"], weight_decay=hp["weight_decay"],
                                         batch_size=hp["batch_size"], max_epochs=hp["epochs"],
                                         patience=training.non_private.patience, seed=seed,
                                         early_stopping=training.non_private.early_stopping)
        result = fit_binary_classifier(model, inputs, y, *(dev_data or (None, None)), params, cell.loss, progress)
        if reservation is not None:
            record_release(privacy.ledger_path, reservation, LedgerEntry("", "", "non_private", what=what))
        return model, {"epochs": result.best_epoch if dev_data else result.epochs_run,
                       "dev_auroc": result.best_dev_auroc}
    plan = dp_sgd_plan(len(y), hp, cell, privacy)
    if reservation is None:
        raise RuntimeError(f"{cell.cell_id} {what}: a DP-SGD release needs a reservation from the budget check")
    noise = NoiseSource.for_release(privacy.reproducible_noise, cell.cell_id, what, seed)
    model, result = train_dp_sgd(model, inputs, y, DPSGDHyperparameters(hp["learning_rate"], hp["weight_decay"]),
                                 plan, noise, cell.loss, grad_sample_mode=training.dp_sgd.clipping, progress=progress)
    record_release(privacy.ledger_path, reservation, plan.ledger_entry(guarantee("dp_sgd", privacy, training, what),
                                                                       what))
    info = {"epochs": hp["epochs"], **plan.record(), "noise_source": noise.kind}
    if dev_data:
        info["dev_auroc"] = binary_metrics(dev_data[1].cpu().numpy(), predict_proba(model, dev_data[0]))["auroc"]
    return model, info


def _result_key(run_dir: str, *parts) -> str:
    """Identity of a result: the raw input's sha256 (as DVC tracks it), the split, and the task's parameters."""
    run = Path(run_dir)
    digest = hashlib.sha256(json.loads((run / "ingest.json").read_text())["sha256"].encode())
    digest.update(json.loads((run / "split_summary.json").read_text())["manifest_sha256"].encode())
    digest.update(json.dumps(parts, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def _reuse(path: Path, key: str, field: str = "value"):
    """``field`` of the result saved at ``path`` if it was computed for ``key`` (a resumed run), else None."""
    if path.exists():
        saved = json.loads(path.read_text())
        if saved.get("key") == key:
            return saved[field]
    return None


def search_configurations(cell: Cell, training: TrainingConfig) -> list[dict]:
    """The configurations the search trains, in order (the first is the defaults); known before any training.

    DP-SGD's search spaces leave out what sets the privacy plan (batch size, epochs), so the plan of
    every trial and of the final fit is known before the budget check.
    """
    defaults = default_hyperparameters(cell, training)
    if training.search_budget == 1:
        return [defaults]
    space = {k: v for k, v in SEARCH_SPACES[(cell.model, cell.method)].items() if k in defaults}
    return sample_configurations(defaults, space, training.search_budget, training.search_seed)


def _search_path(run_dir: str, cell: Cell) -> Path:
    return Path(run_dir) / "search" / f"{cell.cell_id}.json"


def saved_search(run_dir: str, cell: Cell, training: TrainingConfig) -> dict | None:
    """The chosen hyperparameters of a search an earlier attempt of this run finished, else None."""
    return _reuse(_search_path(run_dir, cell), _result_key(run_dir, cell.model_dump(), training.model_dump()), "chosen")


def _fit_path(run_dir: str, cell: Cell, seed: int) -> Path:
    return Path(run_dir) / "models" / f"{cell.cell_id}-seed{seed}.json"


def saved_fit(run_dir: str, cell: Cell, hyperparameters: dict, seed: int, training: TrainingConfig) -> dict | None:
    """The result row of a fit an earlier attempt of this run finished, else None."""
    key = _result_key(run_dir, cell.model_dump(), hyperparameters, seed, training.model_dump())
    return _reuse(_fit_path(run_dir, cell, seed), key)


@task(name="search-hyperparameters")
def search_hyperparameters(features_dir: str, cell: Cell, training: TrainingConfig, privacy: PrivacyConfig,
                           run_dir: str, reservations: dict[str, str], device: str = "auto") -> dict:
    """Try ``training.search_budget`` configurations on train/dev; write ``search/<cell>.json``; return the best.

    Each DP-SGD trial is a release on the training split, trained under its reservation and recorded."""
    out = _search_path(run_dir, cell)
    key = _result_key(run_dir, cell.model_dump(), training.model_dump())
    if (chosen := _reuse(out, key, "chosen")) is not None:
        run_logger().info("search %s: reused the result of an earlier attempt", cell.cell_id)
        return chosen
    share_cores()
    dev = resolve_device(device)
    configs = search_configurations(cell, training)
    trials = []
    if len(configs) == 1 and cell.method in ("dp_sgd", "expm_nf"):
        chosen = configs[0]  # nothing to choose: a fixed, accounted number of epochs (DP-SGD) or steps (ExpM+NF)
    else:
        train = _data(features_dir, ["train"], cell, dev)
        dev_inputs, dev_y, *_ = _data(features_dir, ["dev"], cell, dev)
        for k, hp in enumerate(configs):
            if cell.method == "expm_nf":
                info = {"dev_auroc": fit_expm_nf(cell, hp, training, train, training.search_seed,
                                                 (dev_inputs, dev_y))["auroc"], "epochs": None}
            else:
                _, info = _train(cell, hp, training, privacy, train, training.search_seed,
                                 reservations.get(trial_key(cell, k)), f"search trial {k}", (dev_inputs, dev_y))
            trials.append({"hyperparameters": hp, "dev_auroc": info["dev_auroc"], "epochs": info["epochs"]})
        scores = [t["dev_auroc"] if np.isfinite(t["dev_auroc"]) else -np.inf for t in trials]
        best = trials[int(np.argmax(scores))]
        chosen = dict(best["hyperparameters"])
        if best["epochs"] is not None and cell.method == "non_private":
            chosen["epochs"] = max(1, int(best["epochs"]))
    out.parent.mkdir(exist_ok=True)
    out.write_text(strict_dumps({"key": key, "cell": cell.model_dump(), "budget": training.search_budget,
                                 "trials": trials, "chosen": chosen,
                                 "note": "tuned on private dev data: a DP-SGD fit of these hyperparameters is "
                                         "recorded as not DP when more than one was tried"}, indent=1))
    run_logger().info("search %s: %d configuration(s) trained, chose %s", cell.cell_id, len(trials), chosen)
    return chosen


@task(name="fit-and-evaluate")
def fit_and_evaluate(features_dir: str, cell: Cell, hyperparameters: dict, seed: int, training: TrainingConfig,
                     privacy: PrivacyConfig, run_dir: str, reservation: str | None, device: str = "auto") -> dict:
    """Fit on train+dev with the chosen hyperparameters and ``seed``; return test metrics (aggregates only).

    The release enters the ledger under ``reservation`` as soon as it is trained; the row is saved next
    to the model, and a resumed run returns it instead of training again (an unfinished fit is
    retrained with fresh noise, as a new release under a new reservation).
    """
    out_dir = Path(run_dir) / "models"
    out_dir.mkdir(exist_ok=True)
    key = _result_key(run_dir, cell.model_dump(), hyperparameters, seed, training.model_dump())
    result_path = _fit_path(run_dir, cell, seed)
    if (row := _reuse(result_path, key)) is not None:
        run_logger().info("fit %s seed %d: reused the result of an earlier attempt", cell.cell_id, seed)
        return row
    share_cores()
    start = time.perf_counter()
    dev = resolve_device(device)
    data = _data(features_dir, ["train", "dev"], cell, dev)
    test_inputs, test_y, *_ = _data(features_dir, ["test"], cell, dev)
    if cell.method == "expm_nf":
        if reservation is None:
            raise RuntimeError(f"{cell.cell_id} seed {seed}: no reservation from the budget check")
        metrics = fit_expm_nf(cell, hyperparameters, training, data, seed, (test_inputs, test_y),
                              out_dir / f"{cell.cell_id}-seed{seed}.pt",
                              on_released=lambda p: save_predictions(run_dir, cell, seed, p),
                              before_saving=lambda: record_release(privacy.ledger_path, reservation, LedgerEntry(
                                  "", "", "expm_nf", cell.target_epsilon, what="final fit")))
        info = {}
    else:
        model, info = _train(cell, hyperparameters, training, privacy, data, seed, reservation, "final fit")
        probabilities = predict_proba(model, test_inputs)
        metrics = binary_metrics(test_y.cpu().numpy(), probabilities)
        save_predictions(run_dir, cell, seed, probabilities)  # patient-level: intermediate/, for the report
        torch.save({"cell": cell.model_dump(), "seed": seed, "hyperparameters": hyperparameters,
                    "state_dict": {k: v.cpu() for k, v in model.state_dict().items()}, "training": info},
                   out_dir / f"{cell.cell_id}-seed{seed}.pt")
    row = {**cell.model_dump(), "seed": seed, "device": str(dev), **metrics,
           **{k: info.get(k) for k in ("epochs", "epsilon_prv", "epsilon_rdp", "epsilon_pld", "noise_multiplier",
                                        "sample_rate", "steps", "delta", "accountant", "noise_source")},
           "guarantee": GUARANTEES[guarantee(cell.method, privacy, training)],
           "fit_seconds": round(time.perf_counter() - start, 2)}
    row = strict_json(row)
    result_path.write_text(strict_dumps({"key": key, "value": row}))  # last: marks the cell as done
    run_logger().info("fit %s seed %d: test AUROC %.3f%s", cell.cell_id, seed, metrics["auroc"],
                      f", epsilon {info['epsilon']:.3g} ({info['accountant']})" if "epsilon" in info else "")
    return row
