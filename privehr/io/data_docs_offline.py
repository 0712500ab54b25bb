"""Great Expectations' Data Docs made to open offline and to phone no one.

GX writes pages that load jQuery, Bootstrap, bootstrap-table, Font Awesome and Vega from public CDNs, draw the
index's list of validations with JavaScript from data inlined in a script, and fetch GX's logo from a URL that
carries the data context's id. In a hospital without internet access the index shows an empty list, and online
every page view tells a third party which data context looked at its Data Docs.

:func:`make_offline` rewrites a built site in place: each JavaScript-drawn table becomes static HTML rows (with
the links the script would have made), every script and every stylesheet or image from another host is
removed, the logo is GX's own copy under the site's ``static/`` (which :func:`share_static_assets` then relinks),
and a few lines of local style keep tables readable. Links a reader clicks (GX's documentation) stay.

GX's inline style also fetches a logo from its S3 bucket in dark mode (``url(https://...)`` under
``prefers-color-scheme: dark``): every CSS ``url(...)`` and ``@import`` of another host, in ``<style>`` blocks,
``style=`` attributes and the site's ``.css`` files, is neutralised (``none``; the import dropped), and the local
logo GX hides in dark mode is shown instead.
"""

from __future__ import annotations

import ast
import html
import os
import re
from pathlib import Path

__all__ = ["make_offline", "EXTERNAL_RESOURCE"]

# a URL of another host: an http(s) scheme (from a file:// page a browser reads "https:host" and "https:\\host" as
# https://host too), or scheme-relative ("//host", "\\host"); blanks before it are ignored, by browsers as here
_EXTERNAL = r"""\s*(?:https?:|[/\\]{2})"""
# a quote that may open a CSS url or string: " or ', or their entities inside a style="..." attribute (markupsafe
# writes &#34; and &#39;)
_QUOTE = r"""(?:["']|&quot;|&\#0*3[49];|&\#x0*2[27];|&apos;)"""
# CSS that fetches something: url(, @import, or a string image-set()/image() takes as a URL; a comment may come
# between (url(/**/"https://..."))
_COMMENT = r"""(?:\s|/\*.*?\*/)*"""
_CSS_URL = rf"""url\({_COMMENT}{_QUOTE}?{_EXTERNAL}"""
_CSS_IMPORT = rf"""@import{_COMMENT}(?:url\({_COMMENT})?{_QUOTE}?{_EXTERNAL}"""
_CSS_IMAGE_SET = rf"""image(?:-set)?\((?:[^()]|\([^()]*\))*?{_QUOTE}{_EXTERNAL}"""
# a srcset names several images: any of them on another host
_SRCSET = rf"""\bsrcset\s*=\s*["']?(?:[^"'>]*?[\s,])?{_EXTERNAL}"""
# a script, stylesheet or image fetched from another host, or a CSS url(), @import or image-set() of one (what a
# page loads by itself, without a click); CSS in a page's text is matched too (a false alarm over a missed request)
EXTERNAL_RESOURCE = re.compile(rf"""<(?:script|link|img|source)\b[^>]*?(?:\b(?:src|href)\s*=\s*["']?{_EXTERNAL}"""
                               rf"""|{_SRCSET})|{_CSS_URL}|{_CSS_IMPORT}|{_CSS_IMAGE_SET}""",
                               re.IGNORECASE | re.DOTALL)
_SCRIPT = re.compile(r"<script\b.*?</script>", re.IGNORECASE | re.DOTALL)
_EXTERNAL_LINK = re.compile(rf"""<link\b[^>]*?\bhref\s*=\s*["']?{_EXTERNAL}[^>]*>""", re.IGNORECASE)
_EXTERNAL_IMG = re.compile(rf"""<(?:img|source)\b[^>]*?(?:\bsrc\s*=\s*["']?{_EXTERNAL}|{_SRCSET})[^>]*>""",
                           re.IGNORECASE)
# CSS tokens, whole: a comment, a quoted string (escapes inside), a url() (quoted or not), an @import rule
_CSS_STRING = r""""(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'"""
_CSS_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_CSS_URL_TOKEN = re.compile(rf"""url\(\s*(?P<target>{_CSS_STRING}|[^)"'\s]*)\s*\)""", re.IGNORECASE)
_CSS_IMPORT_RULE = re.compile(rf"""@import\s*(?P<target>{_CSS_STRING}|url\(\s*(?:{_CSS_STRING}|[^)"'\s]*)\s*\))"""
                              rf"""(?:{_CSS_STRING}|[^;"'])*;?""", re.IGNORECASE)
_CSS_STRING_TOKEN = re.compile(_CSS_STRING)
_IS_EXTERNAL = re.compile(rf"""^(?:url\(\s*)?["']?{_EXTERNAL}""", re.IGNORECASE)
_STYLE_BLOCK = re.compile(r"(<style\b[^>]*>)(.*?)(</style>)", re.IGNORECASE | re.DOTALL)
_STYLE_ATTR = re.compile(r"""(\bstyle\s*=\s*)("[^"]*"|'[^']*')""", re.IGNORECASE)
_EMPTY_TABLE = re.compile(r"""<table\s+id="(?P<id>[^"]+)"(?P<attrs>[^>]*)data-toggle="table"\s*>\s*</table>""")
_TABLE_DATA = r"""\$\('#{id}'\)\.bootstrapTable\(\s*Object\.assign\(\s*\{{\s*columns:\s*(?P<columns>\[.*?\]),\s*""" \
              r"""data:\s*(?P<data>\[.*?\]),\s*toolbar:"""
_MARK = "/* privehr: Data Docs offline */"
_STYLE = ("<style>" + _MARK + " table{border-collapse:collapse;margin:.5em 0}"
          "td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top}.invisible{display:none}"
          ".cooltip .top{display:none}"
          # GX hides its local logo in dark mode to show one from S3 as a background; that background is gone
          "@media (prefers-color-scheme: dark){.navbar-brand a img{visibility:visible;background:#fff}}</style>")


def make_offline(site: str | Path) -> int:
    """Rewrite every page of the Data Docs site ``site`` (the folder of ``index.html``) to work offline and load
    nothing from another host; return the number of pages rewritten (a page already rewritten is left alone, but
    for a CSS url of another host an older privehr left in it, which is neutralised too)."""
    site = Path(site)
    done = 0
    for page in sorted(site.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        if _MARK in text:  # rewritten by an earlier validation into the same site (its CSS perhaps by an older privehr)
            if _local_page_css(text) != text:
                page.write_text(_local_page_css(text), encoding="utf-8")
            continue
        text = _EMPTY_TABLE.sub(lambda m, text=text: _static_table(m, text), text)
        text = _SCRIPT.sub("", text)
        text = _EXTERNAL_LINK.sub("", text)
        logo = os.path.relpath(site / "static" / "images" / "logo-long.png", page.parent)
        text = _EXTERNAL_IMG.sub(f'<img src="{logo}" alt="Great Expectations" style="width:auto;height:50px"/>', text)
        text = _local_page_css(text).replace("</head>", _STYLE + "</head>", 1)
        page.write_text(text, encoding="utf-8")
        done += 1
    for sheet in sorted(site.rglob("*.css")):  # not linked by GX's pages (their style is inline), but kept local too
        text = sheet.read_text(encoding="utf-8")
        if _local_css(text) != text:
            sheet.write_text(_local_css(text), encoding="utf-8")
    return done


def _local_page_css(page: str) -> str:
    """The HTML ``page`` with :func:`_local_css` applied to its ``<style>`` blocks and ``style=`` attributes (an
    attribute's entities read first and written back escaped; an attribute without an external reference is left
    byte for byte)."""
    page = _STYLE_BLOCK.sub(lambda m: m[1] + _local_css(m[2]) + m[3], page)
    return _STYLE_ATTR.sub(lambda m: m[1] + _local_attribute(m[2]), page)


def _local_attribute(quoted: str) -> str:
    quote, css = quoted[0], html.unescape(quoted[1:-1])
    local = _local_css(css)
    return quoted if local == css else quote + html.escape(local, quote=True) + quote


def _local_css(css: str) -> str:
    """``css`` with every ``@import`` of another host dropped, every ``url(...)`` of another host made ``none`` (a
    valid value wherever CSS takes an image: ``background: none 0 0 no-repeat`` draws nothing) and any other string
    naming another host (``image-set("https://...")``) emptied. Read as tokens: a ")" or ";" inside a quoted URL
    does not end it, and comments (which could hide a quote) go first."""
    if not EXTERNAL_RESOURCE.search(css):
        return css
    css = _CSS_COMMENT.sub("", css)
    css = _CSS_IMPORT_RULE.sub(lambda m: "" if _external(m["target"]) else m[0], css)
    css = _CSS_URL_TOKEN.sub(lambda m: "none" if _external(m["target"]) else m[0], css)
    return _CSS_STRING_TOKEN.sub(lambda m: '""' if _external(m[0]) else m[0], css)


def _external(target: str) -> bool:
    """Whether a CSS url() argument, @import target or string (quotes and escapes as written) names another host."""
    if target[:4].lower() == "url(":
        target = target[4:-1].strip()
    text = target[1:-1] if target[:1] in "\"'" and len(target) > 1 else target
    text = re.sub(r"\\(.)", r"\1", text)  # CSS escapes: h\ttps is https
    return bool(_IS_EXTERNAL.match(text))


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
