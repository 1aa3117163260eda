"""Reading R2T's truncated sums and releasing them (a query under a privacy unit without
GROUP BY; the executed query is :func:`dpsql.units.rewrite.unit_contributions`'s).

The exact query returns one of three layouts (dpsql.units.rewrite), all giving, per part i
(dpsql.units.analysis.R2TPart), the units' truncated sums U(tau_j) = sum_u min(c_u, tau_j b)
over the part's own levels (dpsql.units.grid) and c_NULL, the rows of no unit (``__u`` NULL)
in full:
- with a SUM part, one row per unit (:func:`levels_from_units`: ``__nu``, then per part the
  unit's contribution truncated at the top level, c_NULL and the part's k), summed here in
  exact integers and converted once; a backend that is not columnar (Spark) runs the plan's
  one-row query of the same sums instead (:func:`levels_from_one_row`: ``__r<i>_<j>``, then
  ``__z<i>``);
- when every part is a COUNT (dpsql.units.rewrite.counts_only), the histogram of the units'
  contributions, from which :func:`levels_from_histogram` computes U(tau_j) + c_NULL in exact
  integers (over many units of a columnar backend, that histogram is counted in numpy from
  one unit id per row: dpsql.units.flat_counts, :func:`histogram_of_ids`).
:func:`read_truncated_parts` returns the levels and c_NULL (:class:`Truncated`);
:func:`r2t_bins` reads them, calls ``drawn`` before any noise, releases the levels with R2T
and adds c_NULL after (dpsql.units.noise: in exact integers a count's c_NULL may as well sit
inside its levels; a SUM's DOUBLE level carrying a c_NULL far above tau_j would round by more
than tau_j between neighbours), and returns the single bin of noisy measurements the
post-processing reads, with each measurement's released interval.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpsql.backends.base import Backend
from dpsql.errors import ProgrammingError
from dpsql.execute.exact import CompiledPlan
from dpsql.execute.layout import Bins
from dpsql.noise.mechanisms import Sampler
from dpsql.noise.plan import NoisePlan
from dpsql.units.analysis import UnitRelease
from dpsql.units.flat_counts import MANY_UNITS
from dpsql.units.grid import part_grid, part_levels
from dpsql.units.multi_execute import coded_ids
from dpsql.units.multi_rewrite import FLAT_ROWS
from dpsql.units.noise import R2TOutcome, release_r2t_measurements
from dpsql.units.rewrite import counts_only


@dataclass(frozen=True)
class Truncated:
    """Per R2T part: ``levels[i]``, the truncated levels R2T releases, and ``no_unit[i]``,
    the rows of no unit's c_NULL the release adds after the noise (0 when the levels hold it:
    the counts' histogram, exact integers; over two units, the rows of neither unit:
    dpsql.units.multi_execute.neither_in_full)."""

    levels: list[np.ndarray]
    no_unit: list[float]

    def totals(self) -> list[np.ndarray]:
        """Q(tau_j) = the levels plus c_NULL (the exact answers' view; in float64 for sums)."""
        return [lv + c if c else lv for lv, c in zip(self.levels, self.no_unit, strict=True)]


def read_truncated_parts(backend: Backend, compiled: CompiledPlan, params: Sequence[Any],
                         release: UnitRelease) -> Truncated:
    """Per R2T part, the levels and c_NULL (exact: reads private data; module docstring)."""
    if release.more:  # two units: the flow truncation (dpsql.units.multi)
        from dpsql.units.multi_execute import read_pair_truncated

        return Truncated(*read_pair_truncated(backend, compiled, params, release))
    bindings = compiled.plan.exact_bindings(params)
    if counts_only(release):
        if compiled.fallback is not None and backend.columnar and many_units(backend, release):
            # one id per row, counted in numpy: cheaper than grouping many units in the
            # database, and the same histogram (dpsql.units.flat_counts); past its guard the
            # histogram query runs
            (ids,), _ = backend.execute_flat_columns(compiled.fallback[0], bindings,
                                                      FLAT_ROWS)
            if ids.shape[0] <= FLAT_ROWS:
                return truncated_parts(histogram_of_ids(ids), release)
            del ids
        rows, _ = backend.execute(compiled.exact, bindings)
        return truncated_parts(rows, release)
    if compiled.fallback is not None and not backend.columnar:
        # Spark would collect a row per unit to its driver (a result size limit the number of
        # units could pass): the same levels as one row (dpsql.units.rewrite.one_row_levels)
        rows, _ = backend.execute(compiled.fallback[0], bindings)
        return levels_from_one_row(rows, release)
    columns, _ = backend.execute_columns(compiled.exact, bindings)
    return levels_from_units(columns, release)


def read_truncated(backend: Backend, compiled: CompiledPlan, params: Sequence[Any],
                   release: UnitRelease) -> list[np.ndarray]:
    """Per R2T part, Q(tau_j) at every level, c_NULL included (:meth:`Truncated.totals`)."""
    return read_truncated_parts(backend, compiled, params, release).totals()


def truncated_levels(rows: Sequence[Sequence[Any]], release: UnitRelease) -> list[np.ndarray]:
    """Per R2T part, Q(tau_j) at every level from the rows of the executed query (either
    layout, module docstring), c_NULL included."""
    return truncated_parts(rows, release).totals()


def truncated_parts(rows: Sequence[Sequence[Any]], release: UnitRelease) -> Truncated:
    """Per R2T part, the levels and c_NULL from the rows of the executed query (either
    layout, module docstring)."""
    if counts_only(release):
        levels = levels_from_histogram(rows, release)
        return Truncated(levels, [0.0] * len(levels))
    width = 1 + 3 * len(release.parts)
    if any(len(row) != width for row in rows):
        raise _malformed()
    columns = [np.array([row[c] for row in rows], dtype=object) for c in range(width)]
    return levels_from_units(columns, release)


def levels_from_one_row(rows: Sequence[Sequence[Any]], release: UnitRelease) -> Truncated:
    """Per part, the levels and c_NULL from dpsql.units.rewrite.one_row_levels's one row:
    ``__r<i>_<j>`` for every level, then ``__z<i>`` (NULL, a sum over no unit, is 0)."""
    counts = [len(part_levels(part, release.unit)) for part in release.parts]
    if len(rows) != 1 or len(rows[0]) != sum(counts) + len(counts):
        raise _malformed()
    levels, no_unit = [], []
    start = 0
    for part, n in zip(release.parts, counts, strict=True):
        values = [0 if v is None else v for v in rows[0][start:start + n + 1]]
        start += n + 1
        levels.append(np.array(values[:n], dtype=np.int64 if part.integer else np.float64))
        no_unit.append(float(values[n]))
    return Truncated(levels, no_unit)


def levels_from_units(columns: Sequence[Any], release: UnitRelease) -> Truncated:
    """Per part i, the levels ``sum over units of min(c_u, tau_j b)`` and c_NULL from the
    per-unit query's columns (dpsql.units.rewrite: ``__nu``, then per part ``__q<i>`` =
    min(c_u, T_i), ``__z<i>`` (c_NULL, on the row of no unit) and ``__k<i>`` (the constant k
    of a SUM's steps 2^-k; 0 for a COUNT)): every sum in exact integers (each __q at most
    2^62, :func:`_steps_of`), a SUM part's level converted to its value once,
    ``float(total) * 2^-k``, as SQL's ``CAST(SUM(..) AS DOUBLE) * 2^-k`` of the same exact
    total (correctly rounded). No row (no unit, no row of no unit): every level 0. Anything
    else is a ProgrammingError (never a silent miscount)."""
    if len(columns) != 1 + 3 * len(release.parts):
        raise _malformed()
    no_unit_row = _flags(columns[0])
    units = ~no_unit_row
    levels, no_unit = [], []
    for i, part in enumerate(release.parts):
        q = _steps_of(columns[1 + 3 * i], units)
        z = [v for v in np.ma.asarray(columns[2 + 3 * i])[no_unit_row].tolist()
             if v is not None]
        k = _constant(columns[3 + 3 * i])
        if len(z) > 1:
            raise _malformed()
        unit_bound, _ = part_grid(part, release.unit)
        caps = [Fraction(t) * Fraction(unit_bound) for t in part_levels(part, release.unit)]
        if part.integer:
            levels.append(np.array([_sum_of_min(q, int(c)) for c in caps], dtype=np.int64))
        else:  # the level in steps, rounded down: min(c, T) = min(c, floor T), c integer
            levels.append(np.array([math.ldexp(float(_sum_of_min(q, math.floor(c * 2**k))),
                                               -k) for c in caps], dtype=np.float64))
        no_unit.append(float(z[0]) if z else 0.0)
    return Truncated(levels, no_unit)


def _constant(column: Any) -> int:
    """The ``__k`` column's one whole value (0 over no row), checked in one vectorised pass:
    a Python set of a row per unit cost ~7 ms at 150k units."""
    values = np.ma.asarray(column)
    data = np.ma.getdata(values)
    if not data.size:
        return 0
    first = data[0]
    if np.ma.is_masked(values) or not _whole(first) or not bool(np.all(data == first)):
        raise _malformed()
    return int(first)


def _whole(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Integral)


def _flags(column: Any) -> np.ndarray:
    """The ``__nu`` column as booleans (exactly one row of no unit at most)."""
    values = np.ma.asarray(column)
    data = np.ma.getdata(values)
    if np.ma.is_masked(values) or (data.dtype == object and not all(
            isinstance(v, (bool, np.bool_)) for v in data)):
        raise _malformed()
    flags = np.asarray(data, dtype=bool)
    if int(flags.sum()) > 1:
        raise _malformed()
    return flags


def _steps_of(column: Any, units: np.ndarray) -> np.ndarray:
    """The units' ``__q`` as int64 (whole, >= 0, at most 2^62: every top level is, in steps,
    max_sum and max_contribution at most 2^62 with k >= 0 under R2T, the query's BIGINT)."""
    values = np.ma.asarray(column)[units]
    if np.ma.is_masked(values):
        raise _malformed()
    data = np.ma.getdata(values)
    if data.dtype.kind not in "iu":
        if not all(_whole(v) for v in data):
            raise _malformed()
        data = np.array([int(v) for v in data], dtype=np.int64)
    data = data.astype(np.int64, copy=False)
    if data.size and (int(data.min()) < 0 or int(data.max()) > 2**62):
        raise _malformed()
    return data


def _sum_of_min(q: np.ndarray, cap: int) -> int:
    """``sum(min(q, cap))`` exactly: each term at most 2^62, summed as its high bits (>> 31,
    at most 2^31) and its low 31 bits in int64 (each half-sum below 2^63 for fewer than 2^32
    units), joined as a Python int."""
    if q.size >= 2**32:
        raise _malformed()
    m = np.minimum(q, min(cap, 2**62))  # every q is at most 2^62: the same minimum
    return (int(np.sum(m >> 31)) << 31) + int(np.sum(m & (2**31 - 1)))


def levels_from_histogram(rows: Sequence[Sequence[Any]], release: UnitRelease
                          ) -> list[np.ndarray]:
    """Per COUNT part i, ``Q(tau_j) = sum_u min(c_u, tau_j b) + c_NULL`` from the histogram
    rows ``(__h0, .., __h<k-1>, __n, __z)`` of dpsql.units.rewrite's counts-only query: ``n``
    units contribute ``c`` rows to part i where ``__h<i> = c`` (with several parts, exactly one
    ``__h`` of a row is not NULL: one grouping set per part), and ``z`` (0 or 1) says whether
    the rows of no unit contribute ``c`` too (at most one row of a part says so: they are one
    group). The units with contribution c are n equal terms, and the rows of no unit are
    added in full, never truncated (they are the same in both neighbours), so ``sum over part
    i's rows of (min(c, tau_j b) * n + c * z)`` is the same integer, computed in Python
    integers (exact, no overflow), one int64 per level (each at most the number of aggregated
    rows). Precondition: every part is a COUNT (b = 1). Anything else in ``rows`` is a
    ProgrammingError (never a silent miscount)."""
    k = len(release.parts)
    hist: list[list[tuple[int, int]]] = [[] for _ in range(k)]
    no_unit = [0] * k
    seen = [False] * k
    for row in rows:
        if len(row) != k + 2:
            raise _malformed()
        present = [i for i in range(k) if row[i] is not None]
        if len(present) != 1:
            raise _malformed()
        i = present[0]
        c, n, z = _count(row[i]), _count(row[k]), _count(row[k + 1])
        if z > 1 or n + z <= 0 or (z and seen[i]):
            raise _malformed()
        if z:
            seen[i] = True
            no_unit[i] = c
        if n:
            hist[i].append((c, n))
    out = []
    for part, pairs, rest in zip(release.parts, hist, no_unit, strict=True):
        unit_bound, _ = part_grid(part, release.unit)
        assert part.integer and float(unit_bound).is_integer()
        b = int(unit_bound)
        out.append(np.array([sum(min(c, tau * b) * n for c, n in pairs) + rest
                             for tau in part_levels(part, release.unit)], dtype=np.int64))
    return out


def _count(value: Any) -> int:
    """A non-negative integer of the histogram as a Python int (exact arithmetic)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise _malformed()
    return int(value)


def _malformed() -> ProgrammingError:
    return ProgrammingError("the exact result of a query under a privacy unit is malformed")


def r2t_bins(backend: Backend, compiled: CompiledPlan, params: Sequence[Any],
             plans: Sequence[NoisePlan], release: UnitRelease, drawn: Callable[[], None],
             sampler: Sampler | None = None
             ) -> tuple[Bins, list[np.ndarray], list[R2TOutcome | None]]:
    """The exact read, then every measurement's R2T release (module docstring): the bin,
    the noisy value per measurement (COUNTs rounded to integers: post-processing), and
    each measurement's outcome (None: released exactly)."""
    truncated = read_truncated_parts(backend, compiled, params, release)
    drawn()
    outcomes = release_r2t_measurements(truncated.levels, plans, sampler,
                                        release.unit.level_base, truncated.no_unit)
    noisy = []
    for plan, outcome in zip(plans, outcomes, strict=True):
        value = 0.0 if outcome is None else outcome.value
        if plan.measurement.integer:
            noisy.append(np.array([round(value)], dtype=np.int64))
        else:
            noisy.append(np.array([value], dtype=np.float64))
    bins = Bins([], [np.zeros(1) for _ in plans], 1, [], 1)
    return bins, noisy, outcomes


def many_units(backend: Backend, release: UnitRelease) -> bool:
    """Whether the unit's id column spans more than dpsql.units.flat_counts.MANY_UNITS
    integers (the backend's :meth:`~dpsql.backends.base.Backend.value_range`, read once per
    connection; False when it cannot say)."""
    span = backend.value_range(release.unit.table, release.unit.column)
    if span is None or not all(isinstance(v, int) and not isinstance(v, bool) for v in span):
        return False
    return span[1] - span[0] >= MANY_UNITS


def histogram_of_ids(ids: Any) -> list[tuple[int, int, int]]:
    """The histogram query's rows ``(c, n, z)`` (dpsql.units.rewrite._r2t_histogram: n units
    contribute c rows, z = 1 when the rows of no unit, the NULL ids, number c) from one unit
    id per row (a NULL masked or None), counted exactly (ids coded as the two-unit reads code
    them: dpsql.units.multi_execute.unit_codes)."""
    codes, nulls = coded_ids(ids)
    if nulls is not None:
        codes = codes[~nulls]
    per_unit = np.bincount(codes) if codes.size else np.zeros(0, np.int64)
    per_unit = per_unit[per_unit > 0]  # offset codes leave gaps: no unit there
    values, units = np.unique(per_unit, return_counts=True)
    rows = {int(c): [int(n), 0] for c, n in zip(values, units, strict=True)}
    if nulls is not None:
        rows.setdefault(int(np.count_nonzero(nulls)), [0, 0])[1] = 1
    return [(c, n, z) for c, (n, z) in rows.items()]
