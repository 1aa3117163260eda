"""Honest numbers: the released values typed like the columns they summarise.

Post-processing of noisy values only (it runs after the noise, on the rows the analyst's outer
SELECT produced, and reads nothing else), so it costs no privacy (docs/privacy.md, section 2's
"honest numbers" row). The rules, one per output column, are chosen from the SQL and the public
metadata alone (:func:`output_rules`, at prepare time), never from a value:

* a bare ``COUNT`` column (``COUNT(*) AS n``, with or without FILTER) is an integer clamped at 0
  (a noisy count can fall below zero; no count can), unless the request asks for raw counts;
* a bare ``SUM`` of a base column of an integer type (TINYINT ... HUGEINT) is rounded to the
  nearest integer (half to even) and described as BIGINT, saturated at BIGINT's range (only an
  absurd noise scale reaches it);
* a bare ``SUM`` of a DECIMAL(p, s) base column is a :class:`decimal.Decimal` quantized to s
  places (half to even) and described as DECIMAL(38, s), DuckDB's type of that SUM; a value
  beyond 38 digits saturates like the integer one;
* a group key that is a base column is described with that column's declared (or
  database-filled) type, e.g. DECIMAL(15,2), whatever type its domain's values were read as;
* every other column (AVG, the variance family, arithmetic, computed keys) is left as the
  post-processing produced it.

A value that is not finite (NaN or infinite noise: never for a finite scale) becomes NULL in
an integer or decimal column, which cannot hold it. NULL stays NULL.

:func:`release_notes` says, per column, which rule was applied (the release record's
``post_processing``); the rules are public, so the notes are too.

A request of several releases (dpsql.execute.blocks) gets the rules of its final query when
that is the second phase of a two-phase query (:func:`final_rules`); a block table's bare
COUNT columns are clamped at the measurement (:func:`clamp_block_counts`), before the
analyst's outer query reads them. Which rule applies to which column is decided at prepare time
from the SQL and the metadata (:mod:`dpsql.analysis.output_types`).
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from dpsql.analysis.model import QueryAnalysis
from dpsql.analysis.output_types import AS_IS, DECIMAL_DIGITS, OutputRule, output_rules
from dpsql.metadata import Metadata
from dpsql.release.record import ColumnRelease, Release

Rows = tuple[tuple[str, ...], tuple[str, ...], list[tuple[Any, ...]]]

BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1

_CONTEXT = decimal.Context(prec=DECIMAL_DIGITS + 2, rounding=decimal.ROUND_HALF_EVEN)

#: the release record's words for each rule (docs/privacy.md, post-processing)
CLAMPED_COUNT = "noisy count clamped at 0 (post-processing)"
ROUNDED_SUM = "noisy sum rounded to an integer, like the integer column it sums"
DECIMAL_SUM = "noisy sum rounded to {scale} decimal places, like the DECIMAL column it sums"
AVG_NULL = "NULL where the noisy count it divides by is <= 0, else clamped to the bounds"


def _integers(column: Sequence[Any]) -> tuple[Any, ...]:
    """Integer sums: each value rounded half to even, saturated at BIGINT's range."""
    if None not in column:
        floats = np.asarray(column, dtype=np.float64)
        if np.all(np.abs(floats) < 2.0**62):  # np.rint rounds half to even, as round()
            return tuple(np.rint(floats).astype(np.int64).tolist())
    out: list[Any] = []
    for value in column:
        if value is None:
            out.append(None)
            continue
        v = float(value)
        if BIGINT_MIN < v < BIGINT_MAX:
            out.append(round(v))
        elif math.isfinite(v):
            out.append(BIGINT_MAX if v > 0 else BIGINT_MIN)
        else:
            out.append(None)
    return tuple(out)


def _decimals(column: Sequence[Any], scale: int) -> tuple[Any, ...]:
    """DECIMAL sums: each value rounded half to even to ``scale`` places (a float's exact
    binary value is rounded, so 1.005, stored as 1.00499..., gives 1.00), saturated at
    DECIMAL(38, scale)'s range."""
    quantum = decimal.Decimal(1).scaleb(-scale)
    limit = decimal.Decimal(10) ** (DECIMAL_DIGITS - scale) - quantum
    float_limit = float(limit)
    text = f".{scale}f"
    out: list[Any] = []
    for value in column:
        if value is None:
            out.append(None)
        elif isinstance(value, decimal.Decimal):
            out.append(None if not value.is_finite() else
                       min(max(value, -limit), limit).quantize(quantum, context=_CONTEXT))
        else:
            v = float(value)
            if -float_limit < v < float_limit:
                out.append(decimal.Decimal(format(v, text)))
            elif math.isfinite(v):
                out.append(limit if v > 0 else -limit)
            else:
                out.append(None)
    return tuple(out)


def _counts(column: Sequence[Any]) -> tuple[Any, ...]:
    """Noisy counts clamped at 0 (NULL stays NULL)."""
    return tuple(None if v is None else (v if v >= 0 else type(v)(0)) for v in column)


def _clamped_already(rows: Sequence[Sequence[Any]], i: int) -> bool:
    """True when no count in column ``i`` is below 0 (the common case: nothing to clamp)."""
    try:
        return bool(min(r[i] for r in rows) >= 0)  # rows is not empty (finish checks)
    except TypeError:  # a NULL count (or a value that is not a number): check one by one
        try:
            return min((r[i] for r in rows if r[i] is not None), default=0) >= 0
        except TypeError:
            return False


def finish_columns(types: Sequence[str], columns: list[Any], rules: Sequence[OutputRule], *,
                   raw_counts: bool = False) -> tuple[tuple[str, ...], list[Any]]:
    """:func:`finish` on the columns of the rows to be (``types`` and one sequence or numpy
    array per column, a float array's NaN standing for NULL), before any row is built:
    ``finish((names, types, list(zip(*columns))), rules)`` gives the rows
    ``list(zip(*out))`` of the returned ``(types, out)``, NaN again NULL. Vectorised for
    numpy count columns (dpsql.execute.post's fast path: 100,000 bins without building and
    transposing the rows twice). Reads nothing but its arguments (post-processing)."""
    if not rules or len(rules) != len(columns) or all(r is AS_IS for r in rules):
        return tuple(types), columns
    out_types = tuple(r.type or t for r, t in zip(rules, types, strict=True))
    out = list(columns)
    for i, rule in enumerate(rules):
        if rule.kind == "count" and not raw_counts:
            out[i] = _counts_column(out[i])
        elif rule.kind == "integer_sum":
            out[i] = _integers(plain_values(out[i]))
        elif rule.kind == "decimal_sum":
            out[i] = _decimals(plain_values(out[i]), rule.scale)
    return out_types, out


def _counts_column(column: Any) -> Any:
    """:func:`_counts` over a column: a numeric numpy array stays one (NaN, NULL, stays)."""
    if isinstance(column, np.ndarray) and column.dtype.kind in "iu":
        return np.where(column >= 0, column, column.dtype.type(0))
    if isinstance(column, np.ndarray) and column.dtype.kind == "f":
        return np.where((column >= 0) | np.isnan(column), column, column.dtype.type(0))
    return _counts(plain_values(column))


def plain_values(column: Any) -> Sequence[Any]:
    """A column's values as Python objects, a float array's NaN as None (NULL)."""
    if not isinstance(column, np.ndarray):
        return column
    if column.dtype.kind == "f" and np.isnan(column).any():
        return [None if v != v else v for v in column.tolist()]
    return column.tolist()


def finish(rows: Rows, rules: Sequence[OutputRule], *, raw_counts: bool = False) -> Rows:
    """``rows`` (names, types, values) with every column finished by its rule. Guarantee:
    reads nothing but ``rows`` and the rules (post-processing); a column count that does not
    match the rules (which :func:`output_rules` never gives) leaves the rows as they are."""
    names, types, values = rows
    if not rules or len(rules) != len(names) or all(r is AS_IS for r in rules):
        return rows
    out_types = tuple(r.type or t for r, t in zip(rules, types, strict=True))
    fixers = [(i, rule) for i, rule in enumerate(rules)
              if rule.kind in ("count", "integer_sum", "decimal_sum")]
    if not fixers or not values:
        return names, out_types, values
    work = [(i, rule) for i, rule in fixers
            if rule.kind != "count" or not (raw_counts or _clamped_already(values, i))]
    if not work:
        return names, out_types, values
    columns = list(zip(*values, strict=True))
    for i, rule in work:
        if rule.kind == "count":
            columns[i] = _counts(columns[i])
        elif rule.kind == "integer_sum":
            columns[i] = _integers(columns[i])
        else:
            columns[i] = _decimals(columns[i], rule.scale)
    finished = list(zip(*columns, strict=True))
    return names, out_types, finished


def release_notes(analysis: QueryAnalysis, rules: Sequence[OutputRule], *,
                  raw_counts: bool = False) -> tuple[str | None, ...]:
    """Per output column, the words for the post-processing :func:`finish` applies (and for
    AVG's NULL rule), or None."""
    from dpsql.noise.plan import is_public

    notes: list[str | None] = []
    for col, rule in zip(analysis.columns, rules, strict=True):
        exact = bool(col.measurements) and all(
            is_public(analysis.measurements[i]) for i in col.measurements)
        if rule.kind == "count" and exact:
            notes.append(None)  # an exact count of public rows: no noise, nothing clamped
        elif rule.kind == "count" and not raw_counts:
            notes.append(CLAMPED_COUNT)
        elif rule.kind == "integer_sum":
            notes.append(ROUNDED_SUM)
        elif rule.kind == "decimal_sum":
            notes.append(DECIMAL_SUM.format(scale=rule.scale))
        elif col.kind == "aggregate" and col.function == "AVG":
            notes.append(AVG_NULL)
        else:
            notes.append(None)
    return tuple(notes)


def annotate(record: Release, notes: Sequence[str | None]) -> Release:
    """``record`` with each column's note (:func:`release_notes`) added to its
    ``post_processing`` (after any it has). Columns and notes pair in order; a record with
    another number of columns is returned as it is."""
    if len(notes) != len(record.columns) or not any(notes):
        return record
    columns = tuple(
        c if note is None else _replaced(
            c, post_processing=note if not c.post_processing else f"{c.post_processing}; {note}")
        for c, note in zip(record.columns, notes, strict=True))
    return _replaced(record, columns=columns)


_R = TypeVar("_R", Release, ColumnRelease)


def _replaced(obj: _R, **changes: Any) -> _R:
    """``dataclasses.replace(obj, **changes)`` for the record's frozen dataclasses, which have
    no ``__post_init__`` and only init fields (so replace would copy every field and change
    these): the same new object, without replace's per-field introspection."""
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__, **changes)
    return new


def final_rules(prepared: Any, metadata: Metadata, raw_counts: bool = False
                ) -> tuple[tuple[OutputRule, ...], tuple[str | None, ...]]:
    """The rules of a query of several releases (:class:`dpsql.execute.blocks.PreparedBlocks`)
    and the notes of its combined record (one per column, every part's in order).

    Rules: those of its final query when it is the second phase of a two-phase query (its rows
    are that query's own, column for column); none when the analyst's query runs over block
    tables (its columns are the analyst's arithmetic over them). Notes: the final query's, and
    for each block table the counts :func:`clamp_block_counts` clamps."""
    notes: list[str | None] = []
    rules: tuple[OutputRule, ...] = ()
    for part in prepared.parts:
        if part.table is not None:
            counts = _bare_counts(part.analysis)
            notes += [CLAMPED_COUNT if c.measurements and c.measurements[0] in counts
                      and c.function == "COUNT" and c.bare_aggregate and not raw_counts
                      else None for c in part.analysis.columns]
        elif part.param is None:
            rules = output_rules(part.analysis, metadata)
            notes += release_notes(part.analysis, rules, raw_counts=raw_counts)
        else:
            notes += [None] * len(part.analysis.columns)
    return rules, tuple(notes)


def _bare_counts(analysis: QueryAnalysis) -> set[int]:
    """The measurements that are a bare COUNT column of ``analysis``."""
    return {c.measurements[0] for c in analysis.columns
            if c.kind == "aggregate" and c.function == "COUNT" and c.bare_aggregate
            and len(c.measurements) == 1}


def clamp_block_counts(analysis: QueryAnalysis, noisy: list[np.ndarray]) -> list[np.ndarray]:
    """A block table's noisy measurements with each bare COUNT column's clamped at 0, before
    the block's rows are computed (post-processing). Clamping the measurement itself changes
    nothing else the block computes from it: an AVG is NULL over a count <= 0 either way, and
    the variance family divides by max(n, 1) or max(n, 2)."""
    counts = _bare_counts(analysis)
    return [np.maximum(v, 0) if j in counts else v for j, v in enumerate(noisy)]
