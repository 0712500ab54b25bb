"""Benchmark: build the 24 h cohort window with the streaming loader and with pandas.read_hdf.

Each loader runs in its own subprocess and reports its own peak RSS (VmHWM; ru_maxrss would
inherit the parent's peak across fork on Linux). Both windows
are checked equal. Prints JSON and writes it to bench/results/cohort_loader.json.

    python bench/cohort_loader.py [--path FILE] [--stays 34472] [--seed 0]

Without --path a full-size file (34,472 stays, ~7.6 GB) is generated under bench/data/ first.
Goal (issue 2): streaming peak RSS <= 0.25 x pandas at no more wall time.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import hashlib, json, sys, time
import numpy as np
from privehr.models.data.cohort import select_cohort
from privehr.io.mimic_extract import read_patients, read_window, read_window_pandas
path, loader, chunk = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0 = time.perf_counter()
ids = select_cohort(read_patients(path)).stays["icustay_id"].to_numpy()
w = read_window(path, ids, 24, chunk) if loader == "streaming" else read_window_pandas(path, ids, 24)
wall = time.perf_counter() - t0
h = hashlib.sha256()
for a in (w.icustay_ids, np.nan_to_num(w.mean, nan=-1e300), w.count):
    h.update(np.ascontiguousarray(a).tobytes())
h.update("|".join(w.variables).encode())
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]  # this process's own peak
print(json.dumps({"wall_s": wall, "peak_rss_mb": int(hwm) / 1024,
                  "stays": int(ids.size), "window_sha256": h.hexdigest(), "missing_rows": int(w.missing_rows)}))
"""


def run_child(path: Path, loader: str, chunk: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), loader, str(chunk)], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", type=Path)
    parser.add_argument("--stays", type=int, default=34472)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk-rows", type=int, default=32768)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    from generated_extract import generated_extract

    path, generation = generated_extract(args.path, args.stays, args.seed)
    streaming = run_child(path, "streaming", args.chunk_rows)
    pandas = run_child(path, "pandas", args.chunk_rows)
    result = {
        "benchmark": "cohort_loader", "file": str(path), "file_bytes": path.stat().st_size,
        "machine": {"cpus": len(__import__("os").sched_getaffinity(0)), "python": platform.python_version()},
        "chunk_rows": args.chunk_rows, "generation": generation,
        "streaming": streaming, "pandas_read_hdf": pandas,
        "outputs_equal": streaming["window_sha256"] == pandas["window_sha256"],
        "memory_ratio": streaming["peak_rss_mb"] / pandas["peak_rss_mb"],
        "time_ratio": streaming["wall_s"] / pandas["wall_s"],
        "goal": "memory_ratio <= 0.25 and time_ratio <= 1",
    }
    result["goal_met"] = bool(result["outputs_equal"] and result["memory_ratio"] <= 0.25 and result["time_ratio"] <= 1)
    out = ROOT / "bench" / "results" / "cohort_loader.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
