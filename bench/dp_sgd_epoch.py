"""Benchmark: epoch time of DP-SGD (Opacus, hooks) over non-private training, LR and GRU-D, one run.

Same data (N stays x 24 h x 104 variables, ~11 % observed, as the demo cohort), same model, same
expected batch size; DP-SGD uses Poisson sampling, per-sample clipping and noise at a fixed sigma
(calibration excluded: it happens once per run). Also the functorch mode of Opacus for reference.
Prints JSON and writes bench/results/dp_sgd_epoch.json. Goal (issue 4): GRU-D ratio <= 2.

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

import models.grad_samplers  # noqa: E402,F401  (the closed-form rule for GRU-D's input decay)
from models.classifiers import build_classifier  # noqa: E402
from models.device import resolve_device  # noqa: E402
from models.losses import binary_loss  # noqa: E402


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


def make_trainer(model_name, mode, x, y, batch_size, device):
    """A closure that runs one epoch of training in ``mode`` (non_private, hooks or functorch)."""
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = build_classifier(model_name, x[0].shape[2], x[0].shape[1], seed=0, hidden_size=32).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(TensorDataset(*_inputs(model_name, x), y), batch_size=batch_size, shuffle=True)
    if mode != "non_private":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, optimizer, loader = PrivacyEngine().make_private(
                module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=1.0, max_grad_norm=1.0,
                poisson_sampling=True, grad_sample_mode=mode)
    loss_fn = binary_loss("bce")

    def epoch() -> float:
        _sync(device)
        start = time.perf_counter()
        for *inputs, target in loader:
            inputs, target = [t.to(device) for t in inputs], target.to(device)
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(*inputs), target).backward()
            optimizer.step()
        _sync(device)
        return time.perf_counter() - start

    return epoch


def epoch_times(model_name, x, y, batch_size, repeats, device) -> dict[str, list[float]]:
    """Epoch times per mode, the modes interleaved in every repeat so that machine noise hits all alike."""
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    modes = ("non_private", "hooks", "functorch")
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
                                        "dp_over_non_private": t["hooks"] / t["non_private"],
                                        "functorch_over_non_private": t["functorch"] / t["non_private"]}
    result["goal"] = "grud dp_over_non_private <= 2"
    result["goal_met"] = result["models"]["grud"]["dp_over_non_private"] <= 2
    out = ROOT / "bench" / "results" / f"dp_sgd_epoch_{device.type}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
