"""Benchmark (issue 42): the grid's fits per second, batched against one at a time, in one run, for every kind of fit
the grid batches and the one it does not:

* DP-SGD, logistic regression and GRU-D (models/dpsgd/batched.py: the members stacked, ghost clipping);
* the DP-trained ExpM flow of logistic regression (models/expm/dp_trained.py, ``train_dp_expm_many``: the flows'
  Poisson batches gathered together, their record norms and clipped sums by factored products);
* non-private final fits, GRU-D and logistic regression (models/classifiers/batched_training.py: a cell's seeds
  stacked, each its own shuffles and AdamW state; the pipeline batches them where this table says it pays).

Each at K = ``--members`` releases per group (the demo's families are 12: 4 epsilons x 3 seeds), as the pipeline runs
them on CPU (``--concurrent 2``: two task runs at once, one torch thread each, one fit or one group per task run). The
DP-SGD rows are bench/batched_grid.py's measurement (same records: 2,800 synthetic stays of 24 h x 104 variables, the
demo's batch size 128 and 5 epochs, sigma calibrated to each member's epsilon); the flows' rows train on the same
records flattened as logistic regression reads them. Both paths draw from the same reproducible noise streams, so the
largest weight difference between them is printed: float rounding only.

    python bench/grid_batch.py [--members 1 4 12 48] [--concurrent 2] [--stays 2800] [--device auto]

Prints JSON and writes bench/results/grid_batch_<device>.json.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from batched_grid import EPSILONS, _measure, _prepare, _sync  # noqa: E402
from privehr.models.classifiers import build_classifier, classifier_inputs  # noqa: E402
from privehr.models.classifiers.batched_training import fit_binary_classifiers_batched  # noqa: E402
from privehr.models.classifiers.training import TrainingHyperparameters, fit_binary_classifier  # noqa: E402
from privehr.models.expm.batched_utility import BatchedUtility  # noqa: E402
from privehr.models.expm.dp_trained import DPExpMHyperparameters, train_dp_expm, train_dp_expm_many  # noqa: E402
from privehr.core.config.training import DPExpMConfig, NonPrivateConfig  # noqa: E402
from privehr.models.privacy.randomness import NoiseSource  # noqa: E402
from privehr.models.privacy.release_plan import ReleasePlan  # noqa: E402


def _timed(device, run) -> tuple[float, object]:
    _sync(device)
    start = time.perf_counter()
    out = run()
    _sync(device)
    return time.perf_counter() - start, out


def _flows(k_members, args, inputs, y, device):
    """The DP-trained ExpM flows of one family at the pipeline's defaults (DPExpMConfig), one at a time against
    together, ``--concurrent`` families at once."""
    c = DPExpMConfig()
    utility = BatchedUtility(build_classifier("logistic_regression", 104, 24, seed=0), inputs, y, l1=c.l1, loss="bce")
    plans = [ReleasePlan.for_epochs(args.stays, c.batch_size, c.epochs, target_epsilon=EPSILONS[k % len(EPSILONS)],
                                    delta=1e-5).clipped_at(c.max_grad_norm) for k in range(k_members)]
    hp = DPExpMHyperparameters(c.temperature, c.learning_rate, c.draws, c.init_scale, c.l1)
    timings, difference = {"one_by_one": [], "batched": []}, 0.0
    for r in range(args.repeats):
        noises = lambda f: [NoiseSource.reproducible("flows", r, f, k) for k in range(k_members)]  # noqa: E731
        with ThreadPoolExecutor(args.concurrent) as pool:
            seconds, alone = _timed(device, lambda: list(pool.map(
                lambda fk: train_dp_expm(utility, hp, plans[fk[1]], noises(fk[0])[fk[1]])[0],
                [(f, k) for f in range(args.concurrent) for k in range(k_members)])))
            timings["one_by_one"].append(seconds)
            seconds, together = _timed(device, lambda: list(pool.map(
                lambda f: train_dp_expm_many(utility, [hp] * k_members, plans, noises(f)), range(args.concurrent))))
            timings["batched"].append(seconds)
        difference = max(difference, *(float((a.shift - b.shift).detach().abs().max())
                                       for a, b in zip(alone[:k_members], together[0])))
    return _summary(k_members, args, timings, {"batched": difference}, [p.steps for p in plans])


def _non_private(k_members, args, inputs, y, device, model="grud"):
    """A cell's non-private final fits (seeds) one at a time against stacked (fit_binary_classifiers_batched), at the
    pipeline's learning rate, weight decay and batch size (NonPrivateConfig) for DP-SGD's 5 epochs (a final fit trains
    the epochs its search chose, without a dev split), ``--concurrent`` cells at once."""
    c = NonPrivateConfig()
    hps = [TrainingHyperparameters(c.learning_rate, c.weight_decay, c.batch_size, 5, c.patience, seed=k)
           for k in range(k_members)]
    initial = [build_classifier(model, 104, 24, seed=k, hidden_size=32).to(device) for k in range(k_members)]
    timings, difference = {"one_by_one": [], "batched": []}, 0.0
    for _ in range(args.repeats):
        with ThreadPoolExecutor(args.concurrent) as pool:
            seconds, alone = _timed(device, lambda: list(pool.map(
                lambda fk: _fit_alone(copy.deepcopy(initial[fk[1]]), inputs, y, hps[fk[1]]),
                [(f, k) for f in range(args.concurrent) for k in range(k_members)])))
            timings["one_by_one"].append(seconds)
            seconds, together = _timed(device, lambda: list(pool.map(
                lambda f: _fit_together([copy.deepcopy(m) for m in initial], inputs, y, hps),
                range(args.concurrent))))
            timings["batched"].append(seconds)
        difference = max(difference, *(float((a - b).detach().abs().max()) for ma, mb in zip(alone, together[0])
                                       for a, b in zip(ma.parameters(), mb.parameters())))
    return _summary(k_members, args, timings, {"batched": difference}, [5] * k_members)


def _fit_alone(model, inputs, y, hp):
    fit_binary_classifier(model, inputs, y, None, None, hp)
    return model


def _fit_together(models, inputs, y, hps):
    fit_binary_classifiers_batched(models, inputs, y, hps)
    return models


def _speedup(row) -> float | None:
    """Batched over one-by-one seconds (batched_grid's rows give it per engine); None where nothing is batched."""
    speedup = row.get("speedup_vs_one_by_one")
    return speedup["batched_ghost"] if isinstance(speedup, dict) else speedup


def _summary(k_members, args, timings, difference, steps):
    medians = {m: statistics.median(v) for m, v in timings.items()}
    fits = k_members * args.concurrent
    out = {"members": k_members, "fits": fits, "seconds": {m: [round(v, 3) for v in vs] for m, vs in timings.items()},
           "fits_per_second": {m: round(fits / v, 3) for m, v in medians.items()}}
    if "batched" in medians:
        out["speedup_vs_one_by_one"] = round(medians["one_by_one"] / medians["batched"], 2)
        out["max_weight_difference_vs_one_by_one"] = difference["batched"]
        out["steps_per_member"] = steps
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", type=int, nargs="+", default=[1, 4, 12, 48])
    parser.add_argument("--concurrent", type=int, default=2)
    parser.add_argument("--stays", type=int, default=2800)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device, (values, mask, delta, y) = _prepare(args)
    inputs = {m: classifier_inputs(m, values.numpy(), mask.numpy(), delta.numpy(), device)
              for m in ("logistic_regression", "grud")}
    sgd = lambda model: SimpleNamespace(stays=args.stays, batch_size=128, epochs=5, model=model,  # noqa: E731
                                        hidden_size=32, concurrent=args.concurrent, repeats=args.repeats)
    _flows(2, SimpleNamespace(**{**vars(args), "stays": 256, "repeats": 1}),  # warm-up, not timed
           tuple(t[:256] for t in inputs["logistic_regression"]), y[:256], device)
    start = time.perf_counter()
    rows = {
        "dp_sgd_logistic_regression": [_measure(k, sgd("logistic_regression"), inputs["logistic_regression"], y,
                                                device, ["ghost"]) for k in args.members],
        "dp_sgd_grud": [_measure(k, sgd("grud"), inputs["grud"], y, device, ["ghost"]) for k in args.members],
        "dp_expm_flow_logistic_regression": [_flows(k, args, inputs["logistic_regression"], y, device)
                                             for k in args.members],
        "non_private_grud": [_non_private(k, args, inputs["grud"], y, device) for k in args.members],
        "non_private_logistic_regression": [_non_private(k, args, inputs["logistic_regression"], y, device,
                                                         "logistic_regression") for k in args.members],
    }
    result = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "cpu_count": os.cpu_count(), "torch_threads_per_task": torch.get_num_threads(),
        "concurrent_task_runs": args.concurrent, "stays": args.stays, "repeats": args.repeats,
        "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "bench_seconds": None, "rows": rows,
        "speedup_at": {name: {str(r["members"]): _speedup(r) for r in sweep} for name, sweep in rows.items()},
    }
    result["bench_seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(result, indent=1))
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"grid_batch_{device.type}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
