"""``report.html``: a run's report as one self-contained page (figures inlined), for a person to read.

The page is ``results.md`` rendered (Python-Markdown, tables extension) with every local figure embedded
as a data URI (the same inlined Markdown the Prefect artifact shows), so it opens anywhere: from ``privehr serve``, a static site, or an e-mail attachment.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

import markdown as md
from privehr.core.run_layout import RunLayout

__all__ = ["write_report_html", "inline_figures"]

_STYLE = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:12px;margin:1em 0;display:block;overflow-x:auto}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}img{max-width:100%}code{background:#f3f3f3}
blockquote{background:#fff4c2;border-left:6px solid #d9a400;margin:1em 0;padding:.4em 1em}"""


def inline_figures(markdown_text: str, directory: str | Path) -> str:
    """Markdown whose local figures ``![alt](name.png)`` are data URIs (for the Prefect UI)."""
    def inline(match):
        path = Path(directory) / match.group(2)
        if "/" in match.group(2) or not path.is_file():
            return match.group(0)
        return f"![{match.group(1)}](data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()})"

    return re.sub(r"!\[([^\]]*)\]\(([^)]+\.png)\)", inline, markdown_text)


def write_report_html(run_dir: str | Path, markdown_text: str, title: str) -> Path:
    """Render ``markdown_text`` (its figures already inlined by :func:`inline_figures`) to
    ``run_dir/report.html``."""
    run_dir = Path(run_dir)
    body = md.markdown(markdown_text, extensions=["tables"])
    page = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body>{body}</body></html>")
    out = RunLayout(run_dir).report_html
    out.write_text(page)
    return out
