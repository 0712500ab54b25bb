"""Training-grid tasks: a hyperparameter search per cell, then one fit-and-evaluate per cell and seed.

References:
    Bridges, Tombs, Stanley (2023). Are Normalizing Flows the Key to Unlocking the Exponential Mechanism?
    arXiv:2311.09200.

Search: configurations are trained on train and scored by dev AUROC (non-private runs early-stop on
dev and record the best epoch). Final fits: the chosen configuration on train+dev, evaluated once on
test (Bridges et al. 2023, Appendix D). Every task writes its files into the run directory and returns only
aggregate numbers.

Privacy: a DP-SGD fit (final or search trial) trains by its :class:`~privehr.models.release_plan.ReleasePlan`
(the one the budget check reserved) with noise from ``NoiseSource.for_release``, and enters the ledger as
soon as it is trained, before its model is written anywhere (:func:`privehr.io.privacy_ledger.record_release`);
non-private and ExpM+NF fits enter it the same way, as releases without a DP guarantee. How each method
trains, and what each of its releases is, lives in its :class:`~privehr.tasks.methods.TrainingMethod`.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch
from prefect import task

from privehr.core.run_layout import RunLayout
from privehr.core.config import Cell, PrivacyConfig, TrainingConfig
from privehr.core.records import FitRow
from privehr.core.strict_json import strict_dumps, strict_json
from privehr.models.classifiers import classifier_inputs
from privehr.models.device import resolve_device
from privehr.models.hyperparameter_search import sample_configurations
from privehr.models.privacy_ledger import guarantee_label
from privehr.tasks.compute import share_cores
from privehr.tasks.features import load_split
from privehr.tasks.methods import get_method
from privehr.tasks.run_logging import run_logger

__all__ = ["search_hyperparameters", "fit_and_evaluate", "search_configurations", "saved_search", "saved_fit",
           "fit_key", "trial_key"]


def fit_key(cell: Cell, seed: int) -> str:
    return f"{cell.cell_id}/seed{seed}"


def trial_key(cell: Cell, trial: int) -> str:
    return f"{cell.cell_id}/trial{trial}"


def _data(features_dir: str, splits: list[str], cell: Cell, device) -> tuple[tuple, torch.Tensor, int, int]:
    parts = [load_split(features_dir, s) for s in splits]
    values, mask, delta = (np.concatenate([p[k] for p in parts]) for k in ("values", "mask", "delta"))
    column = list(parts[0]["label_names"]).index(cell.label)
    y = torch.as_tensor(np.concatenate([p["labels"][:, column] for p in parts]).astype(np.float32), device=device)
    return classifier_inputs(cell.model, values, mask, delta, device), y, values.shape[2], values.shape[1]


def _result_key(run_dir: str, *parts) -> str:
    """Identity of a result: the raw input's sha256 (as DVC tracks it), the split, and the task's parameters."""
    run = RunLayout(run_dir)
    digest = hashlib.sha256(json.loads(run.ingest.read_text())["sha256"].encode())
    digest.update(json.loads(run.split_summary.read_text())["manifest_sha256"].encode())
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
    method = get_method(cell.method)
    defaults = method.default_hyperparameters(cell, training)
    if training.search_budget == 1:
        return [defaults]
    space = {k: v for k, v in method.search_space(cell).items() if k in defaults}
    return sample_configurations(defaults, space, training.search_budget, training.search_seed)


def _search_path(run_dir: str, cell: Cell) -> Path:
    return RunLayout(run_dir).search(cell.cell_id)


def saved_search(run_dir: str, cell: Cell, training: TrainingConfig) -> dict | None:
    """The chosen hyperparameters of a search an earlier attempt of this run finished, else None."""
    return _reuse(_search_path(run_dir, cell), _result_key(run_dir, cell.model_dump(), training.model_dump()), "chosen")


def _fit_path(run_dir: str, cell: Cell, seed: int) -> Path:
    return RunLayout(run_dir).fit_result(cell.cell_id, seed)


def saved_fit(run_dir: str, cell: Cell, hyperparameters: dict, seed: int, training: TrainingConfig) -> dict | None:
    """The result row of a fit an earlier attempt of this run finished, else None."""
    key = _result_key(run_dir, cell.model_dump(), hyperparameters, seed, training.model_dump())
    row = _reuse(_fit_path(run_dir, cell, seed), key)
    return None if row is None else FitRow.model_validate(row).model_dump(exclude_unset=True)


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
    method = get_method(cell.method)
    configs = search_configurations(cell, training)
    trials = []
    if len(configs) == 1 and method.fixed_without_search:
        chosen = configs[0]  # nothing to choose: a fixed, accounted number of epochs (DP-SGD) or steps (ExpM+NF)
    else:
        train = _data(features_dir, ["train"], cell, dev)
        dev_inputs, dev_y, *_ = _data(features_dir, ["dev"], cell, dev)
        for k, hp in enumerate(configs):
            info = method.search_trial(cell, hp, training, privacy, train, (dev_inputs, dev_y), training.search_seed,
                                       reservations.get(trial_key(cell, k)), f"search trial {k}")
            trials.append({"hyperparameters": hp, "dev_auroc": info["dev_auroc"], "epochs": info["epochs"]})
        scores = [t["dev_auroc"] if np.isfinite(t["dev_auroc"]) else -np.inf for t in trials]
        best = trials[int(np.argmax(scores))]
        chosen = method.chosen(best["hyperparameters"], best["epochs"])
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
    run = RunLayout(run_dir)
    run.models.mkdir(exist_ok=True)
    key = _result_key(run_dir, cell.model_dump(), hyperparameters, seed, training.model_dump())
    result_path = _fit_path(run_dir, cell, seed)
    if (saved := _reuse(result_path, key)) is not None:
        run_logger().info("fit %s seed %d: reused the result of an earlier attempt", cell.cell_id, seed)
        return FitRow.model_validate(saved).model_dump(exclude_unset=True)
    share_cores()
    start = time.perf_counter()
    dev = resolve_device(device)
    data = _data(features_dir, ["train", "dev"], cell, dev)
    test_inputs, test_y, *_ = _data(features_dir, ["test"], cell, dev)
    method = get_method(cell.method)
    metrics, info = method.final_fit(cell, hyperparameters, training, privacy, data, (test_inputs, test_y), seed,
                                     reservation, run_dir, run.model(cell.cell_id, seed))
    row = {**cell.model_dump(), "seed": seed, "device": str(dev), **metrics,
           **{k: info.get(k) for k in ("epochs", "epsilon_prv", "epsilon_rdp", "epsilon_pld", "noise_multiplier",
                                        "sample_rate", "steps", "delta", "accountant", "noise_source")},
           "guarantee": guarantee_label(method.guarantee(privacy, training), info.get("epsilon"),
                                        privacy.epsilon_ceiling),
           "fit_seconds": round(time.perf_counter() - start, 2)}
    row = FitRow.model_validate(strict_json(row)).model_dump(exclude_unset=True)  # typed: resume and report read it
    result_path.write_text(strict_dumps({"key": key, "value": row}))  # last: marks the cell as done
    run_logger().info("fit %s seed %d: test AUROC %.3f%s", cell.cell_id, seed, metrics["auroc"],
                      f", epsilon {info['epsilon']:.3g} ({info['accountant']})" if "epsilon" in info else "")
    return row
