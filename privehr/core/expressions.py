"""Derived-column expressions: a small arithmetic language, parsed into an allow-listed tree and never run by Python.

An expression holds names of columns, numbers, ``+ - * / ** // %``, comparisons (``< <= > >= == !=``, chained),
``and``/``or``/``not`` (also pandas' ``&`` and ``|``, with their precedence, and ``~``) and the functions of
:data:`FUNCTIONS`, called with positional arguments. Anything else (attribute access, subscripts, text, lambdas,
comprehensions, keyword arguments, pandas' ``@`` variables, names starting with ``__``) is refused. A spec is a file
a steward may receive from someone else: what it computes is checked here, at validation, and evaluated by
:func:`privehr.models.data.derived_columns.add_derived` from the checked tree alone.

>>> type(parse_expression("2 / 3 * d + 1 / 3 * s", ["d", "s"]).body).__name__
'BinOp'
>>> expression_names("where(m > 20 & d < 5, 1, 0)")
['m', 'd']
>>> parse_expression("d.__class__", ["d"])
Traceback (most recent call last):
...
privehr.core.expressions.ExpressionError: not allowed: attribute access ('.'); ...
"""

from __future__ import annotations

import ast
import io
import math
import tokenize
from collections.abc import Iterable

__all__ = ["FUNCTIONS", "BINARY", "COMPARE", "MAX_LENGTH", "ExpressionError", "parse_expression", "expression_names"]

# name -> number of positional arguments; the evaluator maps each to its numpy function
FUNCTIONS = {"abs": 1, "sqrt": 1, "log": 1, "exp": 1, "minimum": 2, "maximum": 2, "clip": 3, "where": 3}
BINARY = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.FloorDiv, ast.Mod)
COMPARE = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
MAX_LENGTH = 1000

_ALLOWED = ("column names, numbers, + - * / ** // %, comparisons, and/or/not and the functions "
            + ", ".join(FUNCTIONS))
# the refused node types a user is likely to write, as a user would call them
_REFUSED = {ast.Attribute: "attribute access ('.')", ast.Subscript: "subscripts ('[...]')",
            ast.Lambda: "lambda", ast.ListComp: "comprehensions", ast.SetComp: "comprehensions",
            ast.DictComp: "comprehensions", ast.GeneratorExp: "comprehensions", ast.NamedExpr: "':='",
            ast.JoinedStr: "f-strings", ast.IfExp: "'... if ... else ...'", ast.Starred: "'*' unpacking",
            ast.Tuple: "tuples", ast.List: "lists", ast.Set: "sets", ast.Dict: "dicts", ast.Slice: "slices",
            ast.MatMult: "'@'", ast.BitXor: "'^'", ast.LShift: "'<<'", ast.RShift: "'>>'", ast.In: "'in'",
            ast.NotIn: "'not in'", ast.Is: "'is'", ast.IsNot: "'is not'"}


class ExpressionError(ValueError):
    """An expression outside the allowed language; ``str(err)`` says what, and what is allowed."""


def _refuse(what: str) -> ExpressionError:
    return ExpressionError(f"not allowed: {what}; use {_ALLOWED}")


def _shown(name: str) -> str:
    return repr(name) if name.isprintable() and len(name) <= 64 else "a name"


def _pandas_booleans(text: str) -> str:
    """``&`` and ``|`` as ``and`` and ``or``, as pandas reads them (``a > 1 & b < 2`` is ``(a > 1) and (b < 2)``)."""
    words = {"&": "and", "|": "or"}
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        raise ExpressionError("not a valid expression (unbalanced brackets or quotes); write arithmetic over "
                              "column names, e.g. 2 / 3 * a + 1 / 3 * b") from None
    if any(t.type == tokenize.OP and t.string == "@" for t in tokens):
        raise _refuse("'@' (pandas' local variables, matrix products)")
    if any(t.type == tokenize.OP and t.string in ("&=", "|=", "^=") for t in tokens):
        raise _refuse("assignment")
    return tokenize.untokenize((tokenize.NAME if t.type == tokenize.OP and t.string in words else t.type,
                                words.get(t.string, t.string) if t.type == tokenize.OP else t.string)
                               for t in tokens)


def _tree(text: str) -> ast.Expression:
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError("empty expression; write arithmetic over column names, e.g. 2 / 3 * a + 1 / 3 * b")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"expression longer than {MAX_LENGTH} characters; split it into several derived "
                              "columns")
    try:
        return ast.parse(_pandas_booleans(text), mode="eval")
    except ExpressionError:
        raise
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: a NUL byte
        raise ExpressionError("not a valid expression; write arithmetic over column names, e.g. "
                              "2 / 3 * a + 1 / 3 * b") from None


def _check(node: ast.AST, columns: set[str] | None) -> None:
    """Raise :class:`ExpressionError` for the first node outside the language (``columns`` None: any name)."""
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, (str, bytes)):
            raise _refuse("text")
        if isinstance(value, complex):
            raise _refuse("complex numbers")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _refuse(f"the constant {value!r}")  # True, False, None, ...
        try:
            finite = math.isfinite(float(value))
        except OverflowError:
            finite = False
        if not finite:
            raise ExpressionError("a number too large to be finite; give finite numbers")
    elif isinstance(node, ast.Name):
        if node.id.startswith("__"):
            raise _refuse(f"the name {_shown(node.id)} (names starting with '__')")
        if columns is not None and node.id not in columns:
            raise ExpressionError(f"{_shown(node.id)} is not an attribute of the spec or an earlier derived column"
                                  + (f" (call {node.id} with its arguments)" if node.id in FUNCTIONS else "")
                                  + "; use the names of attributes, or derived columns listed above it")
    elif isinstance(node, ast.BinOp):
        if not isinstance(node.op, BINARY):
            raise _refuse(_REFUSED.get(type(node.op), f"the operator {type(node.op).__name__}"))
        _check(node.left, columns)
        _check(node.right, columns)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.UAdd, ast.USub, ast.Not, ast.Invert)):
            raise _refuse(f"the operator {type(node.op).__name__}")
        _check(node.operand, columns)
    elif isinstance(node, ast.Compare):
        for op in node.ops:
            if not isinstance(op, COMPARE):
                raise _refuse(_REFUSED.get(type(op), f"the comparison {type(op).__name__}"))
        for part in (node.left, *node.comparators):
            _check(part, columns)
    elif isinstance(node, ast.BoolOp):
        for value in node.values:
            _check(value, columns)
    elif isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name is None:
            _check(node.func, columns)  # what is called: an attribute, a subscript, a lambda ...
            raise _refuse("calling anything but a named function")
        if name not in FUNCTIONS:
            raise _refuse(f"calling {_shown(name)}")
        if node.keywords:
            raise _refuse("keyword arguments")
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise _refuse("'*' unpacking")
        if len(node.args) != FUNCTIONS[name]:
            raise ExpressionError(f"{name} takes {FUNCTIONS[name]} argument(s), given {len(node.args)}")
        for arg in node.args:
            _check(arg, columns)
    else:
        raise _refuse(_REFUSED.get(type(node), type(node).__name__))


def parse_expression(text: str, columns: Iterable[str] | None = None) -> ast.Expression:
    """The checked tree of ``text``; every name among ``columns`` (None: any name not starting with ``__``).

    Raises:
        ExpressionError: what is not allowed (its message names no value of the table).
    """
    tree = _tree(text)
    try:
        _check(tree.body, None if columns is None else set(columns))
    except RecursionError:
        raise ExpressionError("expression nested too deeply; split it into several derived columns") from None
    return tree


def expression_names(text: str) -> list[str]:
    """The column names ``text`` reads, in order of first use (function names are not columns)."""
    tree = parse_expression(text)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    names = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in called),
                   key=lambda n: (n.lineno, n.col_offset))
    return list(dict.fromkeys(n.id for n in names))
