"""Benchmark: throughput of the training grid's fan-out on threads, processes and a local Dask cluster,
measured in one run (issue 8).

    python bench/grid_throughput.py [--stays 1000] [--workers 2] [--seeds 2]

The same privehr-pipeline run (a generated extract; logistic regression and GRU-D, non-private and
DP-SGD at epsilon 1, both labels, ``--seeds`` seeds; no ExpM+NF, no synthesis, no DVC) under
ThreadPoolTaskRunner, ProcessPoolTaskRunner and prefect-dask's DaskTaskRunner (a local cluster of
worker processes, one thread each), each with ``--workers`` workers. Reported per runner: wall time
of the whole flow, fits per minute, and whether its results equal the thread pool's (they must:
every draw is seeded: ``privacy.reproducible_noise``, so none of these releases is DP). Runs under a temporary Prefect harness; prints JSON and writes
bench/results/grid_throughput.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stays", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="privehr-throughput-"))
    os.environ.update(PREFECT_HOME=str(tmp / "home"), PREFECT_LOCAL_STORAGE_PATH=str(tmp / "storage"),
                      PREFECT_SERVER_ANALYTICS_ENABLED="false")
    from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner
    from prefect.testing.utilities import prefect_test_harness
    from prefect_dask import DaskTaskRunner

    from privehr.flows.pipeline import pipeline
    from privehr.core.config import PipelineConfig
    from privehr.io.demo_data import write_demo_mimic

    extract = tmp / "all_hourly_data.h5"
    write_demo_mimic(extract, args.stays, seed=0)
    runners = {
        "threads": lambda: ThreadPoolTaskRunner(max_workers=args.workers),
        "processes": lambda: ProcessPoolTaskRunner(max_workers=args.workers),
        "dask": lambda: DaskTaskRunner(cluster_kwargs={"n_workers": args.workers, "threads_per_worker": 1,
                                                       "processes": True}),
    }
    results = {}
    with prefect_test_harness(server_startup_timeout=120):
        for name, runner in runners.items():
            config = PipelineConfig.model_validate({
                "data": {"hdf5_path": str(extract)}, "artifacts_dir": str(tmp / "artifacts"), "run_id": name,
                "versioning": {"dvc": False}, "privacy": {"ledger_path": str(tmp / f"{name}.jsonl"), "reproducible_noise": True},
                "training": {"methods": ["non_private", "dp_sgd"], "seeds": args.seeds,
                             "dp_sgd": {"epsilons": [1.0], "epochs": 3}, "non_private": {"max_epochs": 5}}})
            start = time.perf_counter()
            summary = pipeline.with_options(task_runner=runner())(config)
            wall = time.perf_counter() - start
            results[name] = {"wall_s": round(wall, 1), "fits": summary["runs"],
                             "fits_per_minute": round(60 * summary["runs"] / wall, 2), "rows": summary["results"]}
            print(name, results[name]["wall_s"], "s", flush=True)
    reference = results["threads"]["rows"]
    out = {"stays": args.stays, "workers": args.workers, "cpus": os.cpu_count(), "python": platform.python_version(),
           "runners": {k: {**{m: v[m] for m in ("wall_s", "fits", "fits_per_minute")},
                           "same_results_as_threads": v["rows"] == reference,
                           "speed_vs_threads": round(results["threads"]["wall_s"] / v["wall_s"], 2)}
                       for k, v in results.items()}}
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / "grid_throughput.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
