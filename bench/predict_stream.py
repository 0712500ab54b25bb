"""``privehr predict`` on a full-size cohort: 34,472 stays (MIMIC-Extract's), wall time and peak memory, streamed (the
default: 4,096 stays at a time) and in one piece (every stay's window in memory at once, as before streaming), in one
run.

The bundle comes from a small pipeline run made here (a 300-stay simulated extract; mortality, GRU-D and logistic
regression by DP-SGD at epsilon 1: what is measured is scoring, not training); the cohort is the benchmarks' simulated
full-size file (bench/generated_extract.py, generated once under bench/data/). Each scoring runs in its own process;
its peak RSS is that process's.

    python bench/predict_stream.py [--stays 34472] [--out bench/results/predict_stream.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generated_extract import generated_extract  # noqa: E402

CONFIG = {"labels": ["mort_icu"], "validation": {"enabled": False}, "versioning": {"dvc": False},
          "training": {"models": ["grud", "logistic_regression"], "methods": ["dp_sgd"], "seeds": 1,
                       "dp_sgd": {"epsilons": [1.0], "epochs": 1}}}
# peak RSS from /proc/self/status's VmHWM, which exec resets (ru_maxrss keeps the forking parent's pages)
SCORE = """
import json, re, sys, time
from privehr.tasks.predict import score_stays
t = time.perf_counter()
summary = score_stays(sys.argv[1], sys.argv[2], sys.argv[3], chunk_stays=int(sys.argv[4]))
wall = time.perf_counter() - t
hwm = int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1))
print(json.dumps({"wall_s": wall, "peak_rss_mb": hwm / 1024, "stays": summary["stays"], "scored": summary["scored"],
                  "models": summary["models"]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stays", type=int, default=34472)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    cohort, generated = generated_extract(None, args.stays, 0)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        small = tmp / "small.h5"
        subprocess.run([sys.executable, "-m", "privehr", "demo-data", "mimic", "--stays", "300", "--out", str(small)],
                       check=True, capture_output=True)
        (tmp / "config.json").write_text(json.dumps(CONFIG))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")} | {
            "PREFECT_HOME": str(tmp / "prefect"), "PRIVEHR_LEDGER": str(tmp / "ledger.jsonl")}
        subprocess.run([sys.executable, "-m", "privehr", "run", "--data", str(small), "--no-synthesis", "--no-dvc",
                        "--config", str(tmp / "config.json"), "--artifacts-dir", str(tmp / "artifacts"),
                        "--run-id", "bundle"], check=True, capture_output=True, env=env, cwd=tmp)
        bundle = tmp / "artifacts" / "bundle" / "release"
        runs = {}
        for name, chunk in (("streamed", 4096), ("one_piece", 10 ** 9)):
            out = subprocess.run([sys.executable, "-c", SCORE, str(bundle), str(cohort), str(tmp / f"{name}.csv"),
                                  str(chunk)], check=True, capture_output=True, text=True)
            runs[name] = json.loads(out.stdout.strip().splitlines()[-1]) | {"chunk_stays": chunk}
        import numpy as np
        import pandas as pd

        streamed, whole = (pd.read_csv(tmp / f"{n}.csv").drop(columns="predicted_utc") for n in ("streamed",
                                                                                                 "one_piece"))
        risks = [c for c in whole if c.startswith("risk_")]
        same = streamed.drop(columns=risks).equals(whole.drop(columns=risks)) and all(
            np.allclose(streamed[c], whole[c], rtol=1e-5, atol=1e-7, equal_nan=True) for c in risks)
        largest = max(float(np.nanmax(np.abs(streamed[c] - whole[c]))) for c in risks)
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "cohort_stays": args.stays,
              "generated": generated, **runs, "same_rows": bool(same), "largest_risk_difference": largest,
              "memory_ratio": round(runs["one_piece"]["peak_rss_mb"] / runs["streamed"]["peak_rss_mb"], 2),
              "goal": "34,472 stays in at most 60 s and 2 GB (issue 41 item 4)",
              "meets_goal": runs["streamed"]["wall_s"] <= 60 and runs["streamed"]["peak_rss_mb"] <= 2048}
    text = json.dumps(result, indent=1, default=str)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
