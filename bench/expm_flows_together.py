"""Benchmark: ExpM+NF flows of one cell family trained one at a time (``train_expm_nf``) against together
(``train_expm_nf_many``: one pass over the records a step serves every flow), in one run (issue 42).

The family is the demo's: logistic regression on N records of 24 h x 104 variables (7,488 features), the 4 target
epsilons of ``training.expm_nf.epsilons``, the demo's flow settings (Sylvester, 4 layers, 8 draws a step), one torch
thread (the pipeline's share on 2 cores). Both ways run from the same seeds, so the flows must agree; the largest
parameter difference is printed.

    python bench/expm_flows_together.py [--stays 2800] [--steps 100] [--repeats 2] [--threads 1]

Prints JSON and writes bench/results/expm_flows_together_<device>.json.
"""

from __future__ import annotations

import argparse
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

from batched_grid import _data  # noqa: E402
from privehr.core.config import ExpMNFConfig  # noqa: E402
from privehr.models.classifiers import build_classifier, classifier_inputs  # noqa: E402
from privehr.models.expm.batched_utility import BatchedUtility  # noqa: E402
from privehr.models.expm.mechanism import ExpMNFHyperparameters, train_expm_nf, train_expm_nf_many  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stays", type=int, default=2800)
    parser.add_argument("--steps", type=int, default=100, help="flow steps (the demo trains 400)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = ExpMNFConfig()
    values, mask, delta, y = _data(args.stays, 24, 104)
    inputs = classifier_inputs("logistic_regression", values.numpy(), mask.numpy(), delta.numpy(), "cpu")
    utilities = [BatchedUtility(build_classifier("logistic_regression", 104, 24, seed=0), inputs, y, l1=config.l1)
                 for _ in config.epsilons]
    hps = [ExpMNFHyperparameters(epsilon=e, flow=config.flow, layers=config.layers, m=config.m,
                                 reflections=config.reflections, base_sigma=config.base_sigma, affine=config.affine,
                                 samples=config.samples, steps=args.steps, learning_rate=config.learning_rate,
                                 optimizer=config.optimizer, seed=0) for e in config.epsilons]
    seconds = {"one_at_a_time": [], "together": []}
    difference = 0.0
    for _ in range(args.repeats):
        start = time.perf_counter()
        alone = [train_expm_nf(u, hp) for u, hp in zip(utilities, hps)]
        seconds["one_at_a_time"].append(time.perf_counter() - start)
        start = time.perf_counter()
        together = train_expm_nf_many(utilities, hps)
        seconds["together"].append(time.perf_counter() - start)
        difference = max(difference, *(float((p - q).abs().max()) for a, b in zip(alone, together)
                                       for p, q in zip(a.flow.parameters(), b.flow.parameters())))
    medians = {k: statistics.median(v) for k, v in seconds.items()}
    result = {
        "what": "ExpM+NF flows of one family (logistic regression, the demo's epsilons and flow settings) trained one "
                "at a time against together (one utility pass a step for all flows)",
        "device": "cpu", "device_name": platform.processor() or "cpu", "threads": args.threads, "stays": args.stays,
        "features": int(inputs[0].shape[1]), "flows": len(hps), "epsilons": list(config.epsilons), "steps": args.steps,
        "samples_per_step": config.samples, "repeats": args.repeats,
        "seconds": {k: [round(v, 3) for v in vs] for k, vs in seconds.items()},
        "median_s": {k: round(v, 3) for k, v in medians.items()},
        "speedup": round(medians["one_at_a_time"] / medians["together"], 2),
        "max_parameter_difference": difference, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
    }
    print(json.dumps(result, indent=1))
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / "expm_flows_together_cpu.json"
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
