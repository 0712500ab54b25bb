"""What the command modules share: the ``--json``/``--debug`` parent options, the output of a command (JSON or
text), the options and loading of the pipeline configuration, and the settings of the commands whose runs make DP
releases (a ``--config`` YAML file, then the options given)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import yaml

from privehr.core.config import PipelineConfig, load_config
from privehr.core.errors import InputError, where_in_text
from privehr.core.strict_json import strict_dumps
from privehr.core.yaml_files import DuplicateKeyError, load_yaml

__all__ = ["add_config_options", "add_release_run_options", "common_options", "config_from", "emit",
           "no_prefect_analytics", "release_run_settings"]


def common_options() -> argparse.ArgumentParser:
    """The parent parser of every command: ``--json`` and ``--debug``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print machine-readable JSON")
    common.add_argument("--debug", action="store_true", help="show the Python and Prefect tracebacks of input "
                                                             "errors (by default: one message, exit status 2)")
    return common


def emit(args, payload: dict, text: str) -> None:
    """Print ``payload`` as JSON with ``--json``, else ``text``."""
    print(strict_dumps(payload, indent=2, default=str) if args.json else text)  # strict JSON: never Infinity


def no_prefect_analytics() -> None:
    """Before a flow starts Prefect's temporary server: no analytics, unless the user set the variable."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def add_config_options(p: argparse.ArgumentParser) -> None:
    """Options of the commands that read a ``PipelineConfig`` (run, serve, config)."""
    p.add_argument("--profile", choices=("demo", "full"), default="demo",
                   help="preset grid: demo (3 seeds, 4 epsilons) or full (Bridges et al. 2023: 10 seeds, "
                        "11 epsilons)")
    p.add_argument("--config", type=Path, help="YAML or JSON file of PipelineConfig settings (over the profile)")
    p.add_argument("--data", type=Path, help="MIMIC-Extract file (overrides data.hdf5_path)")
    p.add_argument("--run-id", help="name of the run directory (default: timestamp + suffix)")
    p.add_argument("--artifacts-dir", type=Path, help="where run directories go (default artifacts/)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"))
    p.add_argument("--no-dvc", action="store_true", help="do not version the run with DVC")


def config_from(args) -> PipelineConfig:
    """The ``PipelineConfig`` of a command: its profile, ``--config`` file, then the options given (a command
    without an option leaves its setting alone)."""
    return load_config(args.config, getattr(args, "profile", "demo"), **{
        "data.hdf5_path": getattr(args, "data", None), "run_id": getattr(args, "run_id", None),
        "artifacts_dir": getattr(args, "artifacts_dir", None), "device": getattr(args, "device", None),
        "versioning.dvc": False if getattr(args, "no_dvc", False) else None,
        "resume": True if getattr(args, "resume", False) else None})


def add_release_run_options(parser: argparse.ArgumentParser, resumed: str) -> None:
    """Options of every command whose run makes DP releases: delta, budget, resume, device and where it goes."""
    parser.add_argument("--delta", type=float, help="delta of every (epsilon, delta) statement (default 1e-5)")
    parser.add_argument("--budget-epsilon", type=float, help="the per-patient budget this run expects (the ledger's "
                                                             "binds; a ledger without one records it)")
    parser.add_argument("--resume", action="store_true", help=f"continue --run-id: {resumed}")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--run-id")
    parser.add_argument("--artifacts-dir", type=Path)


def release_run_settings(args, flat: dict, nested: tuple = ()) -> dict:
    """The raw settings of a releasing run: ``--config`` YAML, then the options given (``flat`` top-level keys,
    ``nested`` (section, key, value) triples), the privacy options, ``--no-non-private`` and ``--resume``."""
    raw = {}
    if args.config is not None:
        if not args.config.exists():
            raise InputError(f"config file not found: {args.config}")
        try:
            raw = load_yaml(args.config.read_text()) or {}
        except DuplicateKeyError as err:
            raise InputError(f"config file {args.config}: {err}") from None
        except yaml.YAMLError as err:
            raise InputError(f"config file {args.config} is not valid YAML{where_in_text(err)}; fix that line") from None
        except (UnicodeDecodeError, IsADirectoryError) as err:
            raise InputError(f"config file {args.config} cannot be read as UTF-8 text ({type(err).__name__}); save "
                             "it as UTF-8") from None
        if not isinstance(raw, dict):
            raise InputError(f"config file {args.config} must hold a mapping of settings")
    raw |= {k: v for k, v in {**flat, "run_id": args.run_id, "artifacts_dir": args.artifacts_dir}.items()
            if v is not None}
    for section, key, value in (("privacy", "delta", args.delta), ("privacy", "budget_epsilon", args.budget_epsilon),
                                *nested):
        if value is not None:
            node, path = raw, []
            for part in section.split("."):
                node, path = node.setdefault(part, {}), [*path, part]
                if not isinstance(node, dict):  # `privacy: 5` in the file, and --delta
                    raise InputError(f"config file {args.config}: {'.'.join(path)}: not a mapping. Fix: give a "
                                     f"mapping of settings (key: value), e.g. {'.'.join(path)}: {{{key}: ...}}")
            node[key] = value
    if args.no_non_private:
        raw["non_private"] = False
    if args.resume:
        raw["resume"] = True
    return raw
