"""A grouped AVG's per-row 95% intervals (dpsql.release.avg_rows) through the whole engine: real
DuckDB files, the production (secure) sampler, no seed, no ledger.

What is claimed: with probability >= 95% EVERY row's interval holds its group's exact average
of the values clamped into the bounds (all rows together; under a privacy unit, of what the
two-stage keeps: the data below keep every unit whole, so that is the exact average).

* **One row per record (no unit)**: 900 rows in 3 groups of 300 (and an empty fourth group,
  whose NULL average claims nothing), x in [0, 10], ``SELECT g, AVG(x) .. GROUP BY g`` at
  epsilon 1 (SUM and COUNT get 0.5 each: discrete and snapped Laplace).
* **A privacy unit's two-stage**: tests/units/tiny.py's shop, 300 customers of one order with
  1-3 items of 3 kinds, at most 2 items of a kind per customer (within max_groups 3,
  max_rows_per_group 2: nothing is truncated), ``SELECT kind, AVG(qty) .. GROUP BY kind`` at
  epsilon 4.

False-failure rates, as in test_units_avg_interval.py: k releases of N with some row missed
are tested against the claimed 5% by a one-sided binomial test at ALPHA = 1e-6, so a correct
interval fails it with probability <= 1e-6 each (2e-6 for the file). With N = 400 it fails at
45 misses or more. Not vacuous: the median width is below half the bounds' range, and the same
intervals shrunk to a quarter of their width about their midpoints must miss significantly
more than 5% (measured: 0-2 releases missed of 400, 188-282 with the shrunk intervals; median
widths 2.1 of 10 and 0.87 of 4). Runtime: N Session runs (~3 ms each) per test (the exact
reads replayed, as tests/statistical/test_units_engine.py does: every run still plans, draws,
post-processes and records). ``DPSQL_AVG_INTERVAL_RUNS`` sets N (default 400).
"""

from __future__ import annotations

import os

import numpy as np
from scipy import stats

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.backends.replay import ReplayBackend
from dpsql.metadata import Column, Domain, Metadata, Table
from dpsql.session import Session
from tests.db_files import writing
from tests.units import tiny

ALPHA = 1e-6
CLAIMED_MISS = 0.05
N = int(os.environ.get("DPSQL_AVG_INTERVAL_RUNS", "400"))


def _not_more_frequent(failures: int, n: int, rate: float) -> bool:
    return failures == 0 or float(stats.binom.sf(failures - 1, n, rate)) >= ALPHA


def _runs(session: Session, sql: str, epsilon: float, truth: dict[int, float]
          ) -> tuple[int, int, float]:
    """N releases: (releases with some row missed, the same with every interval shrunk to a
    quarter about its midpoint, the median width over rows and releases)."""
    missed = shrunk = 0
    widths = []
    for _ in range(N):
        result = session.run(sql, epsilon=epsilon)
        intervals = result.release.columns[1].row_intervals_95
        assert intervals is not None and len(intervals) == len(result.rows)
        miss = miss_shrunk = False
        for (key, _), (low, high) in zip(result.rows, intervals, strict=True):
            if key not in truth:  # an empty group: its average does not exist
                continue
            t = truth[key]
            widths.append(high - low)
            mid, half = (low + high) / 2, (high - low) / 8
            miss |= not low <= t <= high
            miss_shrunk |= not mid - half <= t <= mid + half
        missed += miss
        shrunk += miss_shrunk
    return missed, shrunk, float(np.median(widths))


def _check(missed: int, shrunk: int, width: float, bounds: tuple[float, float]) -> None:
    assert _not_more_frequent(missed, N, CLAIMED_MISS), missed
    assert width < 0.5 * (bounds[1] - bounds[0]), width
    assert not _not_more_frequent(shrunk, N, CLAIMED_MISS), shrunk


def test_row_level_grouped_avg_intervals_cover_every_group_together(tmp_path):
    md = Metadata({"t": Table("t", {
        "g": Column("g", type="INTEGER", releasable=True, domain=Domain(values=(1, 2, 3, 4))),
        "x": Column("x", type="DOUBLE", bounds=(0.0, 10.0))})})
    rows = [(1 + i % 3, float((i * 7) % 13)) for i in range(900)]  # some x past 10: clamped
    path = tmp_path / "t.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE t (g INTEGER, x DOUBLE)")
        con.executemany("INSERT INTO t VALUES (?, ?)", rows)
    truth = {g: float(np.mean([min(x, 10.0) for k, x in rows if k == g])) for g in (1, 2, 3)}
    inner = DuckDBBackend(str(path), md)
    try:
        session = Session(md, ReplayBackend(inner))
        _check(*_runs(session, "SELECT g, AVG(x) AS a FROM t GROUP BY g", 1.0, truth),
               (0.0, 10.0))
    finally:
        inner.close()


def test_two_stage_grouped_avg_intervals_cover_every_group_together(tmp_path):
    items = []
    for o in range(1, 301):
        for k in range(1 + o % 3):  # 1-3 items, of kinds 1.. (at most one of a kind)
            items.append((o, (o * 3 + k) % 5, 1 + (o + k) % 3))
    db = {"customer": [(c, 1 + c % 2) for c in range(1, 301)],
          "orders": [(o, o, 1) for o in range(1, 301)], "items": items,
          "regions": [(1,), (2,)]}
    path = tiny.write_file(tmp_path / "shop.duckdb", db)
    truth = {kind: float(np.mean([min(max(q, 0), 4) for _, q, k in items if k == kind]))
             for kind in (1, 2, 3)}
    md = tiny.metadata(max_groups=3, max_rows_per_group=2)
    inner = DuckDBBackend(str(path), md)
    try:
        session = Session(md, ReplayBackend(inner))
        _check(*_runs(session, "SELECT kind, AVG(qty) AS a FROM items GROUP BY kind", 4.0,
                      truth), tiny.QTY_BOUNDS)
    finally:
        inner.close()
