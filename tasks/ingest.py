"""Ingest: check the raw MIMIC-Extract file and record its fingerprint and summary (read only)."""

from __future__ import annotations

import json

from prefect import task

from privehr.core.run_layout import RunLayout
from privehr.io.mimic_extract import inspect_extract, sha256_file
from privehr.tasks.run_logging import exact, run_logger

__all__ = ["ingest_extract"]


@task(name="ingest")
def ingest_extract(hdf5_path: str, run_dir: str, window_hours: int = 24, gap_hours: int = 6,
                   chunk_rows: int = 32768) -> str:
    """Validate the file, write ``ingest.json`` (keys, sizes, cohort counts, sha256); return its path."""
    summary = inspect_extract(hdf5_path, window_hours, gap_hours, chunk_rows, window_stats=False)
    summary["sha256"] = sha256_file(hdf5_path)
    out = RunLayout(run_dir).ingest
    out.write_text(json.dumps(summary, indent=2))
    run_logger().info("ingest: %s stays, %d variables, %s hourly rows", exact(summary["stays"]),
                      summary["variables"], exact(summary["hourly_rows"]))
    return str(out)
