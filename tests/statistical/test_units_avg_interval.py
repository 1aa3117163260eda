"""An AVG's 95% interval under a privacy unit (R2T, dpsql.units.avg) through the WHOLE engine:
real DuckDB files, the production (secure) sampler, no seed, no ledger.

What is claimed (dpsql.units.avg): when every unit is within the top truncation levels
(``max_contribution`` rows; both unit tables' with two units), the interval covers the TRUE AVG
(of the values clamped into the bounds, rows of no unit included) with probability >= 95%.
Both shops below keep every unit within GS, so each release's interval must cover the exact
AVG at least 95% of the time.

* **One unit, through the DB-API** (``dpsql.connect``, ``ledger=None``): the tiny shop of
  tests/units/tiny.py with 200 customers of 1-4 orders each (GS 4) and 10 orders of no unit
  (NULL ``o_cust``, in full), amounts in [-3, 5] (a signed SUM: two parts, each read at
  98.75%). ``SELECT AVG(amount) FROM orders`` at epsilon 4.
* **Two units, through the Session**: tests/units/tiny_multi.py's shop with 400 customers of
  one order with 1-3 items, 150 suppliers of at most 6 items (GS 8), qty in [-2, 4].
  ``SELECT AVG(qty) FROM items JOIN orders`` at epsilon 30 (the exact read replayed, as
  tests/statistical/test_units_engine.py does: every run still plans, draws, post-processes
  and records).

False-failure rates. Coverage: k misses of N are tested against the claimed 5% by a one-sided
binomial test at ALPHA = 1e-6 (``binom.sf(k - 1, N, 0.05) >= ALPHA``), so a correct interval
fails it with probability <= 1e-6 each, 2e-6 for the file, at any N: the test is exact. With
the default N = 400 it fails at 45 misses or more (11.25%; at N = 1000 it was 87, 8.7%). (The
union bound, R2T's widths and the box's corners make the real rate far lower: 0 to 0.25%
measured in both shops.)
Not vacuous: the median width must be below half the bounds' range (measured 0.23 and 0.06 of
it; a median of N = 400 runs does not move that far), and the same intervals shrunk to a
quarter of their width about their midpoints must miss significantly more than 5% (measured
55% and 21% against the threshold of 45 / 400: the harness's power there is 1 - 1e-7 at 21%
and 1 to double precision at 55%), so the harness would catch an interval four times too narrow.
Runtime: N DB-API runs (~6 ms each) and N Session runs (~3 ms).

``DPSQL_AVG_INTERVAL_RUNS`` (default 400, the suite's budget) sets N for both tests; 1000 (the
former default) or more is a deeper run with a sharper coverage threshold (87 / 1000).
"""

from __future__ import annotations

import os

import numpy as np
from scipy import stats

import dpsql
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.backends.replay import ReplayBackend
from dpsql.session import Session
from tests.db_files import writing
from tests.units import tiny, tiny_multi

ALPHA = 1e-6
CLAIMED_MISS = 0.05
#: releases per test (module docstring): DPSQL_AVG_INTERVAL_RUNS=1000 for a deeper run
N = int(os.environ.get("DPSQL_AVG_INTERVAL_RUNS", "400"))


def _not_more_frequent(failures: int, n: int, rate: float) -> bool:
    return failures == 0 or float(stats.binom.sf(failures - 1, n, rate)) >= ALPHA


def _check(runs: np.ndarray, truth: float, bounds: tuple[float, float]) -> None:
    """``runs``: one row (value, low, high) per release. Coverage, width, and the power of
    the harness (module docstring)."""
    low, high = runs[:, 1], runs[:, 2]
    assert np.all((bounds[0] <= low) & (low <= high) & (high <= bounds[1]))
    misses = int(np.count_nonzero((low > truth) | (high < truth)))
    assert _not_more_frequent(misses, len(runs), CLAIMED_MISS), misses
    assert float(np.median(high - low)) < 0.5 * (bounds[1] - bounds[0])
    mid, half = (low + high) / 2, (high - low) / 8
    shrunk = int(np.count_nonzero((mid - half > truth) | (mid + half < truth)))
    assert not _not_more_frequent(shrunk, len(runs), CLAIMED_MISS), shrunk


def _one_unit_shop() -> tiny.Database:
    customers = [(c, 1 + c % 2) for c in range(1, 201)]
    orders: list[tuple] = []
    for c in range(1, 201):
        for _ in range(1 + c % 4):  # 1-4 orders: every unit within GS 4
            o = len(orders) + 1
            orders.append((o, c, (o * 7) % 9 - 3))  # -3..5
    orders += [(len(orders) + k + 1, None, 4) for k in range(10)]  # rows of no unit
    return {"customer": customers, "orders": orders, "items": [], "regions": [(1,), (2,)]}


def test_one_unit_avg_interval_covers_the_true_avg_through_the_dbapi(tmp_path):
    db = _one_unit_shop()
    path = tiny.write_file(tmp_path / "shop.duckdb", db)
    clamped = [min(max(a, tiny.AMOUNT_BOUNDS[0]), tiny.AMOUNT_BOUNDS[1])
               for _, _, a in db["orders"]]
    truth = sum(clamped) / len(clamped)
    conn = dpsql.connect(str(path), metadata=tiny.metadata(max_contribution=4), analyst="a",
                         ledger=None, epsilon=4.0)
    try:
        cur = conn.cursor()
        runs = []
        for _ in range(N):
            cur.execute("SELECT AVG(amount) AS a FROM orders")
            (value,) = cur.fetchone()
            column = cur.release.columns[0]
            assert column.mechanism == "r2t" and column.interval_95 is not None
            runs.append((np.nan if value is None else value, *column.interval_95))
    finally:
        conn.close()
    _check(np.array(runs, dtype=np.float64), truth, tiny.AMOUNT_BOUNDS)


def _two_unit_shop() -> tiny_multi.Database:
    items: list[tuple] = []
    for o in range(1, 401):
        for _ in range(1 + o % 3):  # a customer's one order: 1-3 items
            i = len(items) + 1
            items.append((o, 1 + i % 150, (i * 5) % 8 - 3))  # 800 items: <= 6 per supplier
    return {"customer": [(c, 1 + c % 2) for c in range(1, 401)],
            "supplier": [(s, 1) for s in range(1, 151)],
            "orders": [(c, c) for c in range(1, 401)], "items": items, "stock": [],
            "nations": [(1,), (2,)]}


def test_two_unit_avg_interval_covers_the_true_avg_through_the_session(tmp_path):
    db = _two_unit_shop()
    per_supplier = np.bincount([s for _, s, _ in db["items"]])
    assert per_supplier.max() <= 8  # every unit of both tables within GS
    path = tmp_path / "multi.duckdb"
    with writing(path) as con:
        tiny_multi.load(db, con)
    clamped = [min(max(q, -2), 4) for _, _, q in db["items"]]
    truth = sum(clamped) / len(clamped)
    md = tiny_multi.metadata(max_contribution=8)
    inner = DuckDBBackend(path, md)
    try:
        session = Session(md, ReplayBackend(inner))
        runs = []
        for _ in range(N):
            result = session.run("SELECT AVG(qty) AS a FROM items i JOIN orders o "
                                 "ON o.o_id = i.i_order", epsilon=30.0)
            interval = result.release.columns[0].interval_95
            assert interval is not None
            value = result.rows[0][0]
            runs.append((np.nan if value is None else value, *interval))
    finally:
        inner.close()
    _check(np.array(runs, dtype=np.float64), truth, (-2.0, 4.0))
