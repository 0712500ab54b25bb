"""Benchmark: the report's stratified bootstrap, vectorised, against the textbook loop.

    python bench/bootstrap.py [--resamples 1000] [--repeats 3]

For test sets of the demo's size (538 stays) and of the full-size cohort's (about 4,800 stays), three
seeds and AUROC + AUPRC + Brier: seconds for ``models/evaluation/bootstrap.py`` (one pass over (B, n) count
arrays) and for drawing indices and calling scikit-learn per resample, interleaved, medians; and the
largest difference between the two (the same resamples, so it must be ~1e-15).

Prints JSON and writes ``bench/results/bootstrap.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from sklearn.metrics import average_precision_score, roc_auc_score  # noqa: E402

from privehr.models.evaluation.bootstrap import stratified_counts, weighted_auprc, weighted_auroc, weighted_brier  # noqa: E402


def _vectorised(preds, y, w):
    return [np.stack([f(p, y, w) for p in preds]) for f in (weighted_auroc, weighted_auprc, weighted_brier)]


def _loop(preds, y, w):
    out = np.zeros((3, len(preds), len(w)))
    for b, counts in enumerate(w):
        idx = np.repeat(np.arange(y.size), counts)
        for s, p in enumerate(preds):
            out[:, s, b] = (roc_auc_score(y[idx], p[idx]), average_precision_score(y[idx], p[idx]),
                            np.mean((p[idx] - y[idx]) ** 2))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for n in (538, 4800):
        y = (rng.random(n) < 0.1).astype(int)
        preds = [np.clip(0.1 + 0.2 * y + rng.normal(0, 0.15, n), 0, 1).round(3) for _ in range(3)]
        w = stratified_counts(y, args.resamples, rng)
        fast, slow = [], []
        for _ in range(args.repeats):
            t = time.perf_counter()
            a = _vectorised(preds, y, w)
            fast.append(time.perf_counter() - t)
            t = time.perf_counter()
            b = _loop(preds, y, w)
            slow.append(time.perf_counter() - t)
        diff = max(float(np.abs(a[k] - b[k]).max()) for k in range(3))
        rows.append({"test_stays": n, "seeds": 3, "resamples": args.resamples,
                     "vectorised_s": statistics.median(fast), "sklearn_loop_s": statistics.median(slow),
                     "speedup": statistics.median(slow) / statistics.median(fast), "max_abs_difference": diff})
    result = {"benchmark": "stratified bootstrap of AUROC, AUPRC and Brier", "repeats": args.repeats, "rows": rows}
    out = ROOT / "bench" / "results" / "bootstrap.json"
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
