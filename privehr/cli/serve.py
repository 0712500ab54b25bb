"""``privehr serve``: the artifacts directory's pages (report.html, Data Docs) over http, where the Prefect
artifacts link them (``pages.base_url``); never intermediate/ or quarantine/."""

from __future__ import annotations

import argparse
import ipaddress
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


def _loopback(address: str) -> bool:
    """Whether the address a server is bound to is this machine's own (127.0.0.0/8, ::1, or one mapped to them)."""
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return address.rstrip(".").lower() == "localhost"
    return ip.is_loopback or bool(getattr(ip, "ipv4_mapped", None) and ip.ipv4_mapped.is_loopback)


def serve_command(args) -> int:
    if args.port is not None and not 0 <= args.port <= 65535:
        raise InputError(f"--port {args.port} is not a port; give one from 1 to 65535 (0: any free port)")
    config = config_from(args)
    root = config.artifacts_dir
    if not Path(root).is_dir():
        raise InputError(f"{root} is not a directory; pass the artifacts directory (runs are artifacts/<run-id>/)")
    try:
        default_port = urllib.parse.urlsplit(config.pages.base_url).port if config.pages.base_url else None
    except ValueError:  # a port out of range
        raise InputError("pages.base_url holds no valid port; give one from 1 to 65535, or pass --port") from None
    port = args.port if args.port is not None else (default_port or DEFAULT_PAGES_PORT)
    try:
        server = serve_artifacts(root, args.host, port)
    except OSError as err:
        raise InputError(f"cannot listen on {args.host}:{port} ({err.strerror}); pass another --port and set "
                         "pages.base_url to match") from None
    host, port = server.server_address[:2]
    url = f"http://{host}:{port}/"
    if not _loopback(host):
        print(f"privehr: warning: listening on {host}, beyond this machine's loopback: the reports and Data Docs "
              "(exact statistics of real patients) are reachable from the network by anyone who can reach port "
              f"{port}; pass --host 127.0.0.1 to keep them on this machine", file=sys.stderr)
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
