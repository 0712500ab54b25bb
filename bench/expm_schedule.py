"""Benchmark: does ExpM+NF's flow follow its target? Its rows on a features run under two training schedules.

References:
    Bridges, Tombs, Stanley (2023). Are Normalizing Flows the Key to Unlocking the Exponential Mechanism?
    arXiv:2311.09200.

The grid's ExpM+NF method (``create_method("expm_nf")``, logistic regression, the squared-error utility with L1
weight lambda) is fitted on a features run's train + dev stays and its ``eval_samples`` draws scored on test, at
each eps~, under:

* ``short``: the schedule before issue 29 (80 Adam steps, lr 3e-3, base sigma 0.01);
* ``default``: ``ExpMNFConfig()``'s (400 steps, lr 3e-2, base sigma 1);
* ``long`` (``--long``): 2,000 steps at lr 3e-2 from base sigma 0.01, the reference the default is checked against.

Per row: the draws' median test AUROC and quartiles, the posterior-predictive AUROC, the fit gap (spread of
log q - eps~ u / 2s over the draws), the final reverse-KL estimate (up to log Z: lower is closer to the target),
the flow's median per-weight scale (base sigma times exp(log_scale)) beside the width the L1 term alone gives the
target in a direction the data does not constrain (a Laplace of scale 2 s / (eps~ lambda)), and seconds a fit.
One flow per cell (seed 0): no privacy claim depends on it; the noise of the DP methods is not involved.

    python bench/expm_schedule.py --features PATH/intermediate [--labels mort_icu los_3] [--epsilons 0.1 1 10]
                                  [--long] [--out bench/results/expm_schedule_demo.json]

``--features``: the ``intermediate`` folder of a run that made features (``privehr run`` of the demo extract, or
``bench/dp_expm.py``'s feature runs).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from privehr.core.config import Cell, ExpMNFConfig, PrivacyConfig, TrainingConfig  # noqa: E402
from privehr.models.methods import FitSpec, create_method  # noqa: E402
from privehr.models.privacy.randomness import NoiseSource  # noqa: E402
from privehr.tasks.train import _data  # noqa: E402

SCHEDULES = {"short": {"steps": 80, "learning_rate": 3e-3, "base_sigma": 0.01},
             "default": {k: getattr(ExpMNFConfig(), k) for k in ("steps", "learning_rate", "base_sigma")},
             "long": {"steps": 2000, "learning_rate": 3e-2, "base_sigma": 0.01}}


def run_cell(features: str, label: str, epsilon: float, schedule: dict) -> dict:
    method = create_method("expm_nf", TrainingConfig(), PrivacyConfig())
    cell = Cell(label=label, model="logistic_regression", method="expm_nf", loss="l2", target_epsilon=epsilon)
    train, test = _data(features, ["train", "dev"], cell, "cpu"), _data(features, ["test"], cell, "cpu")
    hp = method.default_hyperparameters(cell) | schedule
    start = time.perf_counter()
    release = method.fit(FitSpec(cell, hp), train, None, NoiseSource.secret())
    metrics = method.evaluate(release, test.inputs, test.y).metrics
    seconds = time.perf_counter() - start
    flow = release.state_["flow"]
    scale = float((flow["log_scale"].exp() * hp["base_sigma"]).median())
    return {"label": label, "epsilon_tilde": epsilon, **schedule, "train_stays": int(train.y.numel()),
            "positive_share": round(float(train.y.mean()), 4),
            **{k: round(metrics[k], 4) for k in ("auroc", "auroc_q25", "auroc_q75", "auroc_bayes", "gap_std",
                                                 "final_loss")},
            "weight_scale_median": round(scale, 3), "prior_laplace_scale": round(2 / (epsilon * hp["l1"]), 3),
            "seconds": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", required=True, help="a run's intermediate folder with features")
    parser.add_argument("--labels", nargs="+", default=["mort_icu", "los_3"])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 1.0, 10.0])
    parser.add_argument("--long", action="store_true", help="add the 2,000-step reference schedule")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "expm_schedule_demo.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    schedules = ["short", "default"] + (["long"] if args.long else [])
    rows = []
    for name in schedules:
        for label in args.labels:
            for epsilon in args.epsilons:
                rows.append({"schedule": name, **run_cell(args.features, label, epsilon, SCHEDULES[name])})
                print(json.dumps(rows[-1]), flush=True)
    document = {"features": args.features, "threads": 1, "machine": platform.machine(), "torch": torch.__version__,
                "l1": ExpMNFConfig().l1, "samples_per_step": ExpMNFConfig().samples,
                "eval_samples": ExpMNFConfig().eval_samples, "schedules": {s: SCHEDULES[s] for s in schedules},
                "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
