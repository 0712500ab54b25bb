"""``privehr run`` (privehr-pipeline, locally) and ``privehr config`` (the resolved ``PipelineConfig``)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import yaml

from privehr.cli.common import add_config_options, config_from, emit, no_prefect_analytics
from privehr.core.config import PipelineConfig
from privehr.core.errors import InputError
from privehr.io.pages import page_url
from privehr.tasks.stage_timing import timing_table

__all__ = ["add_config_parser", "add_run_parser"]


def add_run_parser(sub, common: argparse.ArgumentParser) -> None:
    run = sub.add_parser("run", parents=[common], help="run privehr-pipeline locally (no server needed)")
    add_config_options(run)
    run.add_argument("--dask", action="store_true", help="run the task fan-out on a local Dask cluster")
    run.add_argument("--dask-address", help="scheduler of a Dask cluster (tcp://host:8786) for the fan-out")
    run.add_argument("--dask-workers", type=int, default=2, help="workers of the local Dask cluster")
    run.add_argument("--no-synthesis", action="store_true", help="skip the DP-NF synthesis of the EHR table")
    run.add_argument("--resume", action="store_true",
                     help="continue --run-id after a crash or kill: finished grid cells are not retrained")
    run.set_defaults(func=run_command)


def add_config_parser(sub, common: argparse.ArgumentParser) -> None:
    config = sub.add_parser("config", parents=[common], help="print the resolved configuration")
    add_config_options(config)
    config.add_argument("--schema", action="store_true", help="print the JSON schema instead")
    config.set_defaults(func=config_command)


def config_command(args) -> int:
    if args.schema:
        print(json.dumps(PipelineConfig.model_json_schema(), indent=2))
        return 0
    config = config_from(args)
    print(config.model_dump_json(indent=2) if args.json else _yaml(config))
    return 0


def _yaml(config: PipelineConfig) -> str:
    return yaml.safe_dump(json.loads(config.model_dump_json()), sort_keys=False).rstrip()


def _check_artifacts_dir(path: Path) -> None:
    """An artifacts directory that cannot be made or written is named before Prefect starts, not after its server
    came up (the run would stop there, creating its directory)."""
    from privehr.io.permissions import private_umask

    try:
        with private_umask():  # as the run would have made it: owner-only
            path.mkdir(parents=True, exist_ok=True)
        writable = os.access(path, os.W_OK | os.X_OK)
        why = "permission denied"
    except OSError as err:
        writable, why = False, err.strerror
    if not writable:
        raise InputError(f"cannot create the run directory in {path} ({why}); make {path} writable or pass another "
                         "artifacts directory")


def run_command(args) -> int:
    from privehr.io.mimic_extract import check_extract  # deferred for start-up time (pandas, h5py)

    config = config_from(args)
    if args.no_synthesis:
        config = config.model_copy(update={"synthesis": None})
    if config.versioning.dvc:  # a fresh clone: fetch the versioned inputs before checking them
        from privehr.tasks.versioning import pull_inputs  # deferred for start-up time (prefect)

        pull_inputs.fn([str(config.data.hdf5_path)] + ([str(config.synthesis.path)] if config.synthesis else []))
    check_extract(config.data.hdf5_path)  # fail fast, before Prefect starts
    from privehr.io.ledger import Ledger  # deferred for start-up time (torch, opacus)

    ledger = Ledger(config.privacy.ledger_path)
    ledger.state()  # a tampered ledger is named before anything is read
    from privehr.flows.pipeline import check_names  # deferred for start-up time (prefect, torch)

    check_names(config)  # a method or synthesizer found by name: an unknown one is one line, before Prefect starts
    _check_artifacts_dir(Path(config.artifacts_dir))
    ledger.probe_writable()  # and an unwritable one before Prefect starts
    if config.synthesis is not None and not Path(config.synthesis.path).exists():
        raise InputError(f"the profile also synthesises the EHR table {config.synthesis.path}, which does not exist; "
                         "write the demo table with `privehr demo-data ehr --out data/ehr/EHR_dataset.csv`, point "
                         "synthesis.path at yours in --config, or pass --no-synthesis")
    no_prefect_analytics()
    # deferred for start-up time (prefect, torch, great_expectations)
    from privehr.flows.pipeline import on_dask, pipeline
    from privehr.tasks.report import console_table, curve_check_lines

    flow = on_dask(args.dask_address, args.dask_workers) if (args.dask or args.dask_address) else pipeline
    summary = flow(config)
    versioning = summary.get("versioning", {})
    text = "\n".join([
        "", *filter(None, [curve_check_lines(summary.get("dp_sgd_checks", [])).rstrip()]),
        f"every column of every cell: {Path(summary['run_dir']) / 'results.csv'}", f"figure: {summary['figure']}",
        f"report (calibration, intervals, subgroups): {summary['report_html']}"
        + (f" - `privehr serve`, then {page_url(summary['report_html'], config.artifacts_dir, config.pages.base_url)}"
           if config.pages.base_url else ""),
        "", "time per stage:", timing_table(summary["stage_seconds"]), "",
        f"run {summary['run_id']}: artifacts in {summary['run_dir']}/",
        f"  versioned with DVC: {versioning['dvc_file']}" if versioning.get("versioned")
        else f"  not versioned with DVC ({versioning.get('reason', 'disabled')})",
        "", console_table(summary),
    ])
    emit(args, summary, text)
    return 0
