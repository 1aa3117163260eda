"""Reading a two-unit release's per-pair contributions and truncating them (dpsql.units.multi;
the executed query is :func:`dpsql.units.multi_rewrite.pair_contributions`'s).

The exact query returns one row per pair of unit ids: ``__u0``, ``__u1`` (NULL: no unit of
that table) and each R2T part's psi ``__p<i>`` (NULL, a SUM over no value, is 0); or, for
plain counts, one row ``__u0, __u1`` per counted row (at most FLAT_ROWS of them, else the
same query grouped in the database: dpsql.units.multi_rewrite).
:func:`read_pair_truncated` codes the ids densely (each table's NULL one more code, never a
real unit's), and returns per part the flow truncation Q(tau_j) over the part's levels
(dpsql.noise.r2t_flow, in value units tau_j * b): what :func:`dpsql.units.execute.r2t_bins`
releases with R2T, exactly as a one-unit query's truncated sums.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dpsql.backends.base import Backend
from dpsql.errors import ProgrammingError
from dpsql.execute.exact import CompiledPlan
from dpsql.noise.r2t_flow import flow_truncated
from dpsql.units.analysis import UnitRelease
from dpsql.units.grid import part_grid, part_levels
from dpsql.units.multi_rewrite import FLAT_ROWS


def unit_codes(ids: Any) -> np.ndarray:
    """Int codes of a column of unit ids, NULL (masked or None) its own code. Equal ids get
    equal codes (the SQL grouped the pairs exactly; dpsql.units.identity's types compare as
    stored). A lossy fetch (a DECIMAL id beyond 2^53 as a double) could only MERGE two units
    into one code, never split one: still sound, since every result of a removed unit still
    shares one node of the flow, whose cap bounds their total (dpsql.noise.r2t_flow's proof
    needs no more). Integer ids over a range at most 4 times their number are coded by offset
    (no sort; int64 ids in [0, 4n] are their own codes); others densely."""
    data = np.ma.getdata(ids)
    if data.dtype.kind == "i" and not np.ma.is_masked(ids) and data.size:
        # no NULL (the usual case): offset the ids without masking passes
        low, high = int(data.min()), int(data.max())
        if data.dtype == np.int64 and low >= 0 and high <= 4 * data.size:
            return data  # already codes (read only; codes need not start at 0): no pass
        if high - low <= 4 * data.size:
            return np.subtract(data, low, dtype=np.int64)  # one pass, no wrap in int64
    arr = np.ma.asarray(ids)
    mask = np.ma.getmaskarray(arr)
    data = np.ma.getdata(arr)
    if data.dtype == object:
        mask = mask | np.array([v is None for v in data], dtype=bool)
    codes = np.zeros(data.shape[0], dtype=np.int64)
    valid = data if not mask.any() else data[~mask]
    if not valid.size:
        return codes
    if data.dtype.kind in "iu":
        low, high = int(valid.min()), int(valid.max())
        if high - low <= 4 * valid.size:
            # signed ids subtract in int64 (a narrow dtype wraps: TINYINT 100 - (-100), the
            # red team's error oracle); an unsigned difference from the minimum cannot wrap
            codes[~mask] = (valid.astype(np.int64) - low if data.dtype.kind == "i"
                            else (valid - valid.min()).astype(np.int64))
            codes[mask] = high - low + 1
            return codes
    _, inverse = np.unique(valid, return_inverse=True)
    codes[~mask] = inverse.reshape(-1)
    codes[mask] = int(inverse.max()) + 1
    return codes


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
                        release: UnitRelease) -> list[np.ndarray]:
    """Per R2T part, Q(tau_j) at every level by the flow truncation (exact: reads private
    data; module docstring)."""
    bindings = compiled.plan.exact_bindings(params)
    columns, _ = backend.execute_columns(compiled.exact, bindings)
    if compiled.fallback is not None and columns[0].shape[0] > FLAT_ROWS:
        # flat rows, more than are worth fetching (many per pair): the plan's fallback groups
        # them in the database (dpsql.units.multi_rewrite), the same levels
        columns, _ = backend.execute_columns(compiled.fallback, bindings)
    return pair_levels(columns, release)


def pair_levels(columns: Sequence[Any], release: UnitRelease,
                trace: list[tuple[float, str]] | None = None) -> list[np.ndarray]:
    """Per R2T part, Q(tau_j) at every level from the executed query's columns: ``__u0,
    __u1`` and each part's psi per pair, or (flat plain counts, dpsql.units.multi_rewrite)
    ``__u0, __u1`` per counted row, each a result of psi 1. ``trace``: as
    :func:`dpsql.noise.r2t_flow.flow_truncated`'s (benchmarks)."""
    flat = len(columns) == 2 and bool(release.parts) and all(p.integer for p in release.parts)
    if not flat and len(columns) != 2 + len(release.parts):
        raise ProgrammingError("the exact result of a query over two privacy units is "
                               "malformed")
    a = unit_codes(columns[0])
    b = unit_codes(columns[1])
    ones = np.ones(a.size, np.int64) if flat else None
    out = []
    for i, part in enumerate(release.parts):
        bound, _ = part_grid(part, release.unit)
        taus = [tau * bound for tau in part_levels(part, release.unit)]
        psi = ones if ones is not None else _values(columns[2 + i], part.integer)
        out.append(flow_truncated(a, b, psi, taus, integer=part.integer, trace=trace))
    return out
