"""Reading MIMIC-Extract's ``all_hourly_data.h5`` exactly as the pipeline writes it.

Keys (``mimic_direct_extract.py``): ``patients`` (PyTables table), ``vitals_labs`` and
``vitals_labs_mean`` and ``interventions`` (fixed), optional ``codes`` (fixed). Hourly keys have the
row index (subject_id, hadm_id, icustay_id, hours_in) and, for vitals/labs, columns
(LEVEL2, Aggregation Function) with count/mean/std. The full ``vitals_labs`` is ~5.5 GB, so the
first-hours window is read with :class:`~privehr.io.hdf5_fixed.FixedFrame` in bounded row windows.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

from privehr.models.data.cohort import ID_COLUMNS, select_cohort
from privehr.core.errors import InputError
from privehr.io.hdf5_fixed import FixedFrame

__all__ = ["HourlyWindow", "check_extract", "read_patients", "read_window", "read_window_pandas",
           "inspect_extract", "sha256_file", "extract_source", "REQUIRED_KEYS", "HOURLY_INDEX",
           "SIMULATED_ATTR"]

REQUIRED_KEYS = ("patients", "vitals_labs")
OPTIONAL_KEYS = ("vitals_labs_mean", "interventions", "codes")
HOURLY_INDEX = ["subject_id", "hadm_id", "icustay_id", "hours_in"]
COLUMN_LEVELS = ["LEVEL2", "Aggregation Function"]
GENERATE_HINT = "generate demo data with: privehr demo-data mimic --out {path}"
SIMULATED_ATTR = "privehr_simulated"  # a root attribute of the files privehr's simulator writes, naming it


@dataclass
class HourlyWindow:
    """The first ``hours`` hours of each stay: per-variable hourly mean and measurement count.

    ``mean`` and ``count`` have shape (stays, hours, variables); a missing hour row reads as
    count 0 / mean NaN and is counted in ``missing_rows``.
    """

    icustay_ids: np.ndarray
    variables: list[str]
    mean: np.ndarray
    count: np.ndarray
    missing_rows: int = 0

    def equals(self, other: "HourlyWindow") -> bool:
        return (np.array_equal(self.icustay_ids, other.icustay_ids) and self.variables == other.variables
                and np.array_equal(self.mean, other.mean, equal_nan=True)
                and np.array_equal(self.count, other.count) and self.missing_rows == other.missing_rows)


def check_extract(path: str | Path) -> list[str]:
    """Check that ``path`` is a readable MIMIC-Extract file; return its top-level keys."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"MIMIC-Extract file not found: {path}. Point data.hdf5_path at your "
                         f"all_hourly_data.h5, or {GENERATE_HINT.format(path=path)}")
    if path.is_dir():
        raise InputError(f"{path} is a directory; expected the file all_hourly_data.h5.")
    try:
        with h5py.File(path, "r") as h5:
            keys = sorted(h5.keys())
    except OSError as err:
        size = path.stat().st_size
        raise InputError(f"{path} ({size} bytes) is not a readable HDF5 file (truncated or not HDF5: "
                         f"{err}). Expected MIMIC-Extract's all_hourly_data.h5 with keys "
                         f"{', '.join(REQUIRED_KEYS)}; re-download or regenerate it.") from None
    missing = [k for k in REQUIRED_KEYS if k not in keys]
    if missing:
        raise InputError(f"{path} lacks the key(s) {missing}. Keys found: {keys or 'none'}; keys required: "
                         f"{list(REQUIRED_KEYS)} (optional: {list(OPTIONAL_KEYS)}). Is this the output of "
                         "MIMIC-Extract's mimic_direct_extract.py?")
    return keys


def extract_source(path: str | Path) -> dict:
    """Where a run's data comes from, for its report: the file's name, and whether privehr's simulator wrote it
    (the root attribute ``SIMULATED_ATTR``; a file without it, such as MIMIC-Extract's own output, is taken as
    patients' records). Names only: no value of the file is read.

    A simulated file that lost the attribute (rewritten by another tool) is reported as real: the banner errs
    toward care with the results, never toward calling patients' data simulated."""
    path = Path(path)
    with h5py.File(path, "r") as h5:
        generator = h5.attrs.get(SIMULATED_ATTR)
    if isinstance(generator, bytes):
        generator = generator.decode("utf-8", "replace")
    return {"file": path.name, "path": str(path), "simulated": generator is not None,
            "generator": None if generator is None else str(generator)}


def read_patients(path: str | Path) -> pd.DataFrame:
    """The ``patients`` table (28 or 29 columns), validated for the columns the cohort needs."""
    try:
        patients = pd.read_hdf(path, "patients")
    except (ValueError, TypeError, KeyError, OSError) as err:
        raise InputError(f"key 'patients' in {path} cannot be read as a pandas table: {err}") from None
    if list(patients.index.names) != ID_COLUMNS:
        raise InputError(f"'patients' in {path} is indexed by {list(patients.index.names)}; expected "
                         f"{ID_COLUMNS} as MIMIC-Extract writes it.")
    needed = {"mort_icu", "mort_hosp", "los_icu", "max_hours"}
    if missing := sorted(needed - set(patients.columns)):
        raise InputError(f"'patients' in {path} lacks column(s) {missing} needed for the labels and cohort; "
                         f"found {len(patients.columns)} columns.")
    return patients


def _vitals_columns(frame: FixedFrame, path) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Variables and the positions of their count and mean columns (in the file's order)."""
    columns = frame.columns
    if not isinstance(columns, pd.MultiIndex) or list(columns.names) != COLUMN_LEVELS:
        raise InputError(f"'vitals_labs' in {path} has column levels {list(getattr(columns, 'names', []))}; "
                         f"expected {COLUMN_LEVELS} (MIMIC-Extract run with group_by_level2).")
    level2 = columns.get_level_values(0)
    agg = columns.get_level_values(1)
    variables = list(dict.fromkeys(level2))
    pos = {key: i for i, key in enumerate(zip(level2, agg))}
    lacking = [v for v in variables if (v, "mean") not in pos or (v, "count") not in pos]
    if lacking:
        raise InputError(f"'vitals_labs' in {path} lacks the mean or count column for {lacking[:5]}"
                         f"{' ...' if len(lacking) > 5 else ''}; each LEVEL2 variable needs both.")
    return (variables, np.array([pos[(v, "count")] for v in variables]),
            np.array([pos[(v, "mean")] for v in variables]))


def _window_rows(icustay: np.ndarray, hours_in: np.ndarray, wanted: np.ndarray, hours: int):
    """Rows of the wanted stays' first ``hours`` hours, with their (stay, hour) destination."""
    stay_pos = pd.Index(wanted).get_indexer(icustay)
    rows = np.flatnonzero((stay_pos >= 0) & (hours_in >= 0) & (hours_in < hours))
    return rows, stay_pos[rows], hours_in[rows]


def read_window(path: str | Path, icustay_ids, hours: int = 24, chunk_rows: int = 32768) -> HourlyWindow:
    """Stream the first ``hours`` hours of the given stays from ``vitals_labs``.

    Reads the row index once, then at most ``chunk_rows`` hourly rows at a time; peak memory is the
    output window plus one chunk, whatever the file's size.
    """
    wanted = np.asarray(icustay_ids, dtype=np.int64)
    with h5py.File(path, "r") as h5:
        frame = FixedFrame(h5, "vitals_labs")
        variables, count_cols, mean_cols = _vitals_columns(frame, path)
        rows, stay, hour = _window_rows(frame.index_level("icustay_id"), frame.index_level("hours_in"),
                                        wanted, hours)
        if pd.Index(wanted.tolist()).has_duplicates:
            raise ValueError("icustay_ids must be unique")
        columns = np.concatenate([count_cols, mean_cols])
        order = np.argsort(columns)
        sorted_cols = columns[order]
        mean = np.full((wanted.size, hours, len(variables)), np.nan)
        count = np.zeros((wanted.size, hours, len(variables)), dtype=np.float32)
        n_vars = len(variables)
        filled = 0
        for chunk_rows_read, values in frame.iter_row_windows(rows, sorted_cols, chunk_rows):
            values = values[:, np.argsort(order)]  # back to [counts..., means...]
            k = np.searchsorted(rows, chunk_rows_read)
            count[stay[k], hour[k]] = values[:, :n_vars]
            mean[stay[k], hour[k]] = values[:, n_vars:]
            filled += k.size
    _check_counts(count, path)
    return HourlyWindow(wanted, variables, mean, count, missing_rows=wanted.size * hours - filled)


def _check_counts(count: np.ndarray, path) -> None:
    if np.isnan(count).any() or (count < 0).any():
        raise InputError(f"'vitals_labs' in {path} has NaN or negative measurement counts; MIMIC-Extract "
                         "writes count = 0 for hours without a measurement.")


def read_window_pandas(path: str | Path, icustay_ids, hours: int = 24) -> HourlyWindow:
    """Reference implementation of :func:`read_window` with ``pandas.read_hdf`` (loads the whole key)."""
    wanted = np.asarray(icustay_ids, dtype=np.int64)
    frame = pd.read_hdf(path, "vitals_labs")
    variables = list(dict.fromkeys(frame.columns.get_level_values(0)))
    icustay = frame.index.get_level_values("icustay_id").to_numpy()
    hours_in = frame.index.get_level_values("hours_in").to_numpy()
    rows, stay, hour = _window_rows(icustay, hours_in, wanted, hours)
    sub = frame.iloc[rows]
    mean = np.full((wanted.size, hours, len(variables)), np.nan)
    count = np.zeros((wanted.size, hours, len(variables)), dtype=np.float32)
    mean[stay, hour] = sub.xs("mean", axis=1, level=1)[variables].to_numpy()
    count[stay, hour] = sub.xs("count", axis=1, level=1)[variables].to_numpy()
    return HourlyWindow(wanted, variables, mean, count, missing_rows=wanted.size * hours - rows.size)


def sha256_file(path: str | Path, block: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def inspect_extract(path: str | Path, window_hours: int = 24, gap_hours: int = 6,
                    chunk_rows: int = 32768, window_stats: bool = True) -> dict:
    """Summary of an ``all_hourly_data.h5``: keys, sizes, variables, cohort and missingness (no rows).

    ``window_stats=False`` skips the streaming read behind the missing fraction of the window.
    """
    keys = check_extract(path)
    patients = read_patients(path)
    with h5py.File(path, "r") as h5:
        frame = FixedFrame(h5, "vitals_labs")
        variables, _, _ = _vitals_columns(frame, path)
        hourly_rows = frame.nrows
        stays_hourly = int(pd.unique(frame.index_level("icustay_id")).size)
    cohort = select_cohort(patients, window_hours, gap_hours)
    window = read_window(path, cohort.stays["icustay_id"].to_numpy(), window_hours, chunk_rows) \
        if window_stats else None
    return {
        "path": str(path),
        "bytes": Path(path).stat().st_size,
        "keys": keys,
        "codes_present": "codes" in keys,
        "stays": int(len(patients)),
        "subjects": int(patients.index.get_level_values("subject_id").nunique()),
        "stays_with_hourly_rows": stays_hourly,
        "hourly_rows": int(hourly_rows),
        "variables": len(variables),
        "patients_columns": int(patients.shape[1]),
        "label_dtypes": {c: str(patients[c].dtype) for c in ("mort_icu", "mort_hosp", "los_icu")},
        "cohort": {
            "rule": f"max_hours > {window_hours + gap_hours}",
            "stays": int(len(cohort.stays)),
            "label_rates": cohort.label_rates(),
            "exclusions": cohort.exclusions,
            "window_hours": window_hours,
            **({"missing_fraction_first_hours_means": float(np.isnan(window.mean).mean()) if window.mean.size
                else None, "missing_hour_rows": int(window.missing_rows)} if window else {}),
        },
    }
