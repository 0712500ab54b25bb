"""Benchmark: what the floating-point-safe noise costs, and the DP noise paths on this device.

    python bench/secure_noise.py [--device auto] [--repeats 5]

1. Seconds per DP-SGD step of GRU-D by Opacus's hooks (the demo's shape: 24 h x 104 variables, hidden
   32, expected batch 128) with Opacus's plain noise (one Gaussian per coordinate) and with the secure-mode noise
   privehr uses (four Gaussians summed, Holohan and Braghin 2021), interleaved, medians; and the same
   for the DP-NF ghost-clipping step (the MAF shape of Su et al. 2023).
2. On the device: two releases from OS entropy differ, two reproducible ones are identical, and the
   trainers' accounting checks pass (they raise otherwise).

Prints JSON and writes ``bench/results/secure_noise_<device>.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from privehr.models.classifiers import build_classifier, classifier_inputs  # noqa: E402
from privehr.models.device import resolve_device  # noqa: E402
from privehr.models.dpsgd.density import DensityHyperparameters, train_density  # noqa: E402
from privehr.models.dpsgd.trainer import DPSGDHyperparameters, train_dp_sgd  # noqa: E402
from privehr.models.nf.maf import MAF  # noqa: E402
from privehr.models.privacy.randomness import NoiseSource  # noqa: E402
from privehr.models.privacy.release_plan import ReleasePlan  # noqa: E402


def _grud_data(n: int, device):
    g = torch.Generator().manual_seed(0)
    values = torch.randn(n, 24, 104, generator=g).numpy()
    mask = (torch.rand(n, 24, 104, generator=g) < 0.3).float().numpy()
    delta = torch.rand(n, 24, 104, generator=g).numpy() * 10
    y = (torch.rand(n, generator=g) < 0.1).float().to(device)
    return classifier_inputs("grud", values, mask, delta, device), y


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten().cpu() for p in model.parameters()])


def _dp_sgd_step_seconds(inputs, y, plan, secure: bool, device) -> float:
    import privehr.models.dpsgd.trainer as dp_sgd

    model = build_classifier("grud", 104, 24, seed=0, hidden_size=32).to(device)
    original = dp_sgd.make_private_poisson

    def plain(*args, **kwargs):
        out = original(*args, **kwargs)
        out[2].secure_mode = False  # Opacus's ordinary noise: one Gaussian per coordinate
        return out

    dp_sgd.make_private_poisson = original if secure else plain
    try:
        start = time.perf_counter()
        train_dp_sgd(model, inputs, y, DPSGDHyperparameters(), plan, NoiseSource.secret(), grad_sample_mode="hooks")
        if device.type == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - start) / plan.steps
    finally:
        dp_sgd.make_private_poisson = original


def _dp_nf_step_seconds(x, plan, secure: bool, device) -> float:
    import privehr.models.dpsgd.noisy_step as noisy_step  # the noise of privehr's own DP-SGD steps (ghost clipping)

    original = noisy_step.gaussian_noise
    if not secure:
        noisy_step.gaussian_noise = lambda shape, std, generator, device=None, dtype=torch.float32: torch.normal(
            0.0, std, size=tuple(shape), generator=generator, device=device, dtype=dtype)
    try:
        torch.manual_seed(0)
        flow = MAF(19, 15, 200, 1).to(device)
        start = time.perf_counter()
        train_density(flow, x, DensityHyperparameters(), plan, NoiseSource.secret())
        if device.type == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - start) / plan.steps
    finally:
        noisy_step.gaussian_noise = original


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    device = resolve_device(args.device)

    inputs, y = _grud_data(1280, device)
    sgd_plan = ReleasePlan.for_epochs(1280, 128, 1, target_epsilon=1.0, delta=1e-5)
    x = torch.randn(62, 19, generator=torch.Generator().manual_seed(1)).to(device)
    nf_plan = ReleasePlan.for_noise(62, 0.5, 40, noise_multiplier=2.0, delta=1e-5)
    times = {k: [] for k in ("dp_sgd_plain", "dp_sgd_secure", "dp_nf_plain", "dp_nf_secure")}
    _dp_sgd_step_seconds(inputs, y, sgd_plan, True, device)  # warm-up
    _dp_nf_step_seconds(x, nf_plan, True, device)
    for _ in range(args.repeats):  # interleaved, so drift hits every mode alike
        for secure in (False, True):
            times[f"dp_sgd_{'secure' if secure else 'plain'}"].append(
                _dp_sgd_step_seconds(inputs, y, sgd_plan, secure, device))
            times[f"dp_nf_{'secure' if secure else 'plain'}"].append(_dp_nf_step_seconds(x, nf_plan, secure, device))
    median = {k: statistics.median(v) for k, v in times.items()}

    def release(noise: NoiseSource) -> torch.Tensor:
        small_inputs, small_y = tuple(t[:256] for t in inputs), y[:256]
        plan = ReleasePlan.for_epochs(256, 64, 1, target_epsilon=1.0, delta=1e-5)
        model = build_classifier("grud", 104, 24, seed=0, hidden_size=8).to(device)
        return _flat(train_dp_sgd(model, small_inputs, small_y, DPSGDHyperparameters(), plan, noise)[0])

    def flow_release(noise: NoiseSource) -> torch.Tensor:
        torch.manual_seed(0)
        flow = MAF(19, 2, 16, 1).to(device)
        train_density(flow, x, DensityHyperparameters(), nf_plan, noise)
        return _flat(flow)

    checks = {}
    for name, fn in (("dp_sgd", release), ("dp_nf", flow_release)):
        checks[f"{name}_os_entropy_releases_differ"] = not torch.equal(fn(NoiseSource.secret()), fn(NoiseSource.secret()))
        checks[f"{name}_reproducible_releases_equal"] = torch.equal(fn(NoiseSource.reproducible("bench", 1)),
                                                                   fn(NoiseSource.reproducible("bench", 1)))
    out = {"device": str(device), "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
           "torch": torch.__version__, "threads": torch.get_num_threads(), "repeats": args.repeats,
           "seconds_per_step": median,
           "secure_over_plain": {"dp_sgd_grud": median["dp_sgd_secure"] / median["dp_sgd_plain"],
                                 "dp_nf_maf": median["dp_nf_secure"] / median["dp_nf_plain"]},
           "checks": checks}
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / f"secure_noise_{device.type}.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    if not all(checks.values()):
        sys.exit("a noise check failed")


if __name__ == "__main__":
    main()
