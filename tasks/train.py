"""Training-grid tasks: a hyperparameter search per cell, then one fit-and-evaluate per cell and seed.

References:
    Bridges, Tombs, Stanley (2023). Are Normalizing Flows the Key to Unlocking the Exponential Mechanism?
    arXiv:2311.09200.

Search: configurations are trained on train and scored by dev AUROC (non-private runs early-stop on
dev and record the best epoch). Final fits: the chosen configuration on train+dev, evaluated once on
test (Bridges et al. 2023, Appendix D). Every task writes its files into the run directory and returns only
aggregate numbers.

DP hyperparameter selection (``training.tuning: dp``, the default, for DP-SGD cells with ``search_budget > 1``):
each trial's dev AUROC is read off a DP release, its dev scores' per-class histograms with Gaussian noise
(:func:`privehr.models.evaluation.dp_evaluation.noisy_histograms`, ``search_score_epsilon`` each, recorded in the
ledger before the score is used), and the search takes the argmax of those noisy AUROCs. The K trials (DP-SGD on
train), their K scores (Gaussian on dev) and the final fit (DP-SGD on train+dev) are all reserved at the budget
check and composed in the ledger, so the tuned model is DP by composition: the chosen configuration is
post-processing of 2K DP releases. This follows the "tuning is part of the released procedure" rule of Ponomareva
et al. (2023), "How to DP-fy ML: A Practical Guide to Machine Learning with Differential Privacy", JAIR.

The composition bound is looser than the random-repetition bounds for private selection: Liu and Talwar (2019),
"Private Selection from Private Candidates", STOC, and Papernot and Steinke (2022), "Hyperparameter Tuning with
Renyi Differential Privacy", ICLR, show that running each candidate a random (geometric, Poisson, truncated
negative binomial) number of times and releasing only the best costs a small constant multiple of one candidate's
privacy loss, where composition pays for all K candidates. privehr uses composition anyway: every piece is a
Gaussian-type ledger entry that PRV, RDP and PLD compose exactly with the dataset's other releases, whereas the
random-repetition bounds exist only as RDP bounds (dp_accounting's ``RepeatAndSelectDpEvent`` is supported by its
RDP accountant alone), and they need the number of trials itself to be random. ``bench/dp_tuning.py`` prints what
Papernot and Steinke's Poisson bound would cost beside the composition.

Privacy: a DP-SGD fit (final or search trial) trains by the :class:`~privehr.models.privacy.release_plan.ReleasePlan`
that the budget check built and reserved (the same object: a plan is built once per release) with noise from
``NoiseSource.for_release``, and enters the ledger as soon as it is trained, before its model is written
anywhere (:func:`privehr.io.ledger.record_release`); non-private and ExpM+NF fits enter it the same way,
as releases without a DP guarantee. A final fit's model file is serialised before its release is recorded, and the
entry binds the file's sha256; exactly those bytes are then written (and a release bundle ships them unchanged).
How each method trains, and what each of its releases is, lives in its
:class:`~privehr.models.methods.TrainingMethod`, which is pure: these tasks do the ledger and the files.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from prefect import task

from privehr.core.run_layout import RunLayout
from privehr.core.config import Cell, PrivacyConfig, TrainingConfig
from privehr.core.records import FitRow
from privehr.core.strict_json import strict_dumps, strict_json
from privehr.io.ledger import record_release
from privehr.models.classifiers import classifier_inputs
from privehr.models.device import resolve_device
from privehr.models.classifiers.hyperparameter_search import sample_configurations
from privehr.models.evaluation.dp_evaluation import metrics_from_histograms, noisy_histograms
from privehr.models.methods import CellData, FitSpec, Release, TrainingMethod, create_method
from privehr.models.privacy.ledger import guarantee_label
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import Reserved
from privehr.tasks.compute import share_cores
from privehr.tasks.evaluation import save_predictions
from privehr.tasks.features import load_split
from privehr.tasks.progress import progress_artifact
from privehr.tasks.run_directory import read_summary
from privehr.tasks.run_logging import run_logger

__all__ = ["search_hyperparameters", "fit_and_evaluate", "fit_group", "batching", "search_configurations",
           "saved_search", "saved_fit", "fit_key", "trial_key", "search_score_key", "SCORE_RESAMPLES"]

#: interval resamples of a trial's DP dev score: the search reads the point estimate alone (1 is the least
#: metrics_from_histograms takes; the resampling is public post-processing)
SCORE_RESAMPLES = 1


def fit_key(cell: Cell, seed: int) -> str:
    return f"{cell.cell_id}/seed{seed}"


def trial_key(cell: Cell, trial: int) -> str:
    return f"{cell.cell_id}/trial{trial}"


def search_score_key(cell: Cell, trial: int) -> str:
    """The reservation key of search trial ``trial``'s DP dev score (``training.tuning: dp``)."""
    return f"{cell.cell_id}/search-score{trial}"


def _data(features_dir: str, splits: list[str], cell: Cell, device) -> CellData:
    parts = [load_split(features_dir, s) for s in splits]
    values, mask, delta = (np.concatenate([p[k] for p in parts]) for k in ("values", "mask", "delta"))
    column = list(parts[0]["label_names"]).index(cell.label)
    y = torch.as_tensor(np.concatenate([p["labels"][:, column] for p in parts]).astype(np.float32), device=device)
    return CellData(classifier_inputs(cell.model, values, mask, delta, device), y, values.shape[2], values.shape[1])


def _method(cell: Cell, training: TrainingConfig, privacy: PrivacyConfig) -> TrainingMethod:
    return create_method(cell.method, training, privacy, progress_artifact)


def _model_file(release: Release, spec: FitSpec, data: CellData) -> bytes:
    """The model file's bytes: the release's state and, for a classifier, the architecture a scorer rebuilds it by
    (what a release bundle needs besides the weights)."""
    state = release.state_
    if "state_dict" in state:
        state = {**state, "architecture": {"model": spec.cell.model, "n_variables": data.n_variables,
                                           "n_hours": data.n_hours,
                                           "hidden_size": spec.hyperparameters.get("hidden_size", 32)}}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def _write_model(path: Path, payload: bytes) -> None:
    path.write_bytes(payload)


def _fit(method: TrainingMethod, spec: FitSpec, data: CellData, reserved: Reserved | None, privacy: PrivacyConfig,
         saved: bool = False) -> tuple[Release, bytes | None]:
    """Train one release by its reserved plan and enter it in the ledger at once, before anything is saved; a
    ``saved`` fit's model file is serialised first and its entry binds the file's sha256 (returned: the bytes to
    write)."""
    noise = NoiseSource.for_release(privacy.reproducible_noise, spec.cell.cell_id, spec.what, spec.seed)
    release = method.fit(spec, data, reserved.plan if reserved else None, noise)
    payload = _model_file(release, spec, data) if saved else None
    if reserved is not None:
        entry = release.entry if payload is None else replace(release.entry,
                                                              sha256=hashlib.sha256(payload).hexdigest())
        release.ledger_id = record_release(privacy.ledger_path, reserved.reservation, entry).release
    return release, payload


def _result_key(run_dir: str, *parts) -> str:
    """Identity of a result: the raw input's sha256 (as DVC tracks it), the split, and the task's parameters."""
    digest = hashlib.sha256(read_summary(run_dir, "ingest").sha256.encode())
    digest.update(read_summary(run_dir, "split_summary").manifest_sha256.encode())
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
    method = create_method(cell.method, training)
    defaults = method.default_hyperparameters(cell)
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


def _dp_score(method: TrainingMethod, release, held_out: CellData, cell: Cell, k: int, training: TrainingConfig,
              privacy: PrivacyConfig, reserved: Reserved | None, bins: int | None) -> dict:
    """Trial ``k``'s DP dev score: its dev scores' noisy per-class histograms (the Gaussian mechanism the budget
    check reserved), entered in the ledger before the score is used, and the AUROC read off them. The exact dev
    AUROC is kept beside it (internal, never used for the choice)."""
    if reserved is None:
        raise RuntimeError(f"{cell.cell_id} search trial {k}: no reservation for its DP dev score")
    if bins is None:
        raise ValueError(f"{cell.cell_id}: a DP search score needs the score bins (release.evaluation_bins)")
    evaluation = method.evaluate(release, held_out.inputs, held_out.y)
    noise = NoiseSource.for_release(privacy.reproducible_noise, cell.cell_id, f"search score {k}", training.search_seed)
    histograms = noisy_histograms(evaluation.probabilities, held_out.y.cpu().numpy().astype(int), bins,
                                  reserved.plan.noise_multiplier, noise.numpy_generator("search score"))
    entry = reserved.plan.ledger_entry(noise.guarantee, f"search score {k}")
    score_release = record_release(privacy.ledger_path, reserved.reservation, entry).release  # before any use
    noisy = metrics_from_histograms(histograms, resamples=SCORE_RESAMPLES).auroc
    return {"noisy_dev_auroc": noisy, "score_release": score_release,
            "exact_dev_auroc_unused": evaluation.metrics["auroc"]}


def _search_note(tuning: str) -> str:
    return {"dp": "chosen by DP dev AUROC alone: each trial's dev scores were released as noisy per-class histograms "
                  "(Gaussian, training.search_score_epsilon each) and recorded in the ledger before use; the trials, "
                  "their scores and the final fit compose in the ledger, so a DP-SGD fit of these hyperparameters is "
                  "DP. exact_dev_auroc_unused is the exact dev AUROC, internal and not used for the choice",
            "exact": "tuned on private dev data by exact dev AUROC: a DP-SGD fit of these hyperparameters is "
                     "recorded as not DP when more than one was tried (training.tuning: exact); other methods carry "
                     "no guarantee anyway",
            "none": "no search: the configuration's defaults"}[tuning]


@task(name="search-hyperparameters")
def search_hyperparameters(features_dir: str, cell: Cell, training: TrainingConfig, privacy: PrivacyConfig,
                           run_dir: str, reserved: dict[str, Reserved], device: str = "auto",
                           score_bins: int | None = None) -> dict:
    """Try ``training.search_budget`` configurations on train/dev; write ``search/<cell>.json``; return the best.

    Each DP-SGD trial is a release on the training split, trained by its reserved plan and recorded. With
    ``training.tuning: dp`` each DP-SGD trial is scored by a DP release too (noisy dev score histograms in
    ``score_bins`` bins, the pipeline's ``release.evaluation_bins``), and the choice reads those noisy AUROCs only;
    otherwise by the exact dev AUROC."""
    out = _search_path(run_dir, cell)
    key = _result_key(run_dir, cell.model_dump(), training.model_dump())
    if (chosen := _reuse(out, key, "chosen")) is not None:
        run_logger().info("search %s: reused the result of an earlier attempt", cell.cell_id)
        return chosen
    share_cores()
    dev = resolve_device(device)
    method = _method(cell, training, privacy)
    configs = search_configurations(cell, training)
    trials = []
    privately = method.scores_search_privately()
    if len(configs) == 1 and method.fixed_without_search:
        chosen = configs[0]  # nothing to choose: a fixed, accounted number of epochs (DP-SGD) or steps (ExpM+NF)
        tuning = "none"
    else:
        tuning = "dp" if privately else "exact"
        held_out = _data(features_dir, ["dev"], cell, dev)
        train = _data(features_dir, ["train"], cell, dev)
        if not privately:  # a DP-scored trial never sees dev during its fit: its only dev read is the DP score
            train = replace(train, dev=(held_out.inputs, held_out.y))
        for k, hp in enumerate(configs):
            spec = FitSpec(cell, hp, training.search_seed, f"search trial {k}")
            release, _ = _fit(method, spec, train, reserved.get(trial_key(cell, k)), privacy)
            info = release.info_
            trial = {"hyperparameters": hp, "epochs": info["epochs"], "release": release.ledger_id}
            if privately:
                trial |= _dp_score(method, release, held_out, cell, k, training, privacy,
                                   reserved.get(search_score_key(cell, k)), score_bins)
            else:
                trial["dev_auroc"] = info["dev_auroc"] if "dev_auroc" in info else \
                    method.evaluate(release, held_out.inputs, held_out.y).metrics["auroc"]
            trials.append(trial)
        criterion = "noisy_dev_auroc" if privately else "dev_auroc"
        scores = [t[criterion] if np.isfinite(t[criterion]) else -np.inf for t in trials]
        best = trials[int(np.argmax(scores))]
        chosen = method.chosen(best["hyperparameters"], best["epochs"])
    out.parent.mkdir(exist_ok=True)
    out.write_text(strict_dumps({"key": key, "cell": cell.model_dump(), "budget": training.search_budget,
                                 "tuning": tuning, "trials": trials, "chosen": chosen, "note": _search_note(tuning)},
                                indent=1))
    run_logger().info("search %s: %d configuration(s) trained, chose %s (%s)", cell.cell_id, len(trials), chosen,
                      {"dp": "by DP dev scores", "exact": "by exact dev AUROC", "none": "defaults"}[tuning])
    return chosen


#: the most fits one batched group holds on CPU under ``training.batched: auto`` (where ``training.group_size`` is 0).
#: Measured with the pipeline's fan-out on 2 CPU cores (bench/batched_grid.py --concurrent 2, 2,800 records): a GRU-D
#: DP-SGD group trained 1.39x as many fits a second as one at a time at 4 members, 1.53x at 12 and 0.78x at 48 (its
#: intermediates outgrow the caches); logistic regression 1.64x, 1.90x and 2.08x. On CUDA a family is one group.
CPU_GROUP_SIZE = 12


def batching(training: TrainingConfig, device: torch.device) -> bool:
    """Whether the grid trains cell families in groups (``training.batched``: auto or on); which methods and cells do
    is theirs to say (:meth:`~privehr.models.methods.TrainingMethod.batches_cell`: DP-SGD on CPU under auto only
    with ghost clipping; ExpM+NF where its utility reads every record), on CPU under auto in groups of at most
    :data:`CPU_GROUP_SIZE` (:func:`group_size`)."""
    return training.batched in ("on", "auto")


def group_size(training: TrainingConfig, device: torch.device) -> int:
    """The most fits one batched group holds (0: a whole family): ``training.group_size`` where set, else
    :data:`CPU_GROUP_SIZE` on CPU under ``auto``."""
    if training.group_size or training.batched != "auto" or device.type == "cuda":
        return training.group_size
    return CPU_GROUP_SIZE


@task(name="fit-and-evaluate")
def fit_and_evaluate(features_dir: str, cell: Cell, hyperparameters: dict, seed: int, training: TrainingConfig,
                     privacy: PrivacyConfig, run_dir: str, reserved: Reserved | None, device: str = "auto") -> dict:
    """Fit on train+dev with the chosen hyperparameters and ``seed``; return test metrics (aggregates only).

    The release trains by the plan the budget check reserved and enters the ledger under that reservation as
    soon as it is trained; the row is saved next to the model, and a resumed run returns it instead of training
    again (an unfinished fit is retrained with fresh noise, as a new release under a new reservation).
    """
    return fit_group.fn(features_dir, [cell], [hyperparameters], [seed], training, privacy, run_dir, [reserved],
                        device)[0]


@task(name="fit-group")
def fit_group(features_dir: str, cells: list[Cell], hyperparameters: list[dict], seeds: list[int],
              training: TrainingConfig, privacy: PrivacyConfig, run_dir: str, reserved: list[Reserved | None],
              device: str = "auto") -> list[dict]:
    """Fit a group of one cell family's final fits (one label, model, method and loss; member k is ``cells[k]``
    with ``hyperparameters[k]`` and ``seeds[k]``) on train+dev, as one batched model where the method batches
    (:meth:`~privehr.models.methods.TrainingMethod.fit_many`), and evaluate each on test; return their rows in order.

    Nothing about a release depends on its group: each trains by its own reserved plan with its own noise, enters
    the ledger under its own reservation as soon as the group is trained (before any model file is written), and
    has its own model file and row. A member an earlier attempt of this run finished is not trained again (its row
    is returned); the others are retrained with fresh noise, each a new release under a new reservation.
    """
    if not (len(cells) == len(hyperparameters) == len(seeds) == len(reserved)):
        raise ValueError("a fit group needs one cell, configuration, seed and reservation per member")
    run = RunLayout(run_dir)
    run.models.mkdir(exist_ok=True)
    keys = [_result_key(run_dir, c.model_dump(), hp, s, training.model_dump())
            for c, hp, s in zip(cells, hyperparameters, seeds)]
    rows: list[dict | None] = [None] * len(cells)
    todo = []
    for k, (cell, seed) in enumerate(zip(cells, seeds)):
        if (saved := _reuse(_fit_path(run_dir, cell, seed), keys[k])) is not None:
            run_logger().info("fit %s seed %d: reused the result of an earlier attempt", cell.cell_id, seed)
            rows[k] = FitRow.model_validate(saved).model_dump(exclude_unset=True)
        elif reserved[k] is None:
            raise RuntimeError(f"{cell.cell_id} seed {seed}: no reservation from the budget check")
        else:
            todo.append(k)
    if not todo:
        return rows
    share_cores()
    start = time.perf_counter()
    dev = resolve_device(device)
    data = _data(features_dir, ["train", "dev"], cells[todo[0]], dev)
    test = _data(features_dir, ["test"], cells[todo[0]], dev)
    method = _method(cells[todo[0]], training, privacy)
    specs = [FitSpec(cells[k], hyperparameters[k], seeds[k]) for k in todo]
    noises = [NoiseSource.for_release(privacy.reproducible_noise, s.cell.cell_id, s.what, s.seed) for s in specs]
    plans = [reserved[k].plan for k in todo]
    together = len(todo) > 1 and batching(training, dev) and method.batches_cell(cells[todo[0]], training, dev.type)
    releases = method.fit_many(specs, data, plans, noises) if together else \
        [method.fit(spec, data, plan, noise) for spec, plan, noise in zip(specs, plans, noises)]
    payloads = []
    for k, spec, release in zip(todo, specs, releases):  # every release into the ledger before any file is written
        payload = _model_file(release, spec, data)
        entry = replace(release.entry, sha256=hashlib.sha256(payload).hexdigest())
        release.ledger_id = record_release(privacy.ledger_path, reserved[k].reservation, entry).release
        payloads.append(payload)
    seconds = (time.perf_counter() - start) / len(todo)
    if len(todo) > 1:
        run_logger().info("fit group %s/%s/%s/%s: %d releases trained %s", spec.cell.label, spec.cell.model,
                          spec.cell.method, spec.cell.loss, len(todo),
                          "as one batched model" if together else "one after another")
    for k, spec, release, payload in zip(todo, specs, releases, payloads):
        rows[k] = _finish_fit(run, spec, release, payload, method, test, keys[k], str(dev), seconds, privacy,
                              time.perf_counter())
    return rows


def _finish_fit(run: RunLayout, spec: FitSpec, release: Release, payload: bytes, method: TrainingMethod,
                test: CellData, key: str, device: str, train_seconds: float, privacy: PrivacyConfig,
                start: float) -> dict:
    """Evaluate a recorded release on test, write its predictions (intermediate/), model file and row; the row last,
    which marks the fit as done."""
    cell, seed = spec.cell, spec.seed
    evaluation = method.evaluate(release, test.inputs, test.y)
    save_predictions(str(run.root), cell, seed, evaluation.probabilities)  # patient-level: intermediate/
    model_path = run.model(cell.cell_id, seed)
    if evaluation.draws is not None:  # every draw's test scores, for the report's box plots
        model_path.with_suffix(".draws.json").write_text(json.dumps(evaluation.draws))
    _write_model(model_path, payload)  # the bytes whose sha256 the release bound
    metrics, info = evaluation.metrics, release.info_
    row = {**cell.model_dump(), "seed": seed, "device": device, **metrics,
           **{k: info.get(k) for k in ("epochs", "epsilon_prv", "epsilon_rdp", "epsilon_pld", "noise_multiplier",
                                        "sample_rate", "steps", "delta", "accountant", "noise_source",
                                        "batch_members")},
           "guarantee": guarantee_label(method.guarantee(), info.get("epsilon"), privacy.epsilon_ceiling),
           "fit_seconds": round(train_seconds + time.perf_counter() - start, 2), "release": release.ledger_id}
    row = FitRow.model_validate(strict_json(row)).model_dump(exclude_unset=True)  # typed: resume and report read it
    _fit_path(str(run.root), cell, seed).write_text(strict_dumps({"key": key, "value": row}))  # last: marks it done
    run_logger().info("fit %s seed %d: test AUROC %.3f%s", cell.cell_id, seed, metrics["auroc"],
                      f", epsilon {info['epsilon']:.3g} ({info['accountant']})" if "epsilon" in info else "")
    return row
