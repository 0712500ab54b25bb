"""Benchmark (issue 42): what batching can buy a GRU-D DP-SGD step on this machine, from its matrix products alone.

Issue 42 asks a batched group of K = 12 GRU-D DP-SGD fits to train 4x as fast as the same fits one at a time on 2 CPU
cores. This script measures, in one run and one torch thread (the pipeline's setting: two task runs at once, one
thread each), on batched_grid's records (2,800 synthetic stays of 24 h x 104 variables, expected batch 128):

* ``one_by_one_ms``: a member-step of the single trainer (``train_dp_sgd``, one epoch per member, ghost clipping);
* ``batched_ms``: a member-step of the batched trainer (``train_dp_sgd_batched``, the K members stacked);
* ``products_ms``: a member-step's share of the batched step's large matrix products alone, at the shapes that step
  runs them (K members, the expected batch): the input gates' forward, their input gradient and clipped sum, the
  hidden decay's forward and clipped sum, and the Grams of the ghost norms of both layers; each the faster of one
  batched product and a loop of K products. The hour loop's small products, every elementwise pass, the gathers and
  the noise are left out, so this is a lower bound on the batched step;
* ``non_private_step_ms``: a plain forward and backward of one GRU-D on B and on K x B rows (``per_row_ratio`` near 1:
  the step costs per row, not per step, so there is little per-step overhead for batching to remove).

4x needs ``batched_ms <= one_by_one_ms / 4``; where ``products_ms`` alone exceeds that, no batching of the same
arithmetic reaches it on this machine: only fewer FLOPs would, and those would speed the one-by-one path as much.

    python bench/grud_step_floor.py [--members 12] [--repeats 3]

Prints JSON and writes bench/results/grud_step_floor_<device>.json.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from batched_grid import EPSILONS, _data  # noqa: E402
from privehr.models.classifiers import build_classifier, classifier_inputs  # noqa: E402
from privehr.models.dpsgd.batched import train_dp_sgd_batched  # noqa: E402
from privehr.models.dpsgd.trainer import DPSGDHyperparameters, train_dp_sgd  # noqa: E402
from privehr.models.privacy.randomness import NoiseSource  # noqa: E402
from privehr.models.privacy.release_plan import ReleasePlan  # noqa: E402

HOURS, VARIABLES, HIDDEN = 24, 104, 32


def _best(run, repeats: int) -> float:
    run()  # warm: allocations, MKL's first call
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def _product(a: torch.Tensor, b: torch.Tensor, repeats: int) -> float:
    """Seconds of the K products a[k] @ b[k]: the faster of one bmm and a loop of K mm."""
    return min(_best(lambda: torch.bmm(a, b), repeats), _best(lambda: [x @ y for x, y in zip(a, b)], repeats))


def _products(k: int, batch: int, repeats: int) -> dict[str, float]:
    """Seconds of each large product of one batched GRU-D ghost-clipping step of ``k`` members of ``batch`` records."""
    rows, f, g3, h = batch * HOURS, 2 * VARIABLES, 3 * HIDDEN, HIDDEN
    r = lambda *shape: torch.randn(*shape)  # noqa: E731
    gram = lambda x: _best(lambda: torch.bmm(x, x.transpose(1, 2)), repeats)  # noqa: E731
    return {
        "input_gates_forward": _product(r(k, rows, f), r(k, g3, f).transpose(1, 2), repeats),
        "input_gates_input_gradient": _product(r(k, rows, g3), r(k, g3, f), repeats),
        "input_gates_clipped_sum": _product(r(k, rows, g3).transpose(1, 2), r(k, rows, f), repeats),
        "input_gates_grams": gram(r(k * batch, HOURS, f)) + gram(r(k * batch, HOURS, g3)),
        "hidden_decay_forward": _product(r(k, rows, VARIABLES), r(k, h, VARIABLES).transpose(1, 2), repeats),
        "hidden_decay_clipped_sum": _product(r(k, rows, h).transpose(1, 2), r(k, rows, VARIABLES), repeats),
        "hidden_decay_grams": gram(r(k * batch, HOURS, VARIABLES)) + gram(r(k * batch, HOURS, h)),
    }


def _plain_step(inputs, rows: int, repeats: int) -> float:
    """Seconds of one non-private forward and backward of a GRU-D on ``rows`` records: whether a step's cost is
    per step (dispatch, which batching removes) or per row (which it does not)."""
    model = build_classifier("grud", VARIABLES, HOURS, seed=0, hidden_size=HIDDEN)
    batch = tuple(t[:rows] for t in inputs)

    def step():
        model.zero_grad(set_to_none=True)
        model(*batch).sum().backward()
    return _best(step, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=12)
    parser.add_argument("--stays", type=int, default=2800)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    values, mask, delta, y = _data(args.stays, HOURS, VARIABLES)
    inputs, k = classifier_inputs("grud", values, mask, delta), args.members
    plans = [ReleasePlan.for_epochs(args.stays, args.batch_size, 1, target_epsilon=EPSILONS[i % len(EPSILONS)],
                                    delta=1e-5) for i in range(k)]
    hps = [DPSGDHyperparameters(1e-2, 0.0)] * k
    initial = [build_classifier("grud", VARIABLES, HOURS, seed=i, hidden_size=HIDDEN) for i in range(k)]
    steps = plans[0].steps
    one, batched = [], []
    for r in range(args.repeats):
        noises = [NoiseSource.reproducible("floor", r, i) for i in range(k)]
        start = time.perf_counter()
        for i, model in enumerate(initial):
            train_dp_sgd(copy.deepcopy(model), inputs, y, hps[i], plans[i], noises[i])
        one.append((time.perf_counter() - start) / (k * steps))
        noises = [NoiseSource.reproducible("floor", r, i) for i in range(k)]
        start = time.perf_counter()
        train_dp_sgd_batched([copy.deepcopy(m) for m in initial], inputs, y, hps, plans, noises)
        batched.append((time.perf_counter() - start) / (k * steps))
    products = _products(k, args.batch_size, args.repeats)
    plain = {"one_batch": _plain_step(inputs, args.batch_size, args.repeats),
             "members_batches": _plain_step(inputs, k * args.batch_size, args.repeats)}
    one_ms, batched_ms = 1e3 * statistics.median(one), 1e3 * statistics.median(batched)
    products_ms = 1e3 * sum(products.values()) / k
    result = {
        "bench": "grud_step_floor", "device": "cpu", "torch": torch.__version__, "threads": 1,
        "processor": platform.processor() or platform.machine(), "members": k, "steps": steps,
        "batch_size": args.batch_size, "stays": args.stays, "repeats": args.repeats,
        "one_by_one_ms": round(one_ms, 2), "batched_ms": round(batched_ms, 2),
        "speedup": round(one_ms / batched_ms, 3), "products_ms": round(products_ms, 2),
        "products_share_of_batched": round(products_ms / batched_ms, 3),
        "four_x_budget_ms": round(one_ms / 4, 2), "largest_speedup_from_batching": round(one_ms / products_ms, 3),
        "one_by_one_ms_per_repeat": [round(1e3 * s, 2) for s in one],
        "batched_ms_per_repeat": [round(1e3 * s, 2) for s in batched],
        "products_seconds": {name: round(s, 5) for name, s in products.items()},
        "non_private_step_ms": {"rows": [args.batch_size, k * args.batch_size],
                                "ms": [round(1e3 * plain["one_batch"], 2), round(1e3 * plain["members_batches"], 2)],
                                "per_row_ratio": round(plain["members_batches"] / (k * plain["one_batch"]), 3)},
    }
    print(json.dumps(result, indent=2))
    out = ROOT / "bench" / "results" / "grud_step_floor_cpu.json"
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
