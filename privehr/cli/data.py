"""``privehr demo-data mimic|ehr`` (demo inputs in the real on-disk formats) and ``privehr inspect`` (a summary of
an ``all_hourly_data.h5``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from privehr.cli.common import emit
from privehr.core.errors import InputError

__all__ = ["add_demo_data_parser", "add_inspect_parser"]


def add_demo_data_parser(sub, common: argparse.ArgumentParser) -> None:
    demo = sub.add_parser("demo-data", help="generate demo inputs in the real on-disk formats")
    demo_sub = demo.add_subparsers(dest="kind", required=True)
    mimic = demo_sub.add_parser("mimic", parents=[common], help="a simulated MIMIC-Extract all_hourly_data.h5")
    mimic.add_argument("--out", type=Path, required=True, help="output .h5 path")
    mimic.add_argument("--stays", type=int, default=4000, help="ICU stays (full size: 34472; default 4000)")
    mimic.add_argument("--seed", type=int, default=0)
    mimic.add_argument("--variables", type=int, default=None, help="keep the first N of the 104 LEVEL2 variables")
    mimic.add_argument("--patients-columns", type=int, choices=(28, 29), default=28)
    mimic.add_argument("--label-dtype", choices=("int64", "int32"), default="int64")
    mimic.add_argument("--datetime-unit", choices=("ns", "us"), default="ns")
    mimic.add_argument("--codes", action="store_true", help="also write the optional 'codes' key")
    mimic.add_argument("--force", action="store_true", help="overwrite an existing file")
    mimic.set_defaults(func=demo_mimic)

    ehr = demo_sub.add_parser("ehr", parents=[common],
                              help="a simulated EHR table shaped like Harrod's (Su et al. 2023)")
    ehr.add_argument("--out", type=Path, required=True, help="output .csv path")
    ehr.add_argument("--seed", type=int, default=0)
    ehr.add_argument("--force", action="store_true", help="overwrite an existing file")
    ehr.set_defaults(func=demo_ehr)


def add_inspect_parser(sub, common: argparse.ArgumentParser) -> None:
    inspect = sub.add_parser("inspect", parents=[common], help="summarise an all_hourly_data.h5")
    inspect.add_argument("path", type=Path)
    inspect.add_argument("--window-hours", type=int, default=24)
    inspect.add_argument("--gap-hours", type=int, default=6)
    inspect.set_defaults(func=inspect_command)


def _refuse_to_overwrite(args) -> None:
    if args.out.exists() and not args.force:
        raise InputError(f"{args.out} exists; pass --force to overwrite it (raw inputs are never replaced silently).")


def demo_mimic(args) -> int:
    from privehr.io.demo_data import write_demo_mimic  # deferred for start-up time (pandas, scipy)

    _refuse_to_overwrite(args)
    summary = write_demo_mimic(args.out, args.stays, args.seed, n_variables=args.variables,
                               patients_columns=args.patients_columns, label_dtype=args.label_dtype,
                               datetime_unit=args.datetime_unit, with_codes=args.codes)
    emit(args, summary, f"wrote {summary['path']}: {summary['stays']} stays, {summary['rows']} hourly rows, "
                        f"{summary['variables']} variables ({summary['bytes'] / 1e6:.1f} MB)")
    return 0


def demo_ehr(args) -> int:
    from privehr.io.demo_data import write_demo_ehr  # deferred for start-up time (pandas, scipy)

    _refuse_to_overwrite(args)
    summary = write_demo_ehr(args.out, args.seed)
    emit(args, summary, f"wrote {summary['path']}: {summary['patients']} patients x {summary['attributes']} "
                        f"attributes, {summary['missing_values']} missing values (transposed, like Harrod's file)")
    return 0


def inspect_command(args) -> int:
    from privehr.io.mimic_extract import inspect_extract  # deferred for start-up time (pandas, h5py)

    s = inspect_extract(args.path, args.window_hours, args.gap_hours)
    c = s["cohort"]
    text = "\n".join([
        f"{s['path']} ({s['bytes'] / 1e6:.1f} MB)",
        f"  keys: {', '.join(s['keys'])}",
        f"  stays: {s['stays']} ({s['subjects']} subjects), hourly rows: {s['hourly_rows']}",
        f"  variables (LEVEL2): {s['variables']}, patients columns: {s['patients_columns']}",
        f"  cohort ({c['rule']}): {c['stays']} stays; label rates "
        + ", ".join(f"{k} {v:.3f}" for k, v in c["label_rates"].items()),
        f"  excluded: {c['exclusions']}",
        f"  missing fraction of first-{c['window_hours']} h means: {c['missing_fraction_first_hours_means']:.4f}"
        if c.get("missing_fraction_first_hours_means") is not None else "  (empty cohort)",
    ])
    emit(args, s, text)
    return 0
