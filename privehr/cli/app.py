"""The ``privehr`` parser, assembled from the command modules, and :func:`main`: the watchdog of orchestrated
commands, input errors as one message (exit status 2), and one retry when Prefect's temporary server does not
start in time."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from contextlib import contextmanager

from privehr.cli import audit, data, expectations, infer, privacy, release, run, serve, synthesize, validate
from privehr.cli.common import common_options
from privehr.cli.watchdog import watch
from privehr.core.errors import InputError

__all__ = ["EPHEMERAL_STARTUP_SECONDS", "ORCHESTRATED", "build_parser", "main"]

# Each adds one top-level command (its subcommands, options and handler), in the order `privehr --help` lists them.
COMMANDS = (data.add_demo_data_parser, expectations.add_expectations_parser, expectations.add_spec_parser,
            validate.add_validate_parser, validate.add_ehr_prepare_parser, data.add_inspect_parser,
            run.add_run_parser, release.add_predict_parser, release.add_release_parser, privacy.add_privacy_parser,
            synthesize.add_synthesize_parser, infer.add_infer_parser, audit.add_audit_parser,
            serve.add_serve_parser, run.add_config_parser)

EPHEMERAL_STARTUP_SECONDS = "180"  # Prefect's 20 s default fails on a loaded 2-core machine
ORCHESTRATED = {"run", "validate", "ehr-prepare", "synthesize", "infer", "audit"}  # start a Prefect server


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="privehr", description="privehr: learning from clinical data under "
                                     "differential privacy, orchestrated by Prefect and versioned with DVC.")
    common = common_options()
    sub = parser.add_subparsers(dest="command", required=True)
    for add_command in COMMANDS:
        add_command(sub, common)
    return parser


@contextmanager
def _input_errors_without_tracebacks(debug: bool):
    """Log records of an input error (a task or flow of this command failing on bad input) keep their message but
    lose the traceback, which Prefect's handlers would print before privehr's one-line message."""
    if debug:
        yield
        return
    previous = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        record = previous(*args, **kwargs)
        if record.exc_info and isinstance(record.exc_info[1], InputError):
            record.exc_info, record.exc_text = None, None
        return record

    logging.setLogRecordFactory(factory)
    try:
        yield
    finally:
        logging.setLogRecordFactory(previous)


def _with_one_retry_of_the_server(args) -> int:
    """Run the command; if Prefect's temporary server did not come up (a loaded machine), stop its half-started
    process and try once more. The server starts before a flow's first task: no run directory exists yet."""
    try:
        return args.func(args)
    except RuntimeError as err:
        if "ephemeral Prefect API server" not in str(err):
            raise
        _stop_temporary_server()
        print("privehr: Prefect's temporary server did not start in time; trying once more", file=sys.stderr)
        try:
            return args.func(args)
        finally:
            _stop_temporary_server()


def _stop_temporary_server() -> None:
    """Terminate the temporary server Prefect started for this process, if any (a failed start leaves it)."""
    if "prefect.server.api.server" in sys.modules:
        sys.modules["prefect.server.api.server"].SubprocessASGIServer().stop()


def _print_error(args, message: str) -> None:
    if getattr(args, "json", False):
        print(json.dumps({"error": message}, indent=2))
    print(f"privehr: error: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """The console command: input errors as one line (exit status 2); a closed pipe (``| head``) ends it quietly."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # a reader gone before the last line: raise here, not at interpreter exit
        return code
    except BrokenPipeError:
        # the reader (head, grep -m, less) has what it wanted: no traceback, and none from the exit's own flush
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    debug = getattr(args, "debug", False)
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", EPHEMERAL_STARTUP_SECONDS)
    if args.command in ORCHESTRATED and argv is None:  # a console command (not a call from Python): no orphans
        watch()
    try:
        with _input_errors_without_tracebacks(debug):
            return _with_one_retry_of_the_server(args)
    except RuntimeError as err:
        if "ephemeral Prefect API server" not in str(err) or debug:
            raise
        timeout = os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"]
        _print_error(args, f"Prefect's temporary server did not start within {timeout} s (a loaded machine?). Run "
                           "`prefect server start` once and set PREFECT_API_URL to it (e.g. "
                           "http://127.0.0.1:4200/api), or raise PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS; "
                           "nothing was trained.")
        return 2
    except InputError as err:
        if debug:
            traceback.print_exc()
        _print_error(args, str(err))
        return 2


if __name__ == "__main__":
    sys.exit(main())
