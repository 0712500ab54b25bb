"""``privehr serve``: the artifacts directory's pages (report.html, Data Docs) over http, where the Prefect
artifacts link them (``pages.base_url``); never intermediate/ or quarantine/."""

from __future__ import annotations

import argparse
import sys
import urllib.parse
from pathlib import Path

from privehr.cli.common import add_config_options, config_from, emit
from privehr.core.config import DEFAULT_PAGES_PORT
from privehr.core.errors import InputError
from privehr.io.pages import PRIVATE_PARTS, serve_artifacts

__all__ = ["add_serve_parser"]


def add_serve_parser(sub, common: argparse.ArgumentParser) -> None:
    serve = sub.add_parser("serve", parents=[common], help="serve the artifacts directory's pages (report.html, Data "
                           "Docs) over http, where the Prefect artifacts link them (pages.base_url)")
    add_config_options(serve)
    serve.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: this machine only)")
    serve.add_argument("--port", type=int, default=None,
                       help=f"default: the port of pages.base_url ({DEFAULT_PAGES_PORT})")
    serve.set_defaults(func=serve_command)


def serve_command(args) -> int:
    config = config_from(args)
    root = config.artifacts_dir
    if not Path(root).is_dir():
        raise InputError(f"{root} is not a directory; pass the artifacts directory (runs are artifacts/<run-id>/)")
    default_port = urllib.parse.urlsplit(config.pages.base_url).port if config.pages.base_url else None
    port = args.port if args.port is not None else (default_port or DEFAULT_PAGES_PORT)
    try:
        server = serve_artifacts(root, args.host, port)
    except OSError as err:
        raise InputError(f"cannot listen on {args.host}:{port} ({err.strerror}); pass another --port and set "
                         "pages.base_url to match") from None
    host, port = server.server_address[:2]
    url = f"http://{host}:{port}/"
    emit(args, {"serving": str(Path(root).resolve()), "url": url,
                "not_served": sorted(PRIVATE_PARTS)},
         f"serving {Path(root).resolve()} at {url} (reports, Data Docs; never intermediate/ or quarantine/); "
         "Ctrl-C stops")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
