"""``privehr validate`` (validate deliveries, no training) and ``privehr ehr-prepare`` (validate, split and
MICE-impute an EHR table)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from privehr.cli.common import emit, no_prefect_analytics
from privehr.core.config import EHRPrepareConfig, StewardConfig, ValidationConfig
from privehr.core.errors import InputError, settings_error

__all__ = ["add_ehr_prepare_parser", "add_validate_parser"]


def add_validate_parser(sub, common: argparse.ArgumentParser) -> None:
    validate = sub.add_parser("validate", parents=[common], help="validate deliveries (no training); exit 1 "
                              "when a critical expectation fails")
    validate.add_argument("paths", nargs="+", type=Path, help="all_hourly_data.h5 files and/or EHR tables (CSV)")
    validate.add_argument("--ehr-spec", default="harrod_ehr", help="spec of the CSV tables (name or YAML path)")
    validate.add_argument("--mimic-spec", type=Path, help="MIMIC-Extract spec YAML (default: the bundled one)")
    validate.add_argument("--run-id")
    validate.add_argument("--artifacts-dir", type=Path, default=Path("artifacts"))
    validate.set_defaults(func=validate_command)


def add_ehr_prepare_parser(sub, common: argparse.ArgumentParser) -> None:
    prepare = sub.add_parser("ehr-prepare", parents=[common], help="validate, split and MICE-impute an EHR table")
    prepare.add_argument("--data", type=Path, help="the table (default data/ehr/EHR_dataset.csv)")
    prepare.add_argument("--spec", help="spec name or YAML path (default harrod_ehr)")
    prepare.add_argument("--m", type=int, help="imputed datasets (default 5)")
    prepare.add_argument("--iterations", type=int, help="MICE rounds (default 10)")
    prepare.add_argument("--run-id")
    prepare.add_argument("--artifacts-dir", type=Path)
    prepare.set_defaults(func=ehr_prepare_command)


def validate_command(args) -> int:
    try:
        config = StewardConfig(paths=args.paths, ehr_spec=args.ehr_spec, artifacts_dir=args.artifacts_dir,
                               run_id=args.run_id,
                               validation=ValidationConfig(spec=args.mimic_spec, stop_on_critical=False))
    except ValueError as err:
        raise settings_error(err, "validate options") from None
    from privehr.tasks.versioning import pull_inputs  # deferred for start-up time (prefect)

    pull_inputs.fn([str(p) for p in config.paths])  # a fresh clone: fetch versioned deliveries first
    missing = [str(p) for p in config.paths if not Path(p).exists()]
    if missing:  # before any run directory or server: nothing to validate
        raise InputError(f"delivery not found: {', '.join(missing)}; pass the path of each file to validate")
    from privehr.core.specs import load_ehr_spec  # deferred for start-up time (pandas)

    load_ehr_spec(config.ehr_spec)  # a bad spec (bounds, derived expressions): one line, before a server starts
    no_prefect_analytics()
    # deferred for start-up time (prefect, great_expectations)
    from privehr.flows.steward import validate
    from privehr.tasks.validate import summary_markdown

    result = validate(config)
    reports = {p: json.loads(Path(r).read_text()) for p, r in result["deliveries"].items()}
    texts = [summary_markdown(r) for r in reports.values()]
    texts += [f"# {p}: not readable\n\n{e}" for p, e in result["errors"].items()]
    emit(args, {"run_dir": result["run_dir"], "passed": not result["failed"], "deliveries": reports,
                "errors": result["errors"]}, "\n\n".join(texts) + f"\n\nrun directory: {result['run_dir']}")
    return 1 if result["failed"] else 0


def ehr_prepare_command(args) -> int:
    try:
        mice = {k: v for k, v in {"m": args.m, "max_iter": args.iterations}.items() if v is not None}
        config = EHRPrepareConfig.model_validate({k: v for k, v in {
            "path": args.data, "spec": args.spec, "run_id": args.run_id, "artifacts_dir": args.artifacts_dir,
            "mice": mice or None}.items() if v is not None})
    except ValueError as err:
        raise settings_error(err, "ehr-prepare options") from None
    from privehr.core.specs import load_ehr_spec  # deferred for start-up time (pandas)

    load_ehr_spec(config.spec)  # a bad spec (bounds, derived expressions): one line, before a run directory is made
    no_prefect_analytics()
    from privehr.flows.ehr_prepare import ehr_prepare  # deferred for start-up time (prefect)

    result = ehr_prepare(config)
    s = json.loads(Path(result["imputation"]).read_text())
    text = "\n".join([
        f"{s['input']} through spec {s['spec']}: {s['patients']['train']} train + {s['patients']['test']} test "
        f"patients x {len(s['attributes'])} attributes (+ derived {s['derived']})",
        f"  dropped: {', '.join(s['decisions']['dropped_attributes']) or 'none'}; quarantined: "
        f"{s['decisions']['quarantined'] or 'none'}",
        f"  MICE: {s['m']} datasets, {s['iterations']} rounds, missing after: {s['missing_after']}, within bounds: "
        f"{s['within_bounds']}, max R-hat {s['convergence']['max_rhat']}",
        f"run directory: {result['run_dir']}"])
    emit(args, {**result, "imputation_summary": s}, text)
    return 0
