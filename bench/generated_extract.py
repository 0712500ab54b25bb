"""The benchmarks' full-size input: a simulated MIMIC-Extract file under bench/data/, generated once."""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def generated_extract(path: Path | None, stays: int, seed: int) -> tuple[Path, dict | None]:
    """(``path``, None) if given, else the file bench/data/all_hourly_data_<stays>.h5 and, when it had to be
    generated first, its generation's wall time, peak RSS and summary (counts only)."""
    if path is not None:
        return Path(path), None
    path = ROOT / "bench" / "data" / f"all_hourly_data_{stays}.h5"
    if path.exists():
        return path, None
    sys.path.insert(0, str(ROOT))
    from privehr.io.demo_data import write_demo_mimic

    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    summary = write_demo_mimic(path, stays, seed)
    return path, {"wall_s": time.perf_counter() - t0,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **summary}
