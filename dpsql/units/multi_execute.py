"""Reading a two-unit release's per-pair contributions and truncating them (dpsql.units.multi;
the executed query is :func:`dpsql.units.multi_rewrite.pair_contributions`'s).

The exact query returns one row per pair of unit ids: ``__u0``, ``__u1`` (NULL: no unit of
that table) and each R2T part's psi ``__p<i>`` (NULL, a SUM over no value, is 0); or, flat
(plain counts and SUMs), one row per joined row: ``__u0, __u1`` and a SUM part's row value,
at most FLAT_ROWS of them, else the same rows grouped in the database with the same
capacities per level (dpsql.units.multi_rewrite).
:func:`read_pair_truncated` codes the ids densely (:func:`pair_codes`: a result NULL on one
side a node of its own there, never a real unit's), and returns per part the flow truncation
Q(tau_j) over the part's levels (dpsql.noise.r2t_flow, in value units tau_j * b): what
:func:`dpsql.units.execute.r2t_bins` releases with R2T, exactly as a one-unit query's
truncated sums -- and c_NULL, the results NULL on both sides (of neither unit) in full, which
it adds after the noise (:func:`neither_in_full`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from dpsql.backends.base import Backend
from dpsql.errors import ProgrammingError
from dpsql.execute.exact import CompiledPlan
from dpsql.noise import two_threads
from dpsql.noise.r2t_flow import flow_truncated, level_step
from dpsql.units.analysis import UnitRelease
from dpsql.units.multi_rewrite import FLAT_ROWS, fallback_layout, flat_guard, value_levels


def unit_codes(ids: Any) -> np.ndarray:
    """Int codes of a column of unit ids, NULL (masked or None) its own code. Equal ids get
    equal codes (the SQL grouped the pairs exactly; dpsql.units.identity's types compare as
    stored). Both reads of a release (flat, and the grouped fallback past FLAT_ROWS) fetch the
    ids the same exact way (:func:`read_pair_truncated`): a lossy fetch merging ids past 2^53
    in one read only would code neighbours differently. Integer ids over a range at most 4
    times their number are coded by offset (no sort; int64 ids in [0, 4n] are their own
    codes); other numbers densely by sorting; Python objects (strings, Decimals, dates, bytes)
    by equality alone (a dict: no order needed, so a DATE past year 9999, which Arrow gives as
    an int among dates, is one more id, not a TypeError)."""
    return coded_ids(ids)[0]


def pair_codes(ids_a: Any, ids_b: Any) -> tuple[np.ndarray, np.ndarray]:
    """The flow's node codes of each result's two unit ids (:func:`unit_codes` on each side),
    where a result with ONE NULL id gets a node of its own on that side: it belongs to no unit
    of that table, so only its other unit's cap may bind it (a shared NULL node capped at
    tau_j would truncate every such row together, as no unit's rows are; docs/privacy.md
    "Several privacy units"). A node of one result never binds (its capacity
    floor(min(psi, tau) / delta) is at most T), and no unit's removal removes it, so the
    flow's contract holds unchanged. The results NULL on both sides keep one shared node on
    each side: together one result, capped at each level like a unit (the reads leave them
    out of the flow and count them in full: :func:`neither_in_full`)."""
    (a, null_a), (b, null_b) = two_threads.both(
        lambda: coded_ids(ids_a), lambda: coded_ids(ids_b), two_threads.worth_it(len(ids_a)))
    only_a = null_a if null_b is None or null_a is None else null_a & ~null_b
    only_b = null_b if null_a is None or null_b is None else null_b & ~null_a
    return _own_nodes(a, only_a), _own_nodes(b, only_b)


def _own_nodes(codes: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
    """``codes`` with each of ``rows`` given a new code of its own (past every other)."""
    if rows is None or not rows.any():
        return codes
    out = codes.copy()  # codes may be the fetched column itself (read only)
    out[rows] = int(codes.max()) + 1 + np.arange(int(np.count_nonzero(rows)))
    return out


def coded_ids(ids: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`unit_codes`, and the mask of the NULL ids (None when there is none)."""
    data = np.ma.getdata(ids)
    if data.dtype.kind == "i" and not np.ma.is_masked(ids) and data.size:
        # no NULL (the usual case): offset the ids without masking passes
        low, high = int(data.min()), int(data.max())
        if data.dtype == np.int64 and low >= 0 and high <= 4 * data.size:
            return data, None  # already codes (read only; codes need not start at 0): no pass
        if high - low <= 4 * data.size:
            return np.subtract(data, low, dtype=np.int64), None  # one pass, no wrap in int64
    arr = np.ma.asarray(ids)
    mask = np.ma.getmaskarray(arr)
    data = np.ma.getdata(arr)
    if data.dtype == object:
        mask = mask | np.array([v is None for v in data], dtype=bool)
    nulls = mask if mask.any() else None
    codes = np.zeros(data.shape[0], dtype=np.int64)
    valid = data if nulls is None else data[~mask]
    if not valid.size:
        return codes, nulls
    if data.dtype.kind in "iu":
        low, high = int(valid.min()), int(valid.max())
        if high - low <= 4 * valid.size:
            # signed ids subtract in int64 (a narrow dtype wraps: TINYINT 100 - (-100), the
            # red team's error oracle); an unsigned difference from the minimum cannot wrap
            codes[~mask] = (valid.astype(np.int64) - low if data.dtype.kind == "i"
                            else (valid - valid.min()).astype(np.int64))
            codes[mask] = high - low + 1
            return codes, nulls
    if data.dtype == object:  # by equality alone: no comparison between mixed types
        lookup: dict[Any, int] = {}
        codes[~mask] = np.fromiter((lookup.setdefault(v, len(lookup)) for v in valid),
                                   dtype=np.int64, count=valid.size)
        codes[mask] = len(lookup)
        return codes, nulls
    _, inverse = np.unique(valid, return_inverse=True)
    codes[~mask] = inverse.reshape(-1)
    codes[mask] = int(inverse.max()) + 1
    return codes, nulls


def _values(column: Any, integer: bool) -> np.ndarray:
    arr = np.ma.asarray(column)
    if not np.ma.is_masked(arr) and arr.dtype.kind in "iuf":
        return np.ma.getdata(arr).astype(np.int64 if integer else np.float64, copy=False)
    if arr.dtype == object:
        filled = np.array([0 if v is None else v for v in np.ma.getdata(arr)])
    else:
        filled = np.ma.filled(arr, 0)
    return filled.astype(np.int64 if integer else np.float64)


def read_pair_truncated(backend: Backend, compiled: CompiledPlan, params: Sequence[Any],
                        release: UnitRelease) -> tuple[list[np.ndarray], list[float]]:
    """Per R2T part, Q(tau_j) at every level by the flow truncation over the results of some
    unit, and c_NULL, the results of neither unit in full (exact: reads private data; module
    docstring)."""
    bindings = compiled.plan.exact_bindings(params)
    # a flat read only from a backend that fetches columns natively (Spark would collect a
    # Python tuple per row), and only up to its guard: past it, or on Spark, the plan's
    # fallback groups the rows in the database with the same capacities, the same levels
    if compiled.fallback is None or backend.columnar:
        # the flat read's columns: the two ids and each SUM part's values (multi_rewrite)
        guard = (None if compiled.fallback is None else
                 flat_guard(2 + sum(not p.integer for p in release.parts), FLAT_ROWS))
        columns, _ = backend.execute_flat_columns(compiled.exact, bindings, guard)
        if guard is None or columns[0].shape[0] <= guard:
            both = _neither(columns)  # once: the flow reads the rest, c_NULL these
            return (pair_levels(_without(columns, both), release),
                    _in_full(columns, release, both))
        del columns  # thrown away before the fallback reads
    # the fallback's ids read as the flat read reads them (DuckDB: Arrow, every id type exact;
    # fetchnumpy gave DECIMAL / HUGEINT ids as doubles, merging ids past 2^53 in one read only:
    # a removal across FLAT_ROWS could then raise a level, the red team's break)
    assert compiled.fallback is not None  # a flat read past its guard, or a Spark backend
    *grouped, totals = compiled.fallback  # multi_rewrite.guarded_flat: then neither_totals
    levels = fallback_levels(
        (backend.execute_flat_columns(sql, bindings)[0] for sql in grouped), release)
    rows, _ = backend.execute(totals, bindings)
    if len(rows) != 1 or len(rows[0]) != len(release.parts):
        raise ProgrammingError("the exact result of a query over two privacy units is "
                               "malformed")
    return levels, [float(0 if v is None else v) for v in rows[0]]


def _null_mask(ids: Any) -> np.ndarray | None:
    """Which of a column of unit ids are NULL (masked, or None among objects); None when none
    is."""
    arr = np.ma.asarray(ids)
    mask = np.ma.getmaskarray(arr) if np.ma.is_masked(arr) else None
    data = np.ma.getdata(arr)
    if data.dtype == object:
        nones = np.fromiter((v is None for v in data), dtype=bool, count=data.size)
        mask = nones if mask is None else mask | nones
    return mask if mask is not None and mask.any() else None


def _neither(columns: Sequence[Any]) -> np.ndarray | None:
    """Which results are of neither unit (both ids NULL); None when none is."""
    null_a = _null_mask(columns[0])
    if null_a is None:
        return None
    null_b = _null_mask(columns[1])
    both = None if null_b is None else null_a & null_b
    return both if both is not None and both.any() else None


def _of_some_unit(columns: Sequence[Any]) -> Sequence[Any]:
    """``columns`` without the results of neither unit (what the flow truncates)."""
    return _without(columns, _neither(columns))


def _without(columns: Sequence[Any], rows: np.ndarray | None) -> Sequence[Any]:
    """``columns`` without ``rows`` (a mask; None: none)."""
    return columns if rows is None else [np.ma.asarray(c)[~rows] for c in columns]


def neither_in_full(columns: Sequence[Any], release: UnitRelease) -> list[float]:
    """Per R2T part, c_NULL: the psi of the results of neither unit (both ids NULL), in full,
    from the columns :func:`pair_levels` reads (per pair or flat). They are in every
    neighbour (no unit's removal removes them), so, as under one unit, they are added after
    the noise rather than truncated (dpsql.units.noise). A SUM part's total is math.fsum of
    the values: the correctly rounded exact sum, the same double as the grouped read's psi
    of their one pair and the fallback's dpsql.units.multi_rewrite.neither_totals (inf past
    the largest double in all three: :func:`_correctly_rounded_sum`)."""
    return _in_full(columns, release, _neither(columns))


def _in_full(columns: Sequence[Any], release: UnitRelease, both: np.ndarray | None
             ) -> list[float]:
    """:func:`neither_in_full` given ``both``, the rows of neither unit (None: none)."""
    parts = release.parts
    if both is None:
        return [0.0] * len(parts)
    per_part = len(columns) == 2 + len(parts)
    rest = iter(columns[2:])
    out = []
    for part in parts:
        if not per_part and part.integer:  # a flat COUNT(*): one per row
            out.append(float(np.count_nonzero(both)))
        elif part.integer:
            out.append(float(sum(int(v) for v in _values(next(rest), True)[both])))
        else:
            out.append(_correctly_rounded_sum(_values(next(rest), False)[both].tolist()))
    return out


def _correctly_rounded_sum(values: list[float]) -> float:
    """math.fsum of ``values``, and past the largest double what DuckDB's exact sums cast to
    DOUBLE give there (the fallback's neither_totals, the grouped query's psi): the exact sum
    correctly rounded, +-inf when it overflows. fsum raises OverflowError instead (an error of
    the flat read only, where the fallback past FLAT_ROWS releases inf: the red team's break,
    tests/redteam/test_neither_flat_attacks.py)."""
    try:
        return math.fsum(values)
    except OverflowError:
        total = sum(map(Fraction, values), Fraction(0))
        try:
            return float(total)
        except OverflowError:
            return math.inf if total > 0 else -math.inf


def pair_levels(columns: Sequence[Any], release: UnitRelease,
                trace: list[tuple[float, str]] | None = None) -> list[np.ndarray]:
    """Per R2T part, Q(tau_j) at every level from the executed query's columns (module
    docstring): ``__u0, __u1`` and each part's psi, per pair or per flat row (the same
    truncation: each is a result); flat with some COUNT(*) parts, only the SUM parts' values
    (a COUNT(*) row is a result of psi 1). ``trace``: as
    :func:`dpsql.noise.r2t_flow.flow_truncated`'s (benchmarks)."""
    parts = release.parts
    sums = sum(1 for p in parts if not p.integer)
    per_part = len(columns) == 2 + len(parts)
    if not per_part and len(columns) != 2 + sums:
        raise ProgrammingError("the exact result of a query over two privacy units is "
                               "malformed")
    columns = _of_some_unit(columns)  # neither unit's: in full (:func:`neither_in_full`)
    a, b = pair_codes(columns[0], columns[1])
    # psi 1 for every flat row: a read-only broadcast, no 6M-entry array to allocate
    ones = None if per_part else np.broadcast_to(np.int64(1), a.shape)
    rest = iter(columns[2:])
    out = []
    for part in parts:
        taus = value_levels(part, release)
        if ones is not None and part.integer:  # a flat COUNT(*): psi 1 per row
            out.append(count_levels(a, b, ones, taus, trace))
        elif part.integer:
            out.append(count_levels(a, b, _values(next(rest), True), taus, trace))
        else:
            psi = _values(next(rest), False)
            out.append(flow_truncated(a, b, psi, taus, integer=False, trace=trace))
    return out


def count_levels(a: np.ndarray, b: np.ndarray, counts: np.ndarray, taus: Sequence[float],
                 trace: list[tuple[float, str]] | None = None) -> np.ndarray:
    """A COUNT part's Q(tau_j): the flow truncation of whole ``counts`` (int64, or a
    broadcast 1 per flat row) at ``taus``. Whole levels: the flow's int64 answers. Fine
    levels (dpsql.units.grid: multiples of 2^-k, each ``tau_j 2^k`` a whole number below
    2^31) are the same LP in units of 2^-k: capacities ``counts 2^k`` and caps ``tau_j 2^k``,
    an integral flow whose optimum is ``2^k`` times the LP's at ``tau_j`` (both scale
    exactly), returned as float64 ``OPT / 2^k`` (exact below 2^53). So the flow's contract,
    ``Q_j(I') <= Q_j(I) <= Q_j(I') + tau_j``, holds at the real levels."""
    if all(float(t).is_integer() for t in taus):
        return flow_truncated(a, b, counts, taus, integer=True, trace=trace)
    scale = max(Fraction(float(t)).denominator for t in taus)  # 2^k: a float's is a power of 2
    caps = [int(t * scale) for t in taus]
    if any(c != t * scale or c >= 2**31 for c, t in zip(caps, taus, strict=True)):
        raise ValueError("fine levels must be whole numbers of 2^-k below 2^31 of them")
    # every level reads min(psi, tau_j) only: capping psi at the top level changes none, and
    # keeps psi 2^k below 2^32 (no int64 wrap, whatever a pair's row count)
    top = math.ceil(max(taus))
    if counts.ndim == 1 and counts.size and counts.strides[0] == 0:
        scaled = np.broadcast_to(np.int64(min(int(counts[0]), top) * scale), counts.shape)
    else:
        scaled = np.minimum(counts, top).astype(np.int64) * scale
    opt = flow_truncated(a, b, scaled, caps, integer=True, trace=trace)
    return opt.astype(np.float64) / scale


def fallback_levels(results: Iterable[Sequence[Any]], release: UnitRelease
                    ) -> list[np.ndarray]:
    """Per R2T part, Q(tau_j) at every level from the fallback's query results in order
    (dpsql.units.multi_rewrite.fallback_layout: each ``__u0, __u1`` and its capacity columns):
    a COUNT(*) part's levels from its row counts per pair, a SUM part's level j as ``delta_j
    OPT_j``, the flow at cap T_j of its integer capacities -- the float
    dpsql.noise.r2t_flow.flow_truncated returns for the same rows read flat."""
    parts = release.parts
    out = [np.zeros(len(value_levels(p, release)), np.int64 if p.integer else np.float64)
           for p in parts]
    # one result in memory at a time (``results`` may be a generator of the queries' reads)
    for columns, chunk in zip(results, fallback_layout(release), strict=True):
        if len(columns) != 2 + len(chunk):
            raise ProgrammingError("the exact result of a query over two privacy units is "
                                   "malformed")
        columns = _of_some_unit(columns)  # their pair: in full, from neither_totals
        a, b = pair_codes(columns[0], columns[1])
        for (i, j), column in zip(chunk, columns[2:], strict=True):
            taus = value_levels(parts[i], release)
            if j is None:  # a COUNT(*) part: its pairs' row counts
                out[i] = count_levels(a, b, _values(column, True), taus)
                continue
            delta = level_step(taus[j], False)
            cap = math.floor(taus[j] / delta)
            (opt,) = flow_truncated(a, b, _values(column, True), [cap], integer=True)
            out[i][j] = delta * int(opt)
    return out
