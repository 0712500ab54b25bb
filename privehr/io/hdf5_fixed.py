"""Streaming reads of pandas *fixed*-format frames with h5py.

``DataFrame.to_hdf(path, key)`` (format "fixed") stores a frame as plain HDF5 arrays:
``axis0*`` (columns), ``axis1*`` (row index; ``axis1_level{i}`` values and ``axis1_label{i}`` codes
for a MultiIndex), and ``block{i}_items*`` / ``block{i}_values`` (one 2-D array per dtype block).
``pandas.read_hdf`` must load a whole key; this reader resolves the index once and then reads only
bounded row windows of the value blocks, so memory stays O(window) instead of O(file).
"""

from __future__ import annotations

from collections.abc import Iterator

import h5py
import numpy as np
import pandas as pd

from privehr.core.errors import InputError

__all__ = ["FixedFrame"]


def _text(x) -> str:
    return x.decode("utf-8") if isinstance(x, (bytes, np.bytes_)) else str(x)


def _read_axis(group: h5py.Group, prefix: str) -> pd.Index:
    """An axis (``axis0``, ``axis1`` or ``block0_items``) as a pandas Index or MultiIndex."""
    variety = _text(group.attrs.get(f"{prefix}_variety", b"regular"))
    if variety == "multi":
        nlevels = int(group.attrs[f"{prefix}_nlevels"])
        levels, codes, names = [], [], []
        for i in range(nlevels):
            level = group[f"{prefix}_level{i}"]
            values = level[()]
            if values.dtype.kind == "S":
                values = np.array([_text(v) for v in values], dtype=object)
            levels.append(values)
            codes.append(group[f"{prefix}_label{i}"][()])
            name = level.attrs.get("name", None)
            names.append(None if name is None or _text(name) == "N." else _text(name))
        return pd.MultiIndex(levels=levels, codes=codes, names=names, verify_integrity=False)
    values = group[prefix][()]
    if values.dtype.kind == "S":
        values = np.array([_text(v) for v in values], dtype=object)
    return pd.Index(values)


def _is_empty_placeholder(dataset: h5py.Dataset) -> bool:
    """PyTables writes a zero-size array as a one-element placeholder with a ``shape`` attribute."""
    return "shape" in dataset.attrs and dataset.size == 1


class FixedFrame:
    """Lazy, read-only view of one fixed-format frame: index and columns now, values on demand.

    Args:
        h5: an open ``h5py.File``.
        key: the frame's key, e.g. ``"vitals_labs"``.
    """

    def __init__(self, h5: h5py.File, key: str):
        group = h5[key]
        kind = _text(group.attrs.get("pandas_type", b""))
        if kind != "frame":
            raise InputError(f"key '{key}' in {h5.filename} is stored as pandas type '{kind or 'unknown'}', "
                             "not a fixed-format frame; re-save it with DataFrame.to_hdf(path, key) "
                             "(format='fixed'), as MIMIC-Extract does.")
        self.key = key
        self._group = group
        self.columns = _read_axis(group, "axis0")
        self._blocks = []  # (positions in self.columns, dataset, transposed)
        for b in range(int(group.attrs.get("nblocks", 1))):
            items = _read_axis(group, f"block{b}_items")
            positions = self.columns.get_indexer(items)
            if (positions < 0).any():
                raise InputError(f"key '{key}' in {h5.filename} is inconsistent: block {b} holds columns "
                                 "that are not in the frame's column index; the file is corrupt.")
            values = group[f"block{b}_values"]
            self._blocks.append((positions, values, bool(values.attrs.get("transposed", 0))))
        self.nrows = self._row_count()

    def _row_count(self) -> int:
        positions, values, transposed = self._blocks[0]
        if _is_empty_placeholder(values):
            return 0
        return values.shape[0] if transposed else values.shape[1]

    @property
    def index_names(self) -> list[str]:
        if _text(self._group.attrs.get("axis1_variety", b"regular")) != "multi":
            return [None]
        return [_text(self._group[f"axis1_level{i}"].attrs.get("name", b""))
                for i in range(int(self._group.attrs["axis1_nlevels"]))]

    def index_level(self, name: str) -> np.ndarray:
        """Values of one row-index level for every row (codes resolved, no other level loaded)."""
        names = self.index_names
        if name not in names:
            raise InputError(f"key '{self.key}' has row index levels {names}; '{name}' is required.")
        i = names.index(name)
        labels = self._group[f"axis1_label{i}"]
        codes = np.empty(0, np.int64) if _is_empty_placeholder(labels) else labels[()]
        if (codes < 0).any():
            raise InputError(f"key '{self.key}' has missing values in index level '{name}'; "
                             "every row needs subject_id, hadm_id, icustay_id and hours_in.")
        return self._group[f"axis1_level{i}"][()][codes]

    def read_rows(self, start: int, stop: int, columns: np.ndarray | None = None) -> np.ndarray:
        """Rows ``start:stop`` of the given (strictly increasing) column positions, as float64."""
        columns = np.arange(len(self.columns)) if columns is None else np.asarray(columns)
        if np.any(np.diff(columns) <= 0):
            raise ValueError("column positions must be strictly increasing")
        out = np.empty((stop - start, columns.size), dtype=np.float64)
        for positions, values, transposed in self._blocks:
            wanted = np.isin(positions, columns)
            if not wanted.any():
                continue
            block = values[start:stop] if transposed else values[:, start:stop].T
            local = np.flatnonzero(wanted)
            out[:, np.searchsorted(columns, positions[local])] = block[:, local]
        return out

    def iter_row_windows(self, rows: np.ndarray, columns: np.ndarray, window: int
                         ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(row_numbers, values)`` for sorted ``rows``, reading at most ``window`` rows at a time.

        Consecutive wanted rows are grouped so that each read spans no more than ``window`` file rows;
        only the wanted rows of each read are kept.
        """
        rows = np.asarray(rows)
        i = 0
        while i < rows.size:
            start = rows[i]
            j = int(np.searchsorted(rows, start + window, side="left"))
            stop = int(rows[j - 1]) + 1
            block = self.read_rows(int(start), stop, columns)
            yield rows[i:j], block[rows[i:j] - start]
            i = j
