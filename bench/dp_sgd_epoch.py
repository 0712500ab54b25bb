"""Benchmark: epoch time of DP-SGD over non-private training, logistic regression and GRU-D, one run.

Same data (N stays x 24 h x 104 variables, ~11 % observed, as the demo cohort), same model, same
expected batch size. Non-private: shuffled minibatches as models/classifiers/training.py takes them. DP-SGD:
Poisson sampling, per-sample clipping and noise at a fixed sigma (calibration excluded: it happens
once per run), by privehr's ghost clipping (models/dpsgd/ghost_clipping.py, the trainer's default) and by
Opacus (hooks, functorch), each as models/dpsgd/trainer.py runs it. The modes interleave in every repeat.
Prints JSON and writes bench/results/dp_sgd_epoch_<device>.json. Goal (issue 17): GRU-D ghost
DP-SGD epoch <= 1.3x the non-private one.

    python bench/dp_sgd_epoch.py [--stays 1000] [--batch-size 256] [--repeats 5] [--device auto]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from privehr.models.classifiers import build_classifier  # noqa: E402
from privehr.models.device import resolve_device  # noqa: E402
from privehr.models.classifiers.losses import binary_loss  # noqa: E402


def _data(n, hours, variables, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(n, hours, variables, generator=g) < 0.11).float()
    values = torch.randn(n, hours, variables, generator=g) * mask
    delta = torch.randint(0, 24, (n, hours, variables), generator=g).float() * (1 - mask)
    y = (torch.rand(n, generator=g) < 0.1).float()
    return (values, mask, delta), y


def _inputs(model_name, x):
    return (torch.cat([x[1], x[0], x[2] / 100], -1).reshape(len(x[0]), -1),) if model_name == "logistic_regression" else x


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


MODES = ("non_private", "ghost", "hooks", "functorch")


def make_trainer(model_name, mode, x, y, batch_size, device):
    """A closure that runs one epoch of training in ``mode`` (one of MODES) and returns its seconds."""
    import itertools

    from privehr.models.dpsgd import trainer as dp_sgd
    from privehr.models.privacy.randomness import NoiseSource
    from privehr.models.privacy.release_plan import ReleasePlan

    model = build_classifier(model_name, x[0].shape[2], x[0].shape[1], seed=0, hidden_size=32).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inputs = tuple(t.to(device) for t in _inputs(model_name, x))
    y = y.to(device)
    n = len(y)
    plan = ReleasePlan.for_noise(n, batch_size / n, 10 ** 6, noise_multiplier=1.0, max_grad_norm=1.0, delta=1e-5)
    loss_fn = binary_loss("bce")
    if mode == "non_private":
        generator = torch.Generator().manual_seed(0)

        def run_epoch():
            order = torch.randperm(n, generator=generator).to(device)
            for start in range(0, n, batch_size):
                idx = order[start:start + batch_size]
                optimizer.zero_grad(set_to_none=True)
                loss_fn(model(*(t[idx] for t in inputs)), y[idx]).backward()
                optimizer.step()
    else:
        steps = (dp_sgd._ghost_steps(model, inputs, y, optimizer, plan, NoiseSource.secret(), "bce")
                 if mode == "ghost" else
                 dp_sgd._opacus_steps(model, inputs, y, optimizer, plan, NoiseSource.secret(), "bce", mode, []))

        def run_epoch():
            for _ in itertools.islice(steps, plan.steps_per_epoch):
                pass

    def epoch() -> float:
        _sync(device)
        start = time.perf_counter()
        run_epoch()
        _sync(device)
        return time.perf_counter() - start

    return epoch


def epoch_times(model_name, x, y, batch_size, repeats, device) -> dict[str, list[float]]:
    """Epoch times per mode, the modes interleaved in every repeat so that machine noise hits all alike."""
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    modes = MODES
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus's secure-RNG notice
        trainers = {m: make_trainer(model_name, m, x, y, batch_size, device) for m in modes}
    for trainer in trainers.values():
        trainer()  # warm-up
    times = {m: [] for m in modes}
    for _ in range(repeats):
        for mode in modes:
            times[mode].append(trainers[mode]())
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stays", type=int, default=1000)
    parser.add_argument("--variables", type=int, default=104)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved epochs per mode after a warm-up")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    device = resolve_device(args.device)
    x, y = _data(args.stays, 24, args.variables, device)
    result = {"benchmark": "dp_sgd_epoch", "device": str(device), "threads": torch.get_num_threads(),
              "stays": args.stays, "hours": 24, "variables": args.variables, "batch_size": args.batch_size,
              "timing": "median of interleaved epochs after a warm-up, seconds", "repeats": args.repeats,
              "models": {}}
    for model_name in ("logistic_regression", "grud"):
        times = epoch_times(model_name, x, y, args.batch_size, args.repeats, device)
        t = {mode: statistics.median(v) for mode, v in times.items()}
        result["models"][model_name] = {"epoch_s": t, "epoch_s_all": times,
                                        "dp_over_non_private": t["ghost"] / t["non_private"],
                                        "hooks_over_non_private": t["hooks"] / t["non_private"],
                                        "functorch_over_non_private": t["functorch"] / t["non_private"],
                                        "ghost_speedup_vs_hooks": t["hooks"] / t["ghost"]}
    result["goal"] = "grud dp_over_non_private (ghost clipping, the default) <= 1.3"
    result["goal_met"] = result["models"]["grud"]["dp_over_non_private"] <= 1.3
    out = ROOT / "bench" / "results" / f"dp_sgd_epoch_{device.type}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
