"""dpsql.units.flat_counts and its read in dpsql.units.execute: a COUNT(*) under one unit over
many units read as one unit id per row and counted in numpy -- which queries may, the same
histogram rows (so the same levels) as the GROUP BY on random databases with NULL ids and
orphans, and the read's choice and guard through the real DuckDB backend."""

from __future__ import annotations

import random

import numpy as np
import pytest
import sqlglot

from dpsql.analysis.blocks import analyze_request
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.execute.exact import compile_plan
from dpsql.rewrite.plan import plan_execution
from dpsql.units import execute as unit_execute
from dpsql.units.execute import (
    histogram_of_ids,
    many_units,
    read_truncated_parts,
    truncated_parts,
)
from dpsql.units.flat_counts import MANY_UNITS, flat_unit_ids
from tests.units import tiny

FLAT = [
    "SELECT COUNT(*) FROM items",
    "SELECT COUNT(*) FROM orders o JOIN items i ON i.i_order = o.o_id WHERE i.qty > 1",
    "SELECT COUNT(*) FROM orders WHERE amount > 0",
]
NOT_FLAT = [
    "SELECT COUNT(amount) FROM orders",  # a column's count: not one per row
    "SELECT COUNT(*), COUNT(i.kind) FROM items i",  # two parts: grouping sets
    "SELECT SUM(qty) FROM items",  # a SUM: read per unit
    "SELECT kind, COUNT(*) FROM items GROUP BY kind",  # the two-stage
]


def _plan(sql: str):
    md = tiny.metadata(max_contribution=8)
    analysis = analyze_request(sql, md)
    return analysis.unit, plan_execution(analysis, md)


def test_only_one_plain_count_under_one_unit_is_read_flat():
    for sql in FLAT:
        release, plan = _plan(sql)
        assert plan.fallback_sql is not None and len(plan.fallback_sql) == 1, sql
        (flat,) = plan.fallback_sql
        names = [e.alias_or_name for e in sqlglot.parse_one(flat, read="duckdb").expressions]
        assert names == ["__u"] and "GROUP BY" not in flat and "LIMIT" not in flat, flat
        assert flat == flat_unit_ids(plan.exact_sql, release)
    for sql in NOT_FLAT:
        release, plan = _plan(sql)
        assert flat_unit_ids(plan.exact_sql, release) is None, sql


@pytest.mark.parametrize("sql", FLAT)
def test_the_ids_give_the_histogram_querys_rows(sql):
    release, plan = _plan(sql)
    (flat,) = plan.fallback_sql
    rng = random.Random(sql)
    for n in range(30):
        db = (tiny.null_heavy_database if n % 2 else tiny.random_database)(rng)
        con = tiny.load(db)
        want = sorted(con.execute(plan.exact_sql).fetchall())
        (ids,) = con.execute(flat).fetchnumpy().values()
        assert sorted(histogram_of_ids(ids)) == want, (sql, db)
        assert ([x.tolist() for x in truncated_parts(histogram_of_ids(ids), release).levels]
                == [x.tolist() for x in truncated_parts(want, release).levels])


def test_ids_of_any_type_are_counted_exactly():
    # object ids (strings, NULL as None), int ids far apart (sorted codes), masked NULLs
    assert sorted(histogram_of_ids(["a", "b", "a", None, None])) == [(1, 1, 0), (2, 1, 1)]
    far = np.array([2**62, -(2**62), 2**62, 5], dtype=np.int64)
    assert sorted(histogram_of_ids(far)) == [(1, 2, 0), (2, 1, 0)]
    masked = np.ma.masked_array([1, 1, 7, 0], mask=[False, False, False, True])
    assert sorted(histogram_of_ids(masked)) == [(1, 1, 1), (2, 1, 0)]  # unit 7; unit 1
    assert histogram_of_ids(np.zeros(0, np.int64)) == []


def test_many_units_reads_the_id_range_and_the_read_keeps_its_levels(tmp_path, monkeypatch):
    """Customer ids 1 and 2^20 span more than MANY_UNITS: the flat read runs (one query) and
    gives the histogram's levels; 1 and 2 do not: the GROUP BY runs. Past the flat read's
    guard the histogram query runs after it."""
    from tests.units import tiny_multi

    md = tiny.metadata(max_contribution=8)
    sql = "SELECT COUNT(*) FROM items"
    for far, flat in ((2**20, True), (2, False)):
        db = {"customer": [(1, 1), (far, 2)], "orders": [(1, 1, 0), (2, far, 1), (3, None, 2)],
              "items": [(1, 1, 1)] * 3 + [(2, 1, 1)] * 9 + [(3, 1, 1), (99, 1, 1)],
              "regions": [(1,)]}
        path = tiny.write_file(tmp_path / f"flat{far}.duckdb", db)
        backend = DuckDBBackend(str(path), md)
        try:
            analysis = analyze_request(sql, md)
            release = analysis.unit
            compiled = compile_plan(backend, plan_execution(analysis, md))
            assert many_units(backend, release) == flat
            assert (far - 1 >= MANY_UNITS) == flat
            ran = tiny_multi.recorded(backend, monkeypatch)
            got = read_truncated_parts(backend, compiled, [], release)
            assert ran == ([compiled.fallback[0]] if flat else [compiled.exact])
            # units of 3 and 9 rows at levels 2, 4, 8; the 2 rows of no unit in full
            assert got.levels[0].tolist() == [2 + 2 + 2, 3 + 4 + 2, 3 + 8 + 2]
            if flat:
                monkeypatch.setattr(unit_execute, "FLAT_ROWS", 13)  # 14 rows: past the guard
                again = read_truncated_parts(backend, compiled, [], release)
                assert ran[1:] == [compiled.fallback[0], compiled.exact]
                assert again.levels[0].tolist() == got.levels[0].tolist()
            monkeypatch.undo()
        finally:
            backend.close()
