"""What end-to-end DP costs: the same grid with the featurizer's statistics exact, public or DP, and each bundled
model's DP evaluation beside its exact one.

Runs privehr-pipeline three times on one simulated MIMIC-Extract file (``--stays``, seed ``--seed``; not a file
any default was chosen on: the release settings are the config's defaults, fixed before any run) with
``release.featurizer`` exact, public and dp, everything else equal: both labels, LR and GRU-D by DP-SGD at
epsilon 1, ``--seeds`` fits per cell, the record counts released by the geometric mechanism. Reports, per
variant, the median exact test AUROC of each cell (the internal evaluation), and for each bundled model (seed 0)
its DP evaluation (AUROC and its interval) beside its exact AUROC, and the bundle's total epsilon. Writes
``bench/results/end_to_end_dp.json`` and prints it.

    python bench/end_to_end_dp.py [--stays 2000] [--seed 11] [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stays", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=["exact", "public", "dp"], choices=("exact", "public", "dp"))
    args = parser.parse_args()

    from prefect.testing.utilities import prefect_test_harness

    from privehr.core.config import PipelineConfig
    from privehr.flows.pipeline import pipeline
    from privehr.io.demo_data import write_demo_mimic

    tmp = Path(tempfile.mkdtemp(prefix="privehr-e2e-"))
    data = tmp / "all_hourly_data.h5"
    write_demo_mimic(data, n_stays=args.stays, seed=args.seed)
    out = {"stays": args.stays, "data_seed": args.seed, "fits_per_cell": args.seeds, "variants": {}}
    with prefect_test_harness(server_startup_timeout=180):
        for source in args.variants:
            config = PipelineConfig.model_validate({
                "data": {"hdf5_path": str(data)}, "labels": ["mort_icu", "los_3"], "device": "cpu",
                "training": {"methods": ["dp_sgd"], "seeds": args.seeds, "dp_sgd": {"epsilons": [1.0]}},
                "release": {"featurizer": source}, "versioning": {"dvc": False}, "artifacts_dir": str(tmp / "runs"),
                "run_id": source, "privacy": {"ledger_path": str(tmp / f"ledger-{source}.jsonl")}})
            start = time.perf_counter()
            summary = pipeline(config)
            run = Path(summary["run_dir"])
            metrics = json.loads((run / "metrics.json").read_text())
            exact = {p.stem.removesuffix("-seed0"): json.loads(p.read_text())["value"]
                     for p in (run / "models").glob("*-seed0.json")}
            evaluation = json.loads((run / "release" / "evaluation.json").read_text())
            card = json.loads((run / "release" / "card.json").read_text())
            out["variants"][source] = {
                "seconds": round(time.perf_counter() - start, 1),
                "median_test_auroc": {f"{r['label']}-{r['model']}": r["auroc_median"] for r in metrics["results"]},
                "bundle_epsilon_prv": card["privacy"]["epsilon_prv"], "guarantee": card["privacy"]["guarantee"],
                "dp_evaluation": {cell: {"dp_auroc": e["metrics"]["auroc"],
                                         "dp_interval": e["metrics"]["intervals"]["auroc"],
                                         "exact_auroc": exact[cell]["auroc"], "dp_prevalence": e["metrics"]["prevalence"]}
                                  for cell, e in evaluation.items()}}
            print(json.dumps({source: out["variants"][source]}), file=sys.stderr)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"end_to_end_dp{'' if len(args.variants) == 3 else '_' + '_'.join(args.variants)}.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
