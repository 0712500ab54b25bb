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

    python bench/batched_grid.py [--stays 2800] [--members 12] [--model grud] [--epochs 5] [--repeats 1]
                                 [--device auto]

Prints JSON and writes bench/results/batched_grid_<model>_<device>.json.
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


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stays", type=int, default=2800, help="training records (the demo: about 2,800)")
    parser.add_argument("--members", type=int, default=12, help="releases in the group (demo: 4 epsilons x 3 seeds)")
    parser.add_argument("--model", default="grud", choices=["grud", "logistic_regression"])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--hidden-size", type=int, default=32)
    parser.add_argument("--engines", nargs="+", default=["ghost", "functorch"], choices=["ghost", "functorch"],
                        help="the batched trainer's per-sample engines to time")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device = resolve_device(args.device)
    torch.manual_seed(0)
    values, mask, delta, y = _data(args.stays, 24, 104)
    inputs = classifier_inputs(args.model, values.numpy(), mask.numpy(), delta.numpy(), device)
    y = y.to(device)
    plans, hps = [], []
    for k in range(args.members):
        plans.append(ReleasePlan.for_epochs(args.stays, args.batch_size, args.epochs,
                                            target_epsilon=EPSILONS[k % len(EPSILONS)], delta=1e-5))
        hps.append(DPSGDHyperparameters(1e-2, 0.0))
    initial = [build_classifier(args.model, 104, 24, seed=k, hidden_size=args.hidden_size).to(device)
               for k in range(args.members)]
    # warm-up (CUDA context, kernels, lazy imports) of both paths, not timed
    warm = ReleasePlan.for_epochs(256, 64, 1, target_epsilon=1.0, delta=1e-5)
    warm_inputs = tuple(t[:256] for t in inputs)
    for k in range(2):
        train_dp_sgd(copy.deepcopy(initial[k]), warm_inputs, y[:256], hps[k], warm, NoiseSource.reproducible("w", k))
    for engine in args.engines:
        train_dp_sgd_batched([copy.deepcopy(m) for m in initial[:2]], warm_inputs, y[:256], hps[:2], [warm, warm],
                             [NoiseSource.reproducible("w", k) for k in range(2)], per_sample=engine)
    modes = ["one_by_one"] + [f"batched_{e}" for e in args.engines]
    timings = {m: [] for m in modes}
    difference = {m: 0.0 for m in modes[1:]}
    for r in range(args.repeats):
        trained = {}
        for mode in modes:  # every mode from the same noise streams
            noises = [NoiseSource.reproducible("bench", r, k) for k in range(args.members)]
            _sync(device)
            start = time.perf_counter()
            if mode == "one_by_one":
                trained[mode] = [train_dp_sgd(copy.deepcopy(m), inputs, y, hps[k], plans[k], noises[k])[0]
                                 for k, m in enumerate(initial)]
            else:
                trained[mode] = [m for m, _ in train_dp_sgd_batched([copy.deepcopy(m) for m in initial], inputs, y,
                                                                    hps, plans, noises,
                                                                    per_sample=mode.removeprefix("batched_"))]
            _sync(device)
            timings[mode].append(time.perf_counter() - start)
        for mode in modes[1:]:
            difference[mode] = max(difference[mode], *(float((a - b).detach().abs().max())
                                                       for s, b_ in zip(trained["one_by_one"], trained[mode])
                                                       for a, b in zip(s.parameters(), b_.parameters())))
    medians = {m: statistics.median(v) for m, v in timings.items()}
    result = {
        "model": args.model, "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "cpu_threads": torch.get_num_threads(), "stays": args.stays, "members": args.members,
        "epochs": args.epochs, "batch_size": args.batch_size, "steps_per_member": [p.steps for p in plans],
        "repeats": args.repeats, "seconds": {m: [round(v, 3) for v in vs] for m, vs in timings.items()},
        "median_s": {m: round(v, 3) for m, v in medians.items()},
        "speedup_vs_one_by_one": {m: round(medians["one_by_one"] / medians[m], 2) for m in modes[1:]},
        "max_weight_difference_vs_one_by_one": difference, "torch": torch.__version__,
    }
    print(json.dumps(result, indent=1))
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"batched_grid_{args.model}_{device.type}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
