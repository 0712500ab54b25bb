"""Impute a small EHR table with MICE: split by patient first (a hash of each patient alone), fit on training
patients only.

Writes ``intermediate/imputed/{train,test}_<i>.csv`` (the m completed datasets, with the spec's derived
columns, e.g. mean PAP and the hypertension label) and ``imputation.json`` (decisions, iterations,
convergence, bound checks, Rubin-pooled example estimates). Patient-level files stay in
``intermediate/``; Prefect sees counts only.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from prefect import task

from privehr.models.data.derived_columns import add_derived
from privehr.models.data.mice import MICEImputer
from privehr.models.data.patient_split import hash_split
from privehr.models.inference.rubins_rules import pool
from privehr.core.config import EHRPrepareConfig
from privehr.core.errors import InputError
from privehr.core.run_layout import RunLayout
from privehr.core.specs import load_ehr_spec
from privehr.io.ehr_table import check_derived_sources, drop_by_missingness, read_ehr_table
from privehr.tasks.run_logging import run_logger

__all__ = ["impute_ehr"]


def _pooled(frames: list[pd.DataFrame], column: str) -> dict | None:
    """Rubin-pooled mean of ``column`` (variance s^2 / n per dataset)."""
    if column not in frames[0] or len(frames) < 2:
        return None
    values = [f[column].to_numpy(dtype=float) for f in frames]
    p = pool([v.mean() for v in values], [v.var(ddof=1) / v.size for v in values])
    return {"estimate": p.estimate, "std_error": p.std_error, "fraction_missing_information":
            p.fraction_missing_information, "degrees_of_freedom": p.degrees_of_freedom, "m": p.m}


def _whole_numbers(part: pd.DataFrame, columns: list[str], bounds: dict, steps: dict | None = None) -> pd.DataFrame:
    """MICE draws of integer columns and of discrete columns' codes rounded to a whole number within the column's
    range (a category code 0..k-1, an integer within its bounds); a column with a ``step`` onto its levels."""
    part = part.copy()
    for c in columns:
        low, high = bounds[c]
        step = (steps or {}).get(c)
        values = np.rint(part[c]) if not step else low + np.rint((part[c] - low) / step) * step
        top = high if not step or high is None else low + np.floor((high - low) / step) * step
        if step:  # low and top are levels already (a numeric column's step need not be whole)
            part[c] = np.clip(values, low, top)
        else:
            part[c] = np.clip(values, -np.inf if low is None else np.ceil(low), np.inf if top is None else np.floor(top))
    return part


def _split_keys(frame: pd.DataFrame, spec) -> pd.Series:
    """What each patient's split is a hash of: the id column's value, or, in a table without one (whose row numbers
    shift when a row is removed), the record's own values over every attribute of the spec, each written exactly
    (``float.hex``; "NA" where missing or absent). Either way one patient's split depends on that patient alone: not
    on the columns' dtypes or on which attributes other patients left empty, so adding or removing a patient moves
    no one else between train and test.

    >>> from privehr.core.specs import EHRTableSpec
    >>> spec = EHRTableSpec(name="t", attributes=[{"name": "hr"}, {"name": "bp"}])
    >>> a = _split_keys(pd.DataFrame({"hr": [80, 90]}, index=["p1", "p2"]), spec)
    >>> b = _split_keys(pd.DataFrame({"hr": [80.0, 90.0, None], "bp": [None, None, 120.0]},
    ...                              index=["p1", "p2", "p3"]), spec)
    >>> a.tolist() == b.iloc[:2].tolist()
    True
    """
    if spec.id_column:
        return pd.Series(frame.index.astype(str), index=frame.index)
    columns = [frame[a].to_numpy(dtype=float) if a in frame else np.full(len(frame), np.nan)
               for a in (b.name for b in spec.attributes)]
    rows = np.column_stack(columns) if columns else np.zeros((len(frame), 0))
    return pd.Series(["\x1f".join("NA" if np.isnan(v) else float(v).hex() for v in row) for row in rows],
                     index=frame.index)


@task(name="impute")
def impute_ehr(config: EHRPrepareConfig, run_dir: str) -> str:
    """Split the table's patients, run MICE fitted on the training patients; return imputation.json's path."""
    spec = load_ehr_spec(config.spec)
    table = read_ehr_table(config.path, spec)
    frame = table.frame
    split = hash_split(_split_keys(frame, spec), (1 - config.test_fraction, 0.0, config.test_fraction),
                       config.split_seed)
    train, test = frame[(split == "train").to_numpy()], frame[(split == "test").to_numpy()]
    if train.empty or test.empty:
        raise InputError(f"{spec.name}: the split of its {len(frame)} kept records left no "
                         f"{'training' if train.empty else 'held-out'} patient (each patient's side is a hash of "
                         "itself, so a small table can fall on one side); nothing was spent. Fix: deliver more "
                         "patients, or change split_seed or test_fraction")
    run = RunLayout(run_dir)
    run.split_tables.mkdir(parents=True, exist_ok=True)
    # the split and imputed tables below are data, read back by code (delivered_tables, imputed_tables) and kept
    # under intermediate/: written byte-faithful, never escaped for a spreadsheet (privehr.io.spreadsheet)
    for name, part in (("train", train), ("test", test)):  # as delivered: synthesis.missing: in_release reads them
        part.to_csv(run.split_tables / f"{name}.csv")
    train, dropped, rule = drop_by_missingness(train, spec, table.decisions["records_read"])  # training patients only
    check_derived_sources(spec, dropped, "of the training patients")
    test, frame = test[train.columns], frame[train.columns]
    decisions = {**table.decisions, "dropped_attributes": dropped, "attributes_kept": len(train.columns),
                 "drop_rule": rule, "drop_decided_on": "training patients",
                 "dropped_on_whole_delivery": table.decisions["dropped_attributes"]}
    bounds = {a.name: a.code_range() for a in spec.attributes if a.name in frame}
    whole = [a.name for a in spec.attributes if a.name in frame and (a.discrete or a.kind == "integer" or a.step)]
    steps = {a.name: a.step for a in spec.attributes if a.step}
    mice = config.mice
    imputer = MICEImputer(m=mice.m, max_iter=mice.max_iter, seed=mice.seed, bounds=bounds, trace=mice.trace)
    imputed = {"train": imputer.fit_transform(train), "test": imputer.transform(test)}  # fitted on train only
    out = run.imputed
    out.mkdir(parents=True, exist_ok=True)
    completed = {"train": [], "test": []}
    for i, (tr, te) in enumerate(zip(imputed["train"], imputed["test"])):
        for name, part in (("train", tr), ("test", te)):
            part = _whole_numbers(part, whole, bounds, steps)
            full = add_derived(part, spec.derived)
            full.to_csv(out / f"{name}_{i}.csv")
            completed[name].append(full)
    within = all(((f[c] >= (-np.inf if lo is None else lo)) & (f[c] <= (np.inf if hi is None else hi))).all()
                 for part in completed.values() for f in part for c, (lo, hi) in bounds.items())
    summary = {
        "spec": spec.name, "input": str(config.path), "m": mice.m, "iterations": imputer.max_iter,
        "seeds": imputer.seeds_, "estimator": "IterativeImputer(BayesianRidge, sample_posterior=True)",
        "fitted_on": "training patients only", "patients": {"train": int(len(train)), "test": int(len(test))},
        "attributes": list(frame.columns), "derived": [d.name for d in spec.derived],
        "decisions": decisions,
        "missing_before": {"train": {c: int(n) for c, n in train.isna().sum().items()},
                           "test": {c: int(n) for c, n in test.isna().sum().items()}},
        "missing_after": int(sum(f.isna().sum().sum() for part in completed.values() for f in part)),
        "within_bounds": bool(within), "truncation": "draws truncated to the spec's physiological bounds",
        "convergence": {"rhat": imputer.rhat_, "trace_rounds": imputer.max_iter if imputer.trace_ else 0,
                        "max_rhat": float(np.nanmax(list(imputer.rhat_.values()))) if imputer.rhat_ else None},
        "pooled_train": {c: _pooled(completed["train"], c) for c in [d.name for d in spec.derived]},
        "files": sorted(str(p) for p in out.glob("*.csv")),
    }
    path = run.imputation
    path.write_text(json.dumps(summary, indent=2))
    run_logger().info("impute: %d datasets x %d attributes, fitted on the training patients; complete after: %s",
                      mice.m, frame.shape[1], summary["missing_after"] == 0)
    return str(path)
