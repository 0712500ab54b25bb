"""Columns computed from others, e.g. eq. 5 of Su et al. 2023: mean PAP = 2/3 diastolic PAP + 1/3 systolic PAP,
hypertensive = 1[mean PAP > 20 mmHg]. An expression is arithmetic, comparisons, and/or/not and a few named functions
over column names (:mod:`privehr.core.expressions`, which checks it); it is evaluated here from its checked tree with
numpy, never by Python's ``eval``. Conditions are 0/1 in arithmetic and in the result; a division by zero gives
inf or nan, as numpy does.

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.
"""

from __future__ import annotations

import ast
import functools
import operator

import numpy as np
import pandas as pd

from privehr.core.expressions import FUNCTIONS, expression_names, parse_expression

__all__ = ["add_derived", "derived_sources", "evaluate"]


def _truth(x):
    return np.asarray(x) != 0  # nan is true, as in numpy


def _number(x):
    """A condition as 0/1 where arithmetic uses it (numpy refuses ``-`` on booleans)."""
    return x.astype(np.float64) if np.asarray(x).dtype == bool else x


_BINARY = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.Div: np.true_divide,
           ast.Pow: np.power, ast.FloorDiv: np.floor_divide, ast.Mod: np.mod}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
            ast.Eq: operator.eq, ast.NotEq: operator.ne}
_NUMPY = {"abs": np.abs, "sqrt": np.sqrt, "log": np.log, "exp": np.exp, "minimum": np.minimum,
          "maximum": np.maximum, "clip": np.clip, "where": lambda c, a, b: np.where(_truth(c), a, b)}
assert _NUMPY.keys() == FUNCTIONS.keys(), "every function of the expression language has its numpy function"


def _value(node: ast.AST, columns: dict[str, np.ndarray]):
    """The value of a checked node: float64 arrays (numbers as float64 scalars), comparisons as booleans."""
    if isinstance(node, ast.Constant):
        return np.float64(node.value)
    if isinstance(node, ast.Name):
        return columns[node.id]
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_number(_value(node.left, columns)), _number(_value(node.right, columns)))
    if isinstance(node, ast.UnaryOp):  # not and ~: logical not
        operand = _value(node.operand, columns)
        if isinstance(node.op, (ast.Not, ast.Invert)):
            return np.logical_not(_truth(operand))
        return _number(operand) if isinstance(node.op, ast.UAdd) else np.negative(_number(operand))
    if isinstance(node, ast.Compare):  # a < b <= c is a < b and b <= c
        values = [_value(n, columns) for n in (node.left, *node.comparators)]
        parts = [_COMPARE[type(op)](a, b) for op, a, b in zip(node.ops, values, values[1:])]
        return functools.reduce(np.logical_and, parts)
    if isinstance(node, ast.BoolOp):
        combine = np.logical_and if isinstance(node.op, ast.And) else np.logical_or
        return functools.reduce(combine, [_truth(_value(v, columns)) for v in node.values])
    if isinstance(node, ast.Call):
        return _NUMPY[node.func.id](*(_number(_value(a, columns)) for a in node.args))
    raise AssertionError(f"{type(node).__name__} passed the expression check")  # parse_expression refuses it


def evaluate(expression: str, frame: pd.DataFrame) -> pd.Series:
    """``expression`` over ``frame``'s columns, one value per row (booleans as 0/1, else floats).

    >>> evaluate("where(a > 1 & b < 5, a / b, 0)", pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": [1.0, 0.0, 6.0]}))
    0    0.0
    1    inf
    2    0.0
    dtype: float64

    Raises:
        privehr.core.expressions.ExpressionError: the expression is outside the language, or names a column
            ``frame`` lacks.
        ValueError: a column it reads is not numeric.
    """
    tree = parse_expression(expression, frame.columns.astype(str))
    columns = {}
    for name in expression_names(expression):
        try:
            columns[name] = np.asarray(frame[name], dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"column {name!r} is not numeric") from None
    with np.errstate(all="ignore"):
        value = np.broadcast_to(_value(tree.body, columns), (len(frame),))
    return pd.Series(value.astype(int) if value.dtype == bool else value.astype(float), index=frame.index)


def derived_sources(derived: list, attributes: list[str]) -> dict[str, list[str]]:
    """The attributes each derived column is computed from (directly, or through an earlier derived column).

    >>> from types import SimpleNamespace as D
    >>> derived_sources([D(name="m", expression="2 / 3 * a + 1 / 3 * b"), D(name="h", expression="m > 20")],
    ...                 ["a", "b", "c"])
    {'m': ['a', 'b'], 'h': ['a', 'b']}
    """
    sources: dict[str, list[str]] = {}
    for column in derived:
        names = expression_names(column.expression)
        found = [n for n in names if n in attributes] + [s for n in names for s in sources.get(n, [])]
        sources[column.name] = list(dict.fromkeys(found))
    return sources


def add_derived(frame: pd.DataFrame, derived: list) -> pd.DataFrame:
    """``frame`` with each ``derived`` column (objects with ``name`` and ``expression``) appended in order."""
    out = frame.copy()
    for column in derived:
        try:
            out[column.name] = evaluate(column.expression, out)
        except ValueError as err:  # ExpressionError among them
            raise ValueError(f"derived column {column.name!r}: {err}") from None
    return out
