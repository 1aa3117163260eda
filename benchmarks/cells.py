"""Matching the cells of a released answer to the true answer, and their errors.

A **cell** is one (row key, output column) of an answer. The row key is the tuple of the
query's group-key columns (the columns dpsql's analysis marks ``group_key``), rendered as
strings (``NULL`` for None) so that a key matches whatever Python type either side returns;
a query without group keys has one row, whose key is ``()``. The **value columns** are the
output columns computed from at least one noisy measurement (aggregates and expressions over
them); constant columns (``SELECT 3 AS three``) and keys carry no error. Columns are matched
by position: dpsql's analysis lists the output columns in SELECT order, as DuckDB returns them
for the analyst's SQL and as SmartNoise returns them.

Relative error of a cell in one draw: ``|noisy - true| / |true|``. Cells whose true value is
0 or NULL have no relative error: they are counted apart (``zero_cells``), with the median
absolute error of their released values. A true cell absent from a draw's release (a LIMIT
over noisy values kept other rows, or SmartNoise censored the group) is counted in
``cells_missing_from_release`` and contributes no error for that draw.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Layout:
    """Which output positions are keys and which are noisy values."""

    keys: tuple[int, ...]
    values: tuple[int, ...]

    @classmethod
    def of(cls, analysis: Any) -> Layout:
        cols = analysis.columns
        keys = tuple(i for i, c in enumerate(cols) if c.kind == "group_key")
        values = tuple(i for i, c in enumerate(cols) if c.kind != "group_key" and c.measurements)
        return cls(keys, values)

    def matchable(self, true_rows: Sequence[Sequence[Any]]) -> bool:
        """Whether released rows can be matched to ``true_rows``: by key, or the one row."""
        return bool(self.keys) or len(true_rows) <= 1

    def key(self, row: Sequence[Any], index: int) -> tuple[str, ...]:
        if not self.keys:
            return (str(index),)  # no group key: rows in order (normally one row)
        return tuple("NULL" if row[i] is None else str(row[i]) for i in self.keys)

    def cells(self, rows: Sequence[Sequence[Any]]) -> dict[tuple[tuple[str, ...], int], Any]:
        out: dict[tuple[tuple[str, ...], int], Any] = {}
        for n, row in enumerate(rows):
            k = self.key(row, n)
            for j in self.values:
                out[(k, j)] = _number(row[j]) if j < len(row) else None
        return out


def _number(v: Any) -> float | None:
    if v is None or isinstance(v, (str, bytes)):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def errors(truth: dict, draws: list[dict]) -> dict[str, Any]:
    """Relative and absolute errors of ``draws`` (each a :meth:`Layout.cells` dict) against
    ``truth`` (the same of the true answer)."""
    cells = [c for c, v in truth.items() if v is not None and v != 0.0]
    zero = [c for c, v in truth.items() if v is not None and v == 0.0]
    rel = np.full((len(cells), len(draws)), np.nan)
    absolute = np.full((len(cells), len(draws)), np.nan)
    for d, released in enumerate(draws):
        for i, c in enumerate(cells):
            noisy = released.get(c)
            if noisy is not None:
                absolute[i, d] = abs(noisy - truth[c])
                rel[i, d] = absolute[i, d] / abs(truth[c])
    zero_abs = [abs(draws[0][c]) for c in zero if draws and draws[0].get(c) is not None]
    seen = ~np.isnan(rel).all(axis=1) if len(cells) else np.array([], dtype=bool)
    per_cell = np.nanmedian(rel[seen], axis=1) if seen.any() else np.array([])
    per_cell_abs = np.nanmean(absolute[seen], axis=1) if seen.any() else np.array([])
    flat_abs = absolute[~np.isnan(absolute)]
    return {
        "cells": len(cells),
        "cells_missing_from_release": int((~seen).sum()) if len(cells) else 0,
        "median_rel_error": float(np.median(per_cell)) if len(per_cell) else None,
        "max_cell_rel_error": float(np.max(per_cell)) if len(per_cell) else None,
        "mae": float(per_cell_abs.mean()) if len(per_cell_abs) else None,
        "mae_se": (float(flat_abs.std(ddof=1) / math.sqrt(len(flat_abs)))
                   if len(flat_abs) > 1 else None),
        "zero_cells": len(zero),
        "zero_cells_median_abs_error": statistics.median(zero_abs) if zero_abs else None,
    }
