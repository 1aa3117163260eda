"""The public grid a quantile chooses among (dpsql.analysis.selection_aggregates): its cells,
the value each releases, and the SQL that puts a row's value in its cell. Depends on the
declared bounds and type only (public metadata)."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, replace

import numpy as np
from sqlglot import exp

from dpsql.analysis.aggregates import clamp_case
from dpsql.analysis.trees import copy_tree

#: most grid cells a quantile chooses among (a public constant): a float column's bounds are
#: cut into this many cells; an integer column whose bounds hold at most this many integers
#: gets one cell per integer (an exact grid)
MAX_CELLS = 1024


@dataclass(frozen=True)
class SelectionAggregate:
    """One distinct quantile aggregate: ``quantile`` in [0, 1]; ``discrete`` targets the rank
    ``floor(q (n - 1)) + 1`` (QUANTILE_DISC, MIN, MAX), else ``q (n - 1) + 1`` (CONT)."""

    function: str
    quantile: float
    discrete: bool


@dataclass(frozen=True)
class Grid:
    """The public candidates of a quantile: ``cells`` cells of width ``step`` from ``lower``;
    cell j releases :meth:`values` [j] (the integer ``lower + j`` on an exact integer grid,
    else the cell's midpoint). Depends on the bounds and the declared type only."""

    lower: float
    upper: float
    cells: int
    step: float
    integer: bool
    #: a DATE argument: values are days after ``origin`` (the first day of the bounds), and
    #: the released values are dates
    origin: datetime.date | None = None

    @staticmethod
    def of_days(first: datetime.date, last: datetime.date) -> Grid:
        """The grid of a DATE column with day bounds: every day when there are at most
        MAX_CELLS of them, else MAX_CELLS cells of equal length (in days)."""
        grid = Grid.of((0, (last - first).days), True)
        return replace(grid, origin=first)

    @staticmethod
    def of(bounds: tuple[float, float], integer_type: bool) -> Grid:
        lo, hi = float(bounds[0]), float(bounds[1])
        if integer_type and lo.is_integer() and hi.is_integer() and hi - lo + 1 <= MAX_CELLS:
            return Grid(lo, hi, int(hi - lo) + 1, 1.0, True)
        if hi <= lo:  # a single point: one cell
            return Grid(lo, hi, 1, 0.0, False)
        return Grid(lo, hi, MAX_CELLS, (hi - lo) / MAX_CELLS, False)

    def values(self) -> np.ndarray:
        j = np.arange(self.cells, dtype=np.float64)
        if self.integer:
            return self.lower + j
        if self.step == 0.0:
            return np.full(self.cells, self.lower)
        return self.lower + (j + 0.5) * self.step

    def released(self) -> np.ndarray:
        """What cell j releases: int64 on an exact integer grid, dates on a DATE grid (the
        day of the cell's midpoint, rounded down), else float64."""
        values = self.values()
        if self.origin is not None:
            origin = self.origin
            out = np.empty(self.cells, dtype=object)
            out[:] = [origin + datetime.timedelta(days=math.floor(v)) for v in values]
            return out
        return values.astype(np.int64) if self.integer else values

    def cell_sql(self, arg: exp.Expression) -> exp.Expression:
        """The cell of ``arg`` clamped to the bounds; NULL stays NULL (CASE, never LEAST or
        GREATEST, which skip NULLs). Total for any value, NaN and infinities included (the
        clamp's CASE sends NaN to the upper bound, as the SUM clamp does, so the cast to
        BIGINT is of a finite number in [0, cells]): the exact query cannot fail on one row."""
        if self.origin is not None:  # days after the first day of the bounds
            arg = exp.DateDiff(
                this=exp.TryCast(this=copy_tree(arg), to=exp.DataType.build("DATE")),
                expression=exp.Cast(this=exp.Literal.string(self.origin.isoformat()),
                                    to=exp.DataType.build("DATE")),
                unit=exp.var("DAY"))
        value: exp.Expression = exp.TryCast(this=copy_tree(arg),
                                            to=exp.DataType.build("DOUBLE"))
        clamped = clamp_case(value, self.lower, self.upper)
        if self.step == 0.0:
            return exp.Case(ifs=[exp.If(this=exp.Is(this=clamped, expression=exp.Null()),
                                        true=exp.Null())],
                            default=exp.Literal.number(0))
        cell = exp.Cast(this=exp.Floor(this=exp.Div(
            this=exp.Paren(this=exp.Sub(this=clamped, expression=exp.convert(self.lower))),
            expression=exp.convert(self.step))), to=exp.DataType.build("BIGINT"))
        last = exp.Literal.number(self.cells - 1)
        return exp.Case(ifs=[exp.If(this=exp.GT(this=copy_tree(cell), expression=last),
                                    true=copy_tree(last))], default=cell)
