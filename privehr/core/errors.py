"""Errors a user can act on: each names the input, the problem and the fix.

:func:`settings_error` turns pydantic's ``ValidationError`` (a settings file, the command line's options, a table
spec) into one line per problem: where it came from, the field by name (``attribute 'hr'``, ``privacy.delta``),
what is wrong and the fix. The value given is never echoed: a spec's bounds and categories can be private.

>>> from pydantic import BaseModel, ConfigDict
>>> class Attribute(BaseModel):
...     name: str
...     valid_low: float = 0
>>> class Spec(BaseModel):
...     model_config = ConfigDict(extra="forbid")
...     attributes: list[Attribute]
>>> raw = {"attributes": [{"name": "hr", "valid_low": "secret-173"}], "colour": 1}
>>> try:
...     Spec.model_validate(raw)
... except ValueError as err:
...     print(settings_error(err, "table spec s.yaml", raw))
table spec s.yaml: attribute 'hr', valid_low: not a number. Fix: give a number
table spec s.yaml: colour: not a setting of this file. Fix: remove it, or check its spelling and section
"""

from __future__ import annotations

__all__ = ["InputError", "settings_error", "problem_lines", "where_in_text"]


class InputError(ValueError):
    """Bad input data or configuration. ``str(err)`` is the whole message shown to the user."""


# pydantic error type -> (what is wrong, the fix); the message of every other type is pydantic's own ``msg``, which
# states the rule (a bound of the schema, the choices), never the value given
_KNOWN = {
    "missing": ("required and absent", "add it"),
    "extra_forbidden": ("not a setting of this file", "remove it, or check its spelling and section"),
    "float_parsing": ("not a number", "give a number"),
    "float_type": ("not a number", "give a number"),
    "int_parsing": ("not a whole number", "give a whole number"),
    "int_type": ("not a whole number", "give a whole number"),
    "int_from_float": ("not a whole number", "give a whole number"),
    "bool_parsing": ("not true or false", "give true or false"),
    "bool_type": ("not true or false", "give true or false"),
    "string_type": ("not text", "give text"),
    "list_type": ("not a list", "give a list, e.g. [a, b]"),
    "dict_type": ("not a mapping", "give a mapping of settings (key: value)"),
    "model_type": ("not a mapping", "give a mapping of settings (key: value)"),
    "model_attributes_type": ("not a mapping", "give a mapping of settings (key: value)"),
    "finite_number": ("not a finite number", "give a finite number"),
}


_WHOLE = ""  # an error of the whole file (a check across fields): its message names the fields


def _item(raw, index: int):
    return raw[index] if isinstance(raw, list) and 0 <= index < len(raw) else None


def _field(loc: tuple, raw) -> str:
    """``("attributes", 2, "valid_low")`` -> ``attribute 'hr', valid_low`` (a listed item by its name where it has one,
    else by its number from 1: ``mus[1]``); other paths dotted: ``privacy.delta``."""
    segments, node = [], raw
    for key in loc:
        if isinstance(key, int):
            item = _item(node, key)
            name = item.get("name") if isinstance(item, dict) else None
            listed = segments.pop() if segments else "item"
            named = isinstance(name, str) and name.isprintable() and 0 < len(name) <= 64
            segments.append(f"{listed.removesuffix('s')} {name!r}" if named else f"{listed}[{key + 1}]")
            node = item
        else:
            segments.append(str(key))
            node = node.get(key) if isinstance(node, dict) else None
    text = ""
    for i, segment in enumerate(segments):
        text += segment if i == 0 else (", " if " " in segments[i - 1] else ".") + segment
    return text or _WHOLE


# fields whose own rule is the fix
_FIELD_FIXES = {"run_id": ("not a run id", "name one directory: letters, digits, '.', '_' and '-', starting with a "
                                           "letter or digit (not '.', '..' or a path)")}


def _problem(error: dict) -> tuple[str, str]:
    kind, loc = error.get("type", ""), error.get("loc", ())
    if loc and loc[-1] in _FIELD_FIXES and kind != "missing":
        return _FIELD_FIXES[loc[-1]]
    if kind in _KNOWN:
        return _KNOWN[kind]
    message = str(error.get("msg", "invalid"))
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    if kind in ("value_error", "assertion_error"):  # privehr's own validators: the message names the fix
        return message, ""
    return message[:1].lower() + message[1:], "change it to satisfy this"


def _type_tag(key: str) -> bool:
    """A union member's tag in an error's location (``str``, ``function-after[...]``), not a field."""
    return "[" in key or key in ("str", "int", "float", "bool", "bytes", "none", "list", "dict", "lax-or-strict")


def problem_lines(err, source: str, raw=None) -> list[str]:
    """One line per problem of a pydantic ``ValidationError`` (any other error: its text as one line)."""
    errors = getattr(err, "errors", None)
    if not callable(errors):
        return [f"{source}: {err}".replace("\n", "; ")]
    lines = {}
    for error in errors(include_url=False, include_input=False, include_context=False):
        # the first problem of each field (a union's alternatives would repeat it once per type)
        where = _field(tuple(p for p in error.get("loc", ()) if isinstance(p, int) or not _type_tag(p)), raw)
        what, fix = _problem(error)
        lines.setdefault(where, f"{source}: " + ("" if where == _WHOLE else f"{where}: ") + what
                         + (f". Fix: {fix}" if fix else ""))
    return list(lines.values())


def settings_error(err, source: str, raw=None) -> InputError:
    """An :class:`InputError` of one line per problem (``source``: e.g. ``table spec path/to.yaml``); ``raw``, the
    input as read, only lends item names (an attribute's ``name``) to the field paths, never values."""
    return InputError("\n".join(problem_lines(err, source, raw)))


def where_in_text(err) -> str:
    """Where a YAML or JSON parse error is (" at line 3, column 8"), never the text around it (a spec's values can
    be private, and the parser's excerpt spans several lines)."""
    mark = getattr(err, "problem_mark", None)
    if mark is not None:
        return f" at line {mark.line + 1}, column {mark.column + 1}"
    if getattr(err, "lineno", None) is not None:
        return f" at line {err.lineno}, column {err.colno}"
    return ""
