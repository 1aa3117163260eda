"""dpsql.release.avg_rows: a grouped AVG's 95% interval per result row, through the engine
(fast and SQL post-processing, ORDER BY, HAVING, LIMIT, partition selection, a privacy unit's
two-stage, the answer cache) and its arithmetic. Coverage is tests/statistical's
test_grouped_avg_interval.py."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from dpsql.analysis.explain import explain_text
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget import Budget
from dpsql.metadata import Column, Domain, Metadata, Table
from dpsql.noise import mechanisms
from dpsql.noise.partition import plan_with_selection
from dpsql.noise.plan import plan_noise
from dpsql.release.avg_rows import GROUPED_AVG, MEASUREMENT_CONFIDENCE, row_intervals
from dpsql.release.record import measurement_half_width
from dpsql.rewrite.post import AvgInterval
from dpsql.session import Session
from dpsql.units.avg import ratio_interval
from tests.db_files import writing
from tests.ledgers import charging_session
from tests.units import tiny

BOUNDS = (0.0, 10.0)


def _metadata() -> Metadata:
    return Metadata({"t": Table("t", {
        "g": Column("g", type="INTEGER", releasable=True, domain=Domain(values=(1, 2, 3, 4))),
        "x": Column("x", type="DOUBLE", bounds=BOUNDS),
        "y": Column("y", type="INTEGER", bounds=(0, 5))})})


@contextmanager
def _session_over(path, md: Metadata, *creates: str) -> Iterator[Session]:
    """A session over a new DuckDB file at ``path`` made by the ``creates`` statements."""
    with writing(path) as con:
        for sql in creates:
            con.execute(sql)
    backend = DuckDBBackend(str(path), md)
    try:
        yield Session(md, backend)
    finally:
        backend.close()


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    path = tmp_path_factory.mktemp("avg-rows") / "t.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE t (g INTEGER, x DOUBLE, y INTEGER)")
        rows = [(1 + i % 3, float(i % 11), i % 6) for i in range(600)]  # group 4 is empty
        con.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    backend = DuckDBBackend(str(path), _metadata())
    yield Session(_metadata(), backend)
    backend.close()


def _checked(result, column: str) -> tuple[tuple[float, float], ...]:
    """The column's row intervals, after checking each holds its row's AVG (a noisy COUNT
    >= 1 makes the released ratio a point of the interval's box: it must lie inside)."""
    position = result.names.index(column)
    record = result.release.columns[position]
    intervals = record.row_intervals_95
    assert intervals is not None and len(intervals) == len(result.rows)
    assert record.accuracy_note.startswith(GROUPED_AVG)
    for row, (low, high) in zip(result.rows, intervals, strict=True):
        assert BOUNDS[0] <= low <= high <= BOUNDS[1]
        if row[position] is not None:
            assert low <= row[position] <= high, (row, low, high)
    return intervals


@pytest.mark.parametrize("sql", [
    "SELECT g, AVG(x) AS a FROM t GROUP BY g",  # fast path
    "SELECT g, AVG(x) AS a FROM t GROUP BY g ORDER BY a DESC",  # fast path, ordered
    "SELECT g, AVG(x) AS a, COUNT(*) AS n FROM t GROUP BY g HAVING COUNT(*) > 100 "
    "ORDER BY a LIMIT 2",  # the post-processing SQL
    "SELECT AVG(x) AS a, g, AVG(y) AS b FROM t GROUP BY g ORDER BY g DESC",  # two AVGs
    "SELECT g, AVG(x) + 0 AS s, AVG(x) AS a FROM t GROUP BY g LIMIT 3",
])
def test_each_rows_interval_holds_its_own_average(session, sql):
    result = session.run(sql, epsilon=1.0)
    intervals = _checked(result, "a")
    if "AVG(y)" in sql:
        _checked(result, "b")
    if "+ 0" in sql:  # arithmetic of an AVG: no interval
        assert result.release.columns[result.names.index("s")].row_intervals_95 is None
    assert len(set(intervals)) == len(intervals)  # each row its own


def test_rows_reordered_by_the_average_keep_their_own_intervals(session):
    """The same release read twice in two orders would need the same noise: instead, one
    release's rows sorted by the AVG must carry intervals sorted with them (each still holds
    its own value, and their midpoints follow the values' order roughly, never a fixed
    per-group order)."""
    result = session.run("SELECT g, AVG(x) AS a FROM t GROUP BY g ORDER BY a", epsilon=50.0)
    intervals = _checked(result, "a")
    values = [r[1] for r in result.rows if r[1] is not None]
    assert values == sorted(values)
    assert len(intervals) == 4


def test_no_row_intervals_under_distinct(session):
    result = session.run("SELECT DISTINCT AVG(x) AS a FROM t GROUP BY g", epsilon=1.0)
    assert result.release.columns[0].row_intervals_95 is None
    result = session.run("SELECT AVG(x) AS a FROM t", epsilon=1.0)  # no GROUP BY: one row
    assert len(_checked(result, "a")) == 1


def test_the_interval_is_the_ratio_range_over_both_97_5_percent_half_widths():
    """row_intervals by hand: half-widths at 97.5% over the release's cells (Laplace's b
    ln(cells / 0.025) plus 1/2 for a count, plus the grid step for a sum)."""
    md = _metadata()
    session = Session(md, DuckDBBackend(None, md))
    prepared = session.prepare("SELECT g, AVG(x) AS a FROM t GROUP BY g")
    plans = plan_noise(prepared.analysis, Budget(1.0, 0.0))
    (spec,) = prepared.plan.avg_intervals
    assert spec == AvgInterval(1, spec.total, spec.count, BOUNDS)
    totals, counts = np.array([100.0, -3.0, 50.0]), np.array([20.0, 0.0, 1.0])
    got = row_intervals(spec, plans, 4, totals, counts)
    h_s = mechanisms.laplace_half_width(plans[spec.total].scale, MEASUREMENT_CONFIDENCE,
                                        cells=4) + plans[spec.total].granularity
    h_c = mechanisms.laplace_half_width(plans[spec.count].scale, MEASUREMENT_CONFIDENCE,
                                        cells=4) + 0.5
    assert h_s == measurement_half_width(plans[spec.total], MEASUREMENT_CONFIDENCE, 4)
    assert h_c == measurement_half_width(plans[spec.count], MEASUREMENT_CONFIDENCE, 4)
    assert got == tuple(ratio_interval((s - h_s, s + h_s), (c - h_c, c + h_c), BOUNDS)
                        for s, c in zip(totals, counts, strict=True))
    assert math.isclose(MEASUREMENT_CONFIDENCE, 0.975)
    session.close()


def test_a_privacy_units_two_stage_says_what_the_interval_does_not_cover(tmp_path):
    path = tiny.write_file(tmp_path / "shop.duckdb", {
        "customer": [(c, 1 + c % 2) for c in range(1, 41)],
        "orders": [(o, 1 + o % 40, o % 7) for o in range(1, 121)],
        "items": [(1 + i % 120, i % 5, 1 + i % 3) for i in range(300)],
        "regions": [(1,), (2,)]})
    md = tiny.metadata(max_groups=3, max_rows_per_group=4)
    backend = DuckDBBackend(str(path), md)
    try:
        result = Session(md, backend).run(
            "SELECT kind, AVG(qty) AS a FROM items GROUP BY kind", epsilon=2.0)
        column = result.release.columns[1]
        assert column.row_intervals_95 is not None and len(column.row_intervals_95) == 3
        assert "covers the noise, not this truncation" in column.accuracy_note
        for row, (low, high) in zip(result.rows, column.row_intervals_95, strict=True):
            assert tiny.QTY_BOUNDS[0] <= low <= high <= tiny.QTY_BOUNDS[1]
            assert row[1] is None or low <= row[1] <= high
        # a variance has no interval: its words say so, and where one is
        result = Session(md, backend).run(
            "SELECT kind, STDDEV(qty) AS sd FROM items GROUP BY kind", epsilon=2.0)
        column = result.release.columns[1]
        assert column.row_intervals_95 is None and column.half_width_95 is None
        assert column.accuracy_note.endswith(
            "no interval: computed from several noisy measurements per group (select them for "
            "their 95% intervals; a bare AVG gets one per row)")
    finally:
        backend.close()


def test_a_cached_repeat_returns_the_same_intervals(tmp_path):
    path = tmp_path / "t.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE t AS SELECT (1 + i % 3)::INTEGER AS g, (i % 11)::DOUBLE AS x, "
                    "(i % 6)::INTEGER AS y FROM range(300) r(i)")
    with charging_session(path, _metadata(), tmp_path / "ledger.sqlite") as session:
        first = session.run("SELECT g, AVG(x) AS a FROM t GROUP BY g", epsilon=1.0)
        again = session.run("SELECT g, AVG(x) AS a FROM t GROUP BY g", epsilon=1.0)
        assert again.release.cached and again.rows == first.rows
        # the record's tuples stay tuples through the cache's JSON: equal, and hashable
        assert again.release.columns == first.release.columns
        hash(again.release.columns[1])


def test_a_smoothed_release_gets_no_row_interval(tmp_path):
    """A join of private tables: the SUM's and COUNT's scales are smoothed (data-dependent),
    so no half-width, hence no row interval, may be published."""
    md = Metadata({
        "t": Table("t", {
            "g": Column("g", type="INTEGER", releasable=True, domain=Domain(values=(1, 2))),
            "k": Column("k", type="INTEGER", max_freq=3),
            "x": Column("x", type="DOUBLE", bounds=BOUNDS)}),
        "u": Table("u", {"k": Column("k", type="INTEGER", max_freq=2)})})
    with _session_over(
            tmp_path / "j.duckdb", md,
            "CREATE TABLE t AS SELECT (1 + i % 2)::INTEGER AS g, (i % 50)::INTEGER AS k, "
            "(i % 11)::DOUBLE AS x FROM range(150) r(i)",
            "CREATE TABLE u AS SELECT (i % 50)::INTEGER AS k FROM range(100) r(i)") as session:
        result = session.run(
            "SELECT t.g, AVG(t.x) AS a FROM t JOIN u ON t.k = u.k GROUP BY t.g",
            epsilon=1.0, delta=1e-6)
        column = result.release.columns[1]
        assert column.row_intervals_95 is None
        assert column.accuracy_note == "accuracy not publishable: data-dependent noise"


def test_an_order_the_numpy_path_cannot_sort_falls_back_to_sql_with_the_intervals(tmp_path):
    """Keys of mixed types do not sort in Python: the fast path gives up and the plan's SQL,
    built then with the AVG's SUM and COUNT after the columns, orders the rows; each row keeps
    its own interval."""
    md = Metadata({"t": Table("t", {
        "g": Column("g", type="VARCHAR", releasable=True,
                    domain=Domain(values=("b", None, "a"))),
        "x": Column("x", type="DOUBLE", bounds=BOUNDS)})})
    with _session_over(
            tmp_path / "n.duckdb", md,
            "CREATE TABLE t AS SELECT CASE i % 3 WHEN 0 THEN 'a' WHEN 1 THEN 'b' END AS g, "
            "(i % 11)::DOUBLE AS x FROM range(300) r(i)") as session:
        prepared = session.prepare("SELECT g, AVG(x) AS a FROM t GROUP BY g ORDER BY g")
        assert prepared.plan.fast_path is not None and prepared.plan.avg_post_sql is None
        result = session.run("SELECT g, AVG(x) AS a FROM t GROUP BY g ORDER BY g", epsilon=1.0)
        assert [r[0] for r in result.rows] == ["a", "b", None]
        _checked(result, "a")


def test_explain_names_the_columns_with_a_row_interval():
    text = explain_text("SELECT g, AVG(x) AS a, AVG(x) * 2 AS b FROM t GROUP BY g", _metadata(),
                        epsilon=1.0, delta=0.0)
    assert "output intervals:\n  a: noisy SUM / noisy COUNT per row, within [0, 10]" in text
    assert "  b:" not in text.split("output intervals:")[1]
    md = tiny.metadata(max_groups=3, max_rows_per_group=2)
    grouped = explain_text("SELECT kind, AVG(qty) AS a FROM items GROUP BY kind", md,
                           epsilon=1.0, delta=0.0)
    assert "output intervals:\n  a: noisy SUM / noisy COUNT per row, within [0, 4]" in grouped
    # R2T (a unit, no GROUP BY): its own interval from the noisy levels, not this one
    r2t = explain_text("SELECT AVG(qty) AS a FROM items", md, epsilon=1.0, delta=0.0)
    assert "output intervals:" not in r2t


def test_partition_selected_rows_are_union_bounded_over_the_kept_groups(tmp_path):
    """Under partition selection the record's half-widths are per group (n_bins 1), but a
    row interval claims all rows together: its SUM's and COUNT's half-widths are over the
    kept groups (QA of #17: with 300 kept groups, 62 of 100 releases missed some row when
    they were per group). The bare SUM and COUNT are the AVG's own measurements, so each
    row's interval can be rebuilt from them."""
    md = Metadata({"t": Table("t", {
        "c": Column("c", type="INTEGER", releasable=True, partition_selection=True),
        "x": Column("x", type="DOUBLE", bounds=BOUNDS)})})
    with _session_over(
            tmp_path / "p.duckdb", md,
            "CREATE TABLE t AS SELECT (i % 40)::INTEGER AS c, (i % 13)::DOUBLE AS x "
            "FROM range(40 * 400) r(i)") as session:
        sql = "SELECT c, AVG(x) AS a, SUM(x) AS s, COUNT(x) AS n FROM t GROUP BY c"
        result = session.run(sql, epsilon=3.0, delta=1e-6, raw_counts=True)
        assert len(result.rows) == 40  # every group of 400 rows is kept
        intervals = _checked(result, "a")
        prepared = session.prepare(sql)
        plans, selection = plan_with_selection(prepared.analysis, Budget(3.0, 1e-6))
        # the record carries the selection's public scale (the footer shows it)
        assert result.release.selection_scale == selection.scale and selection.scale > 0
        (spec,) = prepared.plan.avg_intervals
        h_s, h_c = (measurement_half_width(plans[m], MEASUREMENT_CONFIDENCE, 40)
                    for m in (spec.total, spec.count))
        assert h_s > measurement_half_width(plans[spec.total], MEASUREMENT_CONFIDENCE, 1)
        for (_, _, s, n), (low, high) in zip(result.rows, intervals, strict=True):
            assert (low, high) == ratio_interval((s - h_s, s + h_s), (n - h_c, n + h_c), BOUNDS)
