"""The run's pages over http: URLs for the Prefect artifacts, and ``privehr serve`` for the artifacts directory.

A browser that shows the Prefect UI over http does not follow ``file://`` links, and a local path means
nothing on another machine, so the artifacts link pages at ``pages.base_url`` (``PagesConfig``): the
URL at which the artifacts directory is served, by ``privehr serve`` or by any web server or static
site that publishes it. The server below shows pages only, by an allow-list (``is_page``): a run's
``report.html``, ``results.md``, ``metrics.json`` and figures, its synthesis report and figures, and the
Data Docs. Everything else answers 404 (patient-level ``intermediate/`` and ``quarantine/``, models, the
privacy ledger and its key, files of older run layouts), links are resolved before the check (a link
out of the root or into a private directory is refused), names are compared case-folded (a
case-insensitive disk), and the only listing is the root's list of runs.
"""

from __future__ import annotations

import functools
import html
import http.server
import io
import json
import os
import threading
import urllib.parse
from pathlib import Path

from privehr.core.run_layout import RunLayout

__all__ = ["page_url", "serve_artifacts", "is_page", "PRIVATE_PARTS", "SHARED_ASSETS"]

PRIVATE_PARTS = frozenset({"intermediate", "quarantine", ".lock"})
SHARED_ASSETS = "_static"  # <artifacts_dir>/_static/: Data Docs' images, fonts and styles, one copy for every run
RUN_PAGES = frozenset({"report.html", "results.md", "metrics.json"})
SYNTHESIS_PAGES = frozenset({"report.md"})


def page_url(path: str | Path, artifacts_dir: str | Path, base_url: str | None) -> str:
    """The URL of ``path`` (a file under ``artifacts_dir``): under ``base_url`` when set, else file://."""
    path = Path(path).resolve()
    if base_url:
        try:
            relative = path.relative_to(Path(artifacts_dir).resolve())
        except ValueError:
            pass
        else:
            return base_url.rstrip("/") + "/" + urllib.parse.quote(relative.as_posix())
    return path.as_uri()


def _started(run: Path) -> tuple[str, str]:
    """A run's sort key: when it started (its provenance.json; "" where unreadable), then its name."""
    try:
        started = str(json.loads(RunLayout(run).provenance.read_text()).get("created_utc", ""))
    except (OSError, ValueError, AttributeError):
        started = ""
    return started, run.name


def is_page(parts: tuple[str, ...]) -> bool:
    """Whether a path (its parts relative to the artifacts directory) is a page ``privehr serve`` shows: a run's
    reports and figures, its synthesis subflow's, and Great Expectations' Data Docs. Anything else (models,
    the ledger and its key, patient-level files, files of older layouts) is not served."""
    folded = tuple(p.casefold() for p in parts)
    if len(folded) < 2 or PRIVATE_PARTS & set(folded) or any(p.startswith(".") for p in folded):
        return False
    if folded[0] == SHARED_ASSETS:  # the Data Docs' shared static assets (no data)
        return True
    if len(folded) == 2:
        return folded[1] in RUN_PAGES or folded[1].endswith(".png")
    if len(folded) == 3 and folded[1] == "synthesis":
        return folded[2] in SYNTHESIS_PAGES or folded[2].endswith(".png")
    # <run>/[synthesis/]validation/<delivery>/gx/uncommitted/data_docs/...
    rest = folded[2:] if folded[1] == "synthesis" else folded[1:]
    return len(rest) > 5 and rest[0] == "validation" and rest[2:5] == ("gx", "uncommitted", "data_docs")


class _Handler(http.server.SimpleHTTPRequestHandler):
    def _real_parts(self, path: str) -> tuple[str, ...] | None:
        """``path``'s parts relative to the root after resolving links, or None where it leaves the root."""
        root = Path(self.directory).resolve()
        try:
            return Path(os.path.realpath(path)).relative_to(root).parts
        except ValueError:  # outside the root, or a name the OS refuses (a NUL byte)
            return None

    def send_head(self):
        target = self.translate_path(self.path)
        parts = self._real_parts(target)
        if parts == ():
            return self.list_directory(self.directory)
        if parts is not None and os.path.isdir(target):
            # a directory shows its index.html, which must itself be a page once its links are resolved
            parts = self._real_parts(os.path.join(target, "index.html"))
        if parts is None or not is_page(parts):
            self.send_error(404, "not a page privehr serve shows (reports, figures, Data Docs)")
            return None
        return super().send_head()

    def list_directory(self, path):
        """The root's listing only: the runs that have a report."""
        root = Path(self.directory)
        runs = [p.name for p in sorted(root.iterdir(), key=_started) if (p / "report.html").is_file()
                and not p.name.startswith(".")]  # oldest first: run ids carry no time
        items = "".join(f'<li><a href="{urllib.parse.quote(n)}/report.html">{html.escape(n)}</a></li>' for n in runs)
        body = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>privehr runs</title></head>"
                f"<body><h1>privehr runs</h1><ul>{items}</ul></body></html>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass  # request paths name runs and files, never values; kept quiet like the rest of the CLI


def serve_artifacts(artifacts_dir: str | Path, host: str = "127.0.0.1", port: int = 0,
                    background: bool = False) -> http.server.ThreadingHTTPServer:
    """An http server of ``artifacts_dir`` (port 0: a free one); with ``background``, already serving."""
    root = Path(artifacts_dir).resolve()
    server = http.server.ThreadingHTTPServer((host, port), functools.partial(_Handler, directory=str(root)))
    if background:
        threading.Thread(target=server.serve_forever, daemon=True, name="privehr-serve").start()
    return server
