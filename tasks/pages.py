"""The run's pages over http: URLs for the Prefect artifacts, and ``privehr serve`` for the artifacts directory.

A browser that shows the Prefect UI over http does not follow ``file://`` links, and a local path means
nothing on another machine, so the artifacts link pages at ``pages.base_url`` (``PagesConfig``): the
URL at which the artifacts directory is served, by ``privehr serve`` or by any web server or static
site that publishes it. The server below never serves patient-level files: a run's ``intermediate/``
and ``quarantine/`` directories and its lock file answer 404, and directory listings leave them out.
"""

from __future__ import annotations

import functools
import html
import http.server
import io
import os
import threading
import urllib.parse
from pathlib import Path

__all__ = ["page_url", "serve_artifacts", "PRIVATE_PARTS"]

PRIVATE_PARTS = frozenset({"intermediate", "quarantine", ".lock"})


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


class _Handler(http.server.SimpleHTTPRequestHandler):
    def _private(self) -> bool:
        parts = Path(urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)).parts
        return any(p in PRIVATE_PARTS for p in parts)

    def send_head(self):
        if self._private():
            self.send_error(404, "not served: patient-level files stay on the machine that ran the flow")
            return None
        return super().send_head()

    def list_directory(self, path):
        """A plain listing without the private directories."""
        names = sorted(n for n in os.listdir(path) if n not in PRIVATE_PARTS)
        title = html.escape(urllib.parse.unquote(urllib.parse.urlsplit(self.path).path))
        items = "".join(f'<li><a href="{urllib.parse.quote(n + ("/" if os.path.isdir(os.path.join(path, n)) else ""))}">'
                        f"{html.escape(n)}</a></li>" for n in names)
        body = f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>privehr artifacts {title}</title></head>" \
               f"<body><h1>privehr artifacts {title}</h1><ul>{items}</ul></body></html>".encode()
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
