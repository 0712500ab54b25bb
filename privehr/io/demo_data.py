"""Write demo data in the exact on-disk form of the real inputs."""

from __future__ import annotations

import warnings
from pathlib import Path

import h5py
import pandas as pd

from privehr.io.mimic_extract import SIMULATED_ATTR
from privehr.simulate.ehr_simulator import simulate_ehr_table
from privehr.simulate.severity_simulator import SimulatedExtract, simulate_extract
from privehr.resources import mimic_extract_variables

__all__ = ["write_demo_mimic", "write_extract", "write_demo_ehr"]


def write_demo_mimic(out: Path, n_stays: int = 4000, seed: int = 0, *, n_variables: int | None = None,
                     patients_columns: int = 28, label_dtype: str = "int64",
                     datetime_unit: str = "ns", with_codes: bool = False) -> dict:
    """Simulate ``n_stays`` stays and write them as MIMIC-Extract writes ``all_hourly_data.h5``.

    Keys and formats as ``mimic_direct_extract.py``: ``vitals_labs``, ``interventions``, optional
    ``codes`` (fixed), ``patients`` (table), ``vitals_labs_mean`` (fixed, an iloc slice), uncompressed.
    ``n_variables`` keeps the first N LEVEL2 variables (e.g. 93 to resemble the demo extract).
    Returns a small summary (counts only).
    """
    out = Path(out)
    variables = mimic_extract_variables()
    if n_variables is not None:
        if not 1 <= n_variables <= len(variables):
            raise ValueError(f"n_variables must be between 1 and {len(variables)}")
        variables = variables.iloc[:n_variables]
    sim = simulate_extract(variables, n_stays, seed, patients_columns=patients_columns,
                           label_dtype=label_dtype, datetime_unit=datetime_unit, with_codes=with_codes)
    write_extract(sim, out)
    return {"path": str(out), "stays": int(n_stays), "rows": int(len(sim.vitals_labs)),
            "variables": int(len(variables)), "bytes": out.stat().st_size}


def write_extract(sim: SimulatedExtract, out: Path) -> None:
    """Write the frames with MIMIC-Extract's keys and formats, atomically (a .partial file, then rename), the file
    marked as simulated (a root attribute MIMIC-Extract never writes)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    tmp.unlink(missing_ok=True)
    with warnings.catch_warnings():  # 'Aggregation Function' is no Python identifier; pandas knows
        warnings.simplefilter("ignore")
        sim.vitals_labs.to_hdf(tmp, key="vitals_labs")
        sim.interventions.to_hdf(tmp, key="interventions")
        if sim.codes is not None:
            sim.codes.to_hdf(tmp, key="codes")
        sim.patients.to_hdf(tmp, key="patients", format="table")
        sim.vitals_labs_mean.to_hdf(tmp, key="vitals_labs_mean")
    with h5py.File(tmp, "a") as h5:  # the run's report says so in a banner (privehr.io.mimic_extract.extract_source)
        h5.attrs[SIMULATED_ATTR] = "privehr's severity simulator (privehr demo-data mimic)"
    tmp.replace(out)


def write_demo_ehr(out: Path, seed: int = 0) -> dict:
    """Simulate a Harrod-shaped EHR table and write it as the real file is laid out: transposed (one row
    per attribute, name first, one column per patient), no header, ``none`` for missing values."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    table = simulate_ehr_table(seed)
    lines = [",".join([name] + ["none" if pd.isna(v) else f"{v:.1f}" for v in table[name]]) for name in table.columns]
    tmp = out.with_name(out.name + ".partial")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(out)
    return {"path": str(out), "patients": int(len(table)), "attributes": int(table.shape[1]),
            "missing_values": int(table.isna().sum().sum()), "bytes": out.stat().st_size}
