"""Great Expectations' Data Docs made to open offline and to phone no one.

GX writes pages that load jQuery, Bootstrap, bootstrap-table, Font Awesome and Vega from public CDNs, draw the
index's list of validations with JavaScript from data inlined in a script, and fetch GX's logo from a URL that
carries the data context's id. In a hospital without internet access the index shows an empty list, and online
every page view tells a third party which data context looked at its Data Docs.

:func:`make_offline` rewrites a built site in place: each JavaScript-drawn table becomes static HTML rows (with
the links the script would have made), every script and every stylesheet or image from another host is
removed, the logo is GX's own copy under the site's ``static/`` (which :func:`share_static_assets` then relinks),
and a few lines of local style keep tables readable. Links a reader clicks (GX's documentation) stay.
"""

from __future__ import annotations

import ast
import html
import os
import re
from pathlib import Path

__all__ = ["make_offline", "EXTERNAL_RESOURCE"]

# a script, stylesheet or image fetched from another host (what a page loads by itself, without a click)
EXTERNAL_RESOURCE = re.compile(r"""<(?:script|link|img)\b[^>]*?\b(?:src|href)\s*=\s*["']?(?:https?:)?//""",
                               re.IGNORECASE)
_SCRIPT = re.compile(r"<script\b.*?</script>", re.IGNORECASE | re.DOTALL)
_EXTERNAL_LINK = re.compile(r"""<link\b[^>]*?\bhref\s*=\s*["']?(?:https?:)?//[^>]*>""", re.IGNORECASE)
_EXTERNAL_IMG = re.compile(r"""<img\b[^>]*?\bsrc\s*=\s*["']?(?:https?:)?//[^>]*>""", re.IGNORECASE)
_EMPTY_TABLE = re.compile(r"""<table\s+id="(?P<id>[^"]+)"(?P<attrs>[^>]*)data-toggle="table"\s*>\s*</table>""")
_TABLE_DATA = r"""\$\('#{id}'\)\.bootstrapTable\(\s*Object\.assign\(\s*\{{\s*columns:\s*(?P<columns>\[.*?\]),\s*""" \
              r"""data:\s*(?P<data>\[.*?\]),\s*toolbar:"""
_MARK = "/* privehr: Data Docs offline */"
_STYLE = ("<style>" + _MARK + " table{border-collapse:collapse;margin:.5em 0}"
          "td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top}.invisible{display:none}"
          ".cooltip .top{display:none}</style>")


def make_offline(site: str | Path) -> int:
    """Rewrite every page of the Data Docs site ``site`` (the folder of ``index.html``) to work offline and load
    nothing from another host; return the number of pages rewritten (a page already rewritten is left alone)."""
    site = Path(site)
    done = 0
    for page in sorted(site.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        if _MARK in text:  # rewritten by an earlier validation into the same site
            continue
        text = _EMPTY_TABLE.sub(lambda m, text=text: _static_table(m, text), text)
        text = _SCRIPT.sub("", text)
        text = _EXTERNAL_LINK.sub("", text)
        logo = os.path.relpath(site / "static" / "images" / "logo-long.png", page.parent)
        text = _EXTERNAL_IMG.sub(f'<img src="{logo}" alt="Great Expectations" style="width:auto;height:50px"/>', text)
        text = text.replace("</head>", _STYLE + "</head>", 1)
        page.write_text(text, encoding="utf-8")
        done += 1
    return done


def _static_table(match: re.Match, page: str) -> str:
    """The rows a bootstrap-table script would have drawn into an empty ``<table>``, as static HTML: each column's
    cell as GX rendered it, the status as text (its icon needs Font Awesome), the row's link on its first cell.
    A table whose script cannot be read is left as it was."""
    found = re.search(_TABLE_DATA.format(id=re.escape(match["id"])), page, re.DOTALL)
    if found is None:
        return match[0]
    try:
        columns, rows = ast.literal_eval(found["columns"]), ast.literal_eval(found["data"])
    except (ValueError, SyntaxError):
        return match[0]
    fields = [(c["field"], c.get("title", c["field"])) for c in columns if isinstance(c, dict) and "field" in c]
    head = "".join(f"<th>{html.escape(str(title))}</th>" for _, title in fields)
    body = []
    for row in sorted(rows, key=lambda r: str(r.get("_run_time_sort", "")), reverse=True):
        cells = []
        for i, (field, _) in enumerate(fields):
            value = row.get("_validation_success_text", row.get(field, "")) if field == "validation_success" \
                else row.get(field, "")
            cell = html.escape(value) if field == "validation_success" else str(value)
            link = row.get("_table_row_link_path")
            if i == 0 and link:
                cell = f'<a href="{html.escape(str(link), quote=True)}">{cell}</a>'
            cells.append(f"<td>{cell}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (f'<table id="{match["id"]}"{match["attrs"]}><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")
