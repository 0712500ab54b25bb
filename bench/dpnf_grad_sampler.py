"""Benchmark: one DP-SGD training step of the MAF, privehr's own per-sample path (ghost clipping of the
layers, models/dpsgd/ghost_clipping.py) vs Opacus with privehr's MaskedLinear grad sampler (hooks)
vs Opacus's functorch fallback vs a non-private step, measured in one run (issue 6; goal: own >= 2x
faster than functorch).

    python bench/dpnf_grad_sampler.py [--steps 20] [--repeats 5] [--device auto]

Shapes: the EHR model of Su et al. 2023 (19 attributes, 15 blocks x 200 hidden, batch 31 = q 0.5 of 62) and a
larger table (10 attributes, 5 blocks x 2 x 100 hidden as Waites & Cummings 2021, batch 512). Each mode: Opacus
``train_density`` with Poisson sampling, sigma 1, C 1; median seconds per step after warm-up; the
modes interleave so drift on a noisy machine hits them alike. Prints JSON, writes
bench/results/dpnf_grad_sampler_<device>.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from privehr.models.device import resolve_device  # noqa: E402
from privehr.models.dpsgd.density import DensityHyperparameters, train_density  # noqa: E402
from privehr.models.nf.maf import MAF  # noqa: E402
from privehr.models.privacy.randomness import NoiseSource  # noqa: E402
from privehr.models.privacy.release_plan import ReleasePlan  # noqa: E402

SHAPES = [{"name": "su2023_ehr", "features": 19, "blocks": 15, "hidden": 200, "layers": 1, "n": 62, "batch": 31},
          {"name": "waites2021_lifesci", "features": 10, "blocks": 5, "hidden": 100, "layers": 2, "n": 24000,
           "batch": 512}]


def _timed(shape: dict, mode: str, device: torch.device, steps: int) -> float:
    """Seconds per step of ``steps`` DP-SGD steps (sigma 1, C 1) with ``mode``; the plan is computed before the clock
    starts, so this is the training loop."""
    torch.manual_seed(0)
    flow = MAF(shape["features"], shape["blocks"], shape["hidden"], shape["layers"]).to(device)
    x = torch.randn(shape["n"], shape["features"], generator=torch.Generator().manual_seed(1)).to(device)
    hp = DensityHyperparameters(batch_size=shape["batch"], steps=steps, learning_rate=1e-3, validation_fraction=0.0)
    plan = None if mode == "non_private" else ReleasePlan.for_noise(
        shape["n"], shape["batch"] / shape["n"], steps, noise_multiplier=1.0, delta=1e-5)
    start = time.perf_counter()
    train_density(flow, x, hp, plan, NoiseSource.secret(), grad_sample_mode="ghost" if mode == "non_private" else mode)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20, help="steps per timing")
    parser.add_argument("--repeats", type=int, default=5, help="timings per mode (median reported)")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    device = resolve_device(args.device)
    import warnings

    warnings.filterwarnings("ignore")
    results = []
    modes = ["non_private", "ghost", "hooks", "functorch"]
    for shape in SHAPES:
        for m in modes:  # warm-up (and the cached accounting)
            _timed(shape, m, device, 3)
        times = {m: [] for m in modes}
        for _ in range(args.repeats):  # interleaved, so drift hits every mode alike
            for m in modes:
                times[m].append(_timed(shape, m, device, args.steps))
        median = {m: statistics.median(v) for m, v in times.items()}
        results.append({**shape, "seconds_per_step": median,
                        "own_speedup_vs_functorch": median["functorch"] / median["ghost"],
                        "own_speedup_vs_opacus_hooks": median["hooks"] / median["ghost"],
                        "own_over_non_private": median["ghost"] / median["non_private"],
                        "goal_own_2x_faster_than_functorch": median["functorch"] / median["ghost"] >= 2})
    out = {"device": str(device), "torch": torch.__version__, "cpu": platform.processor() or platform.machine(),
           "threads": torch.get_num_threads(), "steps": args.steps, "results": results}
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / f"dpnf_grad_sampler_{device.type}.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
