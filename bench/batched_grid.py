"""Benchmark: a group of DP-SGD grid fits trained one by one (the single trainer, ghost clipping) against the same
group trained as one batched model (models/dpsgd/batched.py), in one run, on one device (issue 42).

The group is what the demo grid trains per (label, model, loss): ``--members`` releases (its epsilons x seeds), each
with its own plan (sigma calibrated to its epsilon; q and T from the demo's batch size and epochs), on N records of
24 h x 104 variables, ~11 % observed, as the demo cohort. Calibration is excluded (the budget check does it once per
run). Both paths draw from the same reproducible noise streams, so their weights must agree to float rounding; the
largest difference is printed (float32: a few 1e-6 after 110 steps for ghost clipping, whose Grams are the single
trainer's; up to a few 1e-2 for torch.func, whose per-sample gradients round differently and which AdamW amplifies on
near-zero coordinates; in float64 both agree to 1e-12, tests/models/dpsgd/test_batched.py). The modes run in turn in
every repeat. Batched engines: ``ghost`` (the members stacked into one module, models/dpsgd/stacked_layers.py) and
``functorch`` (vmap over members of vmap over records).

    python bench/batched_grid.py [--stays 2800] [--members 12 | --members 1 4 12 48] [--model grud] [--epochs 5]
                                 [--repeats 1] [--device auto] [--concurrent 2] [--engines ghost functorch]

``--concurrent 2`` times the grid as the pipeline runs it on CPU: two task runs at once, one torch thread each, one fit
(one by one) or one family (batched) per task run, two families in all.

Prints JSON and writes bench/results/batched_grid_<model>_<device>.json.
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

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from privehr.models.classifiers import build_classifier, classifier_inputs  # noqa: E402
from privehr.models.device import resolve_device  # noqa: E402
from privehr.models.dpsgd.batched import train_dp_sgd_batched  # noqa: E402
from privehr.models.dpsgd.trainer import DPSGDHyperparameters, train_dp_sgd  # noqa: E402
from privehr.models.privacy.randomness import NoiseSource  # noqa: E402
from privehr.models.privacy.release_plan import ReleasePlan  # noqa: E402

EPSILONS = [0.1, 1.0, 3.5, 10.0]  # the demo grid's


def _data(n, hours, variables, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(n, hours, variables, generator=g) < 0.11).float()
    values = torch.randn(n, hours, variables, generator=g) * mask
    delta = torch.randint(0, 24, (n, hours, variables), generator=g).float() * (1 - mask)
    y = (torch.rand(n, generator=g) < 0.1).float()
    return values, mask, delta, y


def _prepare(args):
    """The device, torch's threads per task run (``--concurrent``) and the synthetic records, labels on the device."""
    device = resolve_device(args.device)
    if args.concurrent > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // args.concurrent))
    torch.manual_seed(0)
    values, mask, delta, y = _data(args.stays, 24, 104)
    return device, (values, mask, delta, y.to(device))


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def _fit_one_by_one(initial, inputs, y, hps, plans, noises):
    return [train_dp_sgd(copy.deepcopy(m), inputs, y, hps[k], plans[k], noises[k])[0] for k, m in enumerate(initial)]


def _fit_batched(initial, inputs, y, hps, plans, noises, engine):
    return [m for m, _ in train_dp_sgd_batched([copy.deepcopy(m) for m in initial], inputs, y, hps, plans, noises,
                                               per_sample=engine)]


def _measure(k_members, args, inputs, y, device, engines):
    """Seconds of each mode (one by one, batched per engine) for ``--concurrent`` families of ``k_members`` fits, and
    the largest weight difference of each batched engine from the one-by-one fits."""
    plans = [ReleasePlan.for_epochs(args.stays, args.batch_size, args.epochs,
                                    target_epsilon=EPSILONS[k % len(EPSILONS)], delta=1e-5) for k in range(k_members)]
    hps = [DPSGDHyperparameters(1e-2, 0.0)] * k_members
    initial = [build_classifier(args.model, 104, 24, seed=k, hidden_size=args.hidden_size).to(device)
               for k in range(k_members)]
    modes = ["one_by_one"] + [f"batched_{e}" for e in engines]
    timings = {m: [] for m in modes}
    difference = {m: 0.0 for m in modes[1:]}
    for r in range(args.repeats):
        trained = {}
        for mode in modes:  # every mode from the same noise streams
            def family(f, mode=mode):
                noises = [NoiseSource.reproducible("bench", r, f, k) for k in range(k_members)]
                if mode == "one_by_one":
                    return _fit_one_by_one(initial, inputs, y, hps, plans, noises)
                return _fit_batched(initial, inputs, y, hps, plans, noises, mode.removeprefix("batched_"))
            _sync(device)
            start = time.perf_counter()
            if args.concurrent == 1:
                trained[mode] = family(0)
            elif mode == "one_by_one":  # the pipeline's fan-out: each fit a task run, concurrent ones at once
                with ThreadPoolExecutor(args.concurrent) as pool:
                    fits = list(pool.map(lambda fk: _fit_one_by_one(
                        [initial[fk[1]]], inputs, y, [hps[fk[1]]], [plans[fk[1]]],
                        [NoiseSource.reproducible("bench", r, fk[0], fk[1])])[0],
                        [(f, k) for f in range(args.concurrent) for k in range(k_members)]))
                trained[mode] = fits[:k_members]
            else:  # one task run per family, concurrent families at once
                with ThreadPoolExecutor(args.concurrent) as pool:
                    trained[mode] = list(pool.map(family, range(args.concurrent)))[0]
            _sync(device)
            timings[mode].append(time.perf_counter() - start)
        for mode in modes[1:]:
            difference[mode] = max(difference[mode], *(float((a - b).detach().abs().max())
                                                       for s, b_ in zip(trained["one_by_one"], trained[mode])
                                                       for a, b in zip(s.parameters(), b_.parameters())))
    medians = {m: statistics.median(v) for m, v in timings.items()}
    fits = k_members * args.concurrent
    return {
        "members": k_members, "fits": fits, "steps_per_member": [p.steps for p in plans],
        "seconds": {m: [round(v, 3) for v in vs] for m, vs in timings.items()},
        "median_s": {m: round(v, 3) for m, v in medians.items()},
        "fits_per_second": {m: round(fits / v, 3) for m, v in medians.items()},
        "speedup_vs_one_by_one": {m: round(medians["one_by_one"] / medians[m], 2) for m in modes[1:]},
        "max_weight_difference_vs_one_by_one": difference,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stays", type=int, default=2800, help="training records (the demo: about 2,800)")
    parser.add_argument("--members", type=int, nargs="+", default=[12],
                        help="releases per group, one measurement each (the demo's family: 4 epsilons x 3 seeds)")
    parser.add_argument("--model", default="grud", choices=["grud", "logistic_regression"])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--hidden-size", type=int, default=32)
    parser.add_argument("--concurrent", type=int, default=1,
                        help="families trained at once, as the pipeline runs them on CPU: that many task threads with "
                             "cores / concurrent torch threads each, one fit (one by one) or one family (batched) per "
                             "task run (the pipeline: 2, tasks/compute.py)")
    parser.add_argument("--engines", nargs="+", default=["ghost", "functorch"], choices=["ghost", "functorch"],
                        help="the batched trainer's per-sample engines to time")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device, (values, mask, delta, y) = _prepare(args)
    inputs = classifier_inputs(args.model, values.numpy(), mask.numpy(), delta.numpy(), device)
    # warm-up (CUDA context, kernels, lazy imports) of both paths, not timed
    warm = ReleasePlan.for_epochs(256, 64, 1, target_epsilon=1.0, delta=1e-5)
    warm_inputs = tuple(t[:256] for t in inputs)
    models = [build_classifier(args.model, 104, 24, seed=k, hidden_size=args.hidden_size).to(device) for k in range(2)]
    hp = DPSGDHyperparameters(1e-2, 0.0)
    _fit_one_by_one(models, warm_inputs, y[:256], [hp] * 2, [warm] * 2,
                    [NoiseSource.reproducible("w", k) for k in range(2)])
    for engine in args.engines:
        _fit_batched(models, warm_inputs, y[:256], [hp] * 2, [warm] * 2,
                     [NoiseSource.reproducible("w", k) for k in range(2)], engine)
    sweep = [_measure(k, args, inputs, y, device, args.engines) for k in args.members]
    result = {
        "model": args.model, "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "cpu_threads": torch.get_num_threads(), "concurrent_families": args.concurrent, "stays": args.stays,
        "epochs": args.epochs, "batch_size": args.batch_size, "repeats": args.repeats,
        "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
    }
    if len(sweep) == 1:  # the single-K layout of the earlier results files
        result.update(sweep[0])
    else:
        result["sweep"] = sweep
    print(json.dumps(result, indent=1))
    name = f"batched_grid_{args.model}_{device.type}" + (f"_x{args.concurrent}" if args.concurrent > 1 else "")
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"{name}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
