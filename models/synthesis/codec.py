"""Between a mixed-type table and what a synthesizer sees: codes, scaled numbers, bins, and back.

References:
    Lee, Kim, Jeong, Ro (2022). Differentially Private Normalizing Flows for Synthetic Tabular Data Generation. AAAI.

A table (as :mod:`privehr.io.ehr_table` reads it) holds each column in *frame units*: a numeric or integer
column its value, a discrete column (binary, categorical, ordinal) its category's code 0..k-1. The
synthesizers need three other views, and their output must come back as the spec's types:

* **flow inputs** (DP-HFlow, :mod:`privehr.models.nf.hflow`): continuous columns first, affinely scaled by the
  steward's bounds, center (low + high) / 2 and scale (high - low) / 4 (data-independent, so the
  scaling is inside the DP guarantee); then the discrete columns as integer codes. An integer column
  whose range high - low + 1 is at most ``MAX_LEVELS`` is discrete with code value - low (a count, a
  score), a wider one is continuous and rounded on the way back. An integer column with a ``step`` (a score
  recorded in tens) has the levels low, low + step, ... <= high: with at most ``MAX_LEVELS`` of them it is
  discrete with code (value - low) / step, so a synthesizer models its levels and never the gaps between.
* **bins** (AIM and MST, :mod:`privehr.models.synthesis.marginal`): discrete columns keep their codes; a
  continuous column is cut into ``bins`` equal-width bins of its bounds (public: no data decides the
  edges), values beyond the bounds in the outer bins. Back: a uniform draw within the bin.
* **decoded** (:meth:`TableCodec.decode`): numbers clipped to the bounds, integers rounded, a column with a
  step rounded to its nearest level low + k * step within the bounds, discrete codes rounded to the nearest
  valid code. A synthesizer that treats every column as continuous (the MAF)
  produces codes like 0.37; decoding makes them categories, and :meth:`TableCodec.labels` writes the
  categories as the spec names them.

DP-HFlow (Lee et al. 2022) dequantizes discrete columns the same way: codes plus noise in [0, 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["CodecColumn", "TableCodec", "MAX_LEVELS"]

MAX_LEVELS = 256  # an integer column with more values than this is modelled as continuous (and rounded)


@dataclass(frozen=True)
class CodecColumn:
    """One column: its kind, its valid bounds (numeric, integer), its categories (discrete kinds) and its step
    (numeric, integer: values on low + k * step; None: any value, integers any whole number)."""

    name: str
    kind: str                       # numeric, integer, binary, categorical, ordinal
    low: float | None = None
    high: float | None = None
    levels: tuple = ()
    step: float | None = None

    @property
    def cardinality(self) -> int | None:
        """k of a column modelled as discrete (codes 0..k-1), None for a continuous one."""
        if self.kind in ("binary", "categorical", "ordinal"):
            return len(self.levels)
        if self.kind == "integer" and self.low is not None and self.high is not None:
            k = (int(np.floor((self.high - self.low) / self.step + 1e-9)) + 1 if self.step is not None
                 else int(np.floor(self.high) - np.ceil(self.low)) + 1)
            return k if k <= MAX_LEVELS else None
        return None

    @property
    def top(self) -> float | None:
        """The highest valid value: the last level low + k * step <= high with a step (integer: whole), else high."""
        if self.high is None:
            return None
        if self.step is not None and self.low is not None:
            return _level(self.low + np.floor((self.high - self.low) / self.step + 1e-9) * self.step)
        return float(np.floor(self.high)) if self.kind == "integer" else self.high


class TableCodec:
    """The views of one table's columns (see the module docstring); pure, stateless beyond the spec's facts.

    >>> codec = TableCodec([CodecColumn("age", "numeric", 20, 100), CodecColumn("sex", "binary", levels=("F", "M"))])
    >>> codec.flow_inputs(pd.DataFrame({"age": [60.0, 100.0], "sex": [1.0, 0.0]})).tolist()
    [[0.0, 1.0], [2.0, 0.0]]
    >>> codec.labels(codec.decode(pd.DataFrame({"age": [130.0], "sex": [0.7]}))).to_dict("records")
    [{'age': 100.0, 'sex': 'M'}]

    A score recorded in tens is discrete by level (code 6 is 60), and decodes onto its levels:

    >>> score = TableCodec([CodecColumn("score", "integer", 0, 100, step=10)])
    >>> score.cardinalities, score.discretise(pd.DataFrame({"score": [60.0, 100.0]}), bins=8).tolist()
    ([11], [[6], [10]])
    >>> score.decode(pd.DataFrame({"score": [87.0, 93.0, 104.0, -3.0]}))["score"].tolist()
    [90.0, 90.0, 100.0, 0.0]
    """

    def __init__(self, columns: list[CodecColumn], require_bounds: bool = True):
        self.columns = list(columns)
        missing = [c.name for c in self.columns if c.cardinality is None and (c.low is None or c.high is None)]
        if missing and require_bounds:
            raise ValueError(f"columns {missing} have no valid_low/valid_high: a synthesizer scales and bins "
                             "numbers by the spec's bounds (public facts, so the scaling is inside the guarantee); "
                             "add both bounds to the spec")
        self.discrete = [c for c in self.columns if c.cardinality is not None]
        self.continuous = [c for c in self.columns if c.cardinality is None]

    @classmethod
    def from_spec(cls, spec, attributes: list[str], require_bounds: bool = True) -> "TableCodec":
        """The codec of ``attributes`` (in this order) of an :class:`~privehr.core.specs.EHRTableSpec`
        (``require_bounds=False``: only :meth:`decode` and :meth:`labels` are usable where bounds are missing)."""
        bounds = spec.bounds()
        return cls([CodecColumn(a, bounds[a].kind, bounds[a].valid_low, bounds[a].valid_high,
                                tuple(bounds[a].levels), bounds[a].step) for a in attributes], require_bounds)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def cardinalities(self) -> list[int]:
        return [c.cardinality for c in self.discrete]

    def affine(self) -> tuple[np.ndarray, np.ndarray]:
        """(center, scale) of the continuous columns: (low + high) / 2 and (high - low) / 4 (1 for equal bounds)."""
        low = np.array([c.low for c in self.continuous], float)
        high = np.array([c.high for c in self.continuous], float)
        return (low + high) / 2, np.where(high > low, (high - low) / 4, 1.0)

    def _origin_unit(self, column: CodecColumn) -> tuple[float, float]:
        """(origin, unit) of a discrete column: its value is origin + code * unit (a category: 0, 1; an integer:
        ceil(low), 1; an integer with a step: low, step)."""
        if column.kind == "integer" and column.cardinality is not None:
            return (float(column.low), float(column.step)) if column.step is not None else \
                (float(np.ceil(column.low)), 1.0)
        return 0.0, 1.0

    def _codes(self, column: CodecColumn, values: np.ndarray) -> np.ndarray:
        """A discrete column's frame values as its nearest codes 0..k-1 (float)."""
        origin, unit = self._origin_unit(column)
        return np.clip(np.rint((values - origin) / unit), 0, column.cardinality - 1)

    def _values(self, column: CodecColumn, codes: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`_codes`: frame values of (possibly fractional) codes."""
        origin, unit = self._origin_unit(column)
        return origin + codes * unit

    # -- flows ---------------------------------------------------------------------------------------------------
    def flow_inputs(self, frame: pd.DataFrame) -> np.ndarray:
        """(n, continuous + discrete): scaled continuous columns, then discrete codes (frame must be complete)."""
        center, scale = self.affine()
        continuous = (frame[[c.name for c in self.continuous]].to_numpy(float) - center) / scale
        codes = np.column_stack([self._codes(c, frame[c.name].to_numpy(float)) for c in self.discrete]) \
            if self.discrete else np.zeros((len(frame), 0))
        return np.hstack([continuous, codes])

    def from_flow(self, array: np.ndarray) -> pd.DataFrame:
        """Inverse of :meth:`flow_inputs` into frame units, decoded (:meth:`decode`)."""
        array = np.asarray(array, float)
        center, scale = self.affine()
        n_cont = len(self.continuous)
        values = {c.name: center[j] + scale[j] * array[:, j] for j, c in enumerate(self.continuous)}
        values |= {c.name: self._values(c, array[:, n_cont + j]) for j, c in enumerate(self.discrete)}
        return self.decode(pd.DataFrame(values)[self.names])

    # -- marginal methods ------------------------------------------------------------------------------------------
    def bin_edges(self, column: CodecColumn, bins: int) -> np.ndarray:
        return np.linspace(column.low, column.high, bins + 1)

    def domain(self, bins: int) -> list[int]:
        """Codes per column of :meth:`discretise`, in column order."""
        return [c.cardinality if c.cardinality is not None else bins for c in self.columns]

    def discretise(self, frame: pd.DataFrame, bins: int) -> np.ndarray:
        """(n, d) int codes: discrete columns' codes, continuous columns' bins of their bounds (beyond: outer bin)."""
        out = np.empty((len(frame), len(self.columns)), dtype=np.int64)
        for j, c in enumerate(self.columns):
            v = frame[c.name].to_numpy(float)
            if c.cardinality is not None:
                out[:, j] = self._codes(c, v)
            else:
                out[:, j] = np.clip(np.searchsorted(self.bin_edges(c, bins), v, side="right") - 1, 0, bins - 1)
        return out

    def undiscretise(self, codes: np.ndarray, bins: int, rng: np.random.Generator,
                     within=None) -> pd.DataFrame:
        """Frame units from :meth:`discretise`'s codes: a continuous value uniform within its bin (then decoded), or
        ``within(column, bin codes)`` where given (values in frame units within those bins)."""
        values = {}
        for j, c in enumerate(self.columns):
            k = codes[:, j].astype(float)
            if c.cardinality is not None:
                values[c.name] = self._values(c, k)
            elif within is not None:
                values[c.name] = within(c, codes[:, j].astype(np.int64))
            else:
                edges = self.bin_edges(c, bins)
                values[c.name] = edges[k.astype(int)] + rng.random(len(k)) * (edges[1] - edges[0])
        return self.decode(pd.DataFrame(values)[self.names])

    # -- back to the spec's types ------------------------------------------------------------------------------
    def decode(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Frame units made valid: numbers clipped to the bounds, integers rounded, a column with a step rounded to
        its nearest level low + k * step within the bounds, discrete codes rounded to the nearest valid code (NaN
        stays NaN)."""
        out = frame.copy()
        for c in self.columns:
            v = out[c.name].to_numpy(float)
            if c.kind in ("binary", "categorical", "ordinal"):
                v = np.clip(np.rint(v), 0, c.cardinality - 1)
            else:
                stepped = c.step is not None and c.low is not None
                low = -np.inf if c.low is None else (np.ceil(c.low) if c.kind == "integer" and not stepped else c.low)
                high = np.inf if c.top is None else c.top
                if stepped:
                    v = _level(c.low + np.rint((v - c.low) / c.step) * c.step)
                v = np.clip(np.rint(v) if c.kind == "integer" else v, low, high)
            out[c.name] = v
        return out

    def encode_labels(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Inverse of :meth:`labels`: categories (as written to a CSV and read back) to codes; others unchanged."""
        out = frame.copy()
        for c in self.discrete:
            if c.kind == "integer":
                continue
            by_text = {str(level): float(i) for i, level in enumerate(c.levels)}
            by_value = {}
            for i, level in enumerate(c.levels):
                try:
                    by_value[float(level)] = float(i)
                except (TypeError, ValueError):
                    pass
            out[c.name] = [by_text.get(str(v), by_value.get(_as_float(v), np.nan)) for v in out[c.name]]
        return out

    def labels(self, frame: pd.DataFrame) -> pd.DataFrame:
        """A decoded frame with each discrete column's codes replaced by its categories as the spec names them."""
        out = frame.copy()
        for c in self.columns:
            values = out[c.name].to_numpy(float)
            if c.kind == "integer":  # whole numbers written as such (NaN stays missing)
                out[c.name] = pd.array([None if np.isnan(v) else int(v) for v in values], dtype="Int64")
            elif c.cardinality is not None:
                out[c.name] = pd.Series([None if np.isnan(k) else c.levels[int(k)] for k in values], index=out.index,
                                        dtype=object)
        return out


def _level(value):
    """low + k * step without the float residue of the product (0.1 * 3 -> 0.3)."""
    return np.round(value, 10)


def _as_float(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
