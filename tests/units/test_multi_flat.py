"""dpsql.units.multi_rewrite's flat form for plain counts over two units: the rows' unit ids,
ungrouped, give every level the same Q_j as the pairs grouped in the database (a pair's rows
are parallel edges of capacity 1: dpsql.units.multi_rewrite's argument); more rows than
FLAT_ROWS fall back to the grouped query; which form runs depends on the SQL and the metadata
only."""

from __future__ import annotations

import random

import duckdb
import numpy as np
import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.execute.exact import compile_plan
from dpsql.rewrite.plan import ExecutionPlan, plan_execution
from dpsql.units import multi_execute, multi_rewrite
from dpsql.units.multi_execute import pair_levels
from dpsql.units.multi_rewrite import is_flat
from tests.db_files import writing
from tests.units import tiny_multi

FLAT = ("SELECT COUNT(*) FROM items",
        "SELECT COUNT(*) FROM items WHERE qty > 1",
        "SELECT COUNT(*) FROM items i JOIN orders o ON i.i_order = o.o_id",
        "SELECT COUNT(*), COUNT(*) FROM items WHERE qty <> 2")


def _plan(sql: str, md=None) -> tuple[object, ExecutionPlan]:
    md = md or tiny_multi.metadata()
    analysis = analyze_request(sql, md)
    assert analysis.unit is not None and analysis.unit.more
    return analysis.unit, plan_execution(analysis, md)


def test_only_plain_counts_below_2_31_are_flat():
    for sql in FLAT:
        plan = _plan(sql)[1]
        assert is_flat(plan.exact_sql) and plan.fallback_sql is not None, sql
        # the plan's queries: the rows behind dpsql's guard, and the grouped fallback
        assert plan.exact_sql.startswith("SELECT __f.__u0, __f.__u1 FROM (")
        assert plan.exact_sql.endswith(f") AS __f LIMIT {multi_rewrite.FLAT_ROWS + 1}")
        assert "GROUP BY" in plan.fallback_sql
    for sql in ("SELECT SUM(qty) FROM items", "SELECT COUNT(*), SUM(qty) FROM items",
                "SELECT COUNT(qty) FROM items"):
        try:
            _, plan = _plan(sql)
        except Exception:  # refused under two units: nothing runs
            continue
        assert not is_flat(plan.exact_sql) and plan.fallback_sql is None, sql
    # a level of 2^31 rows or more floors by a step above 1: the pairs must be grouped
    _, plan = _plan("SELECT COUNT(*) FROM items", tiny_multi.metadata(max_contribution=2**32))
    assert not is_flat(plan.exact_sql) and plan.fallback_sql is None


@pytest.mark.parametrize("sql", FLAT)
def test_flat_rows_give_the_grouped_levels_on_random_databases(sql):
    release, plan = _plan(sql)
    rng = random.Random(sum(map(ord, sql)))
    con = duckdb.connect()
    for _ in range(25):
        db = tiny_multi.random_database(rng)
        db["items"] = db["items"] * rng.randint(1, 3)  # several rows per pair
        tiny_multi.load(db, con)
        flat = list(con.execute(plan.exact_sql).fetchnumpy().values())
        grouped = list(con.execute(plan.fallback_sql).fetchnumpy().values())
        assert len(flat) == 2 and len(grouped) == 2 + len(release.parts)
        want = pair_levels(grouped, release)
        got = pair_levels(flat, release)
        assert [g.tolist() for g in got] == [w.tolist() for w in want]


def test_more_rows_than_the_guard_are_grouped_in_the_database(tmp_path, monkeypatch):
    path = tmp_path / "flat.duckdb"
    with writing(path) as con:
        db = tiny_multi.random_database(random.Random(3))
        db["items"] = [(1, 1, 2)] * 6 + [(2, 2, 1)] * 3
        db["orders"] = [(1, 1), (2, 2)]
        db["customer"] = [(1, 1), (2, 2)]
        db["supplier"] = [(1, 1), (2, 2)]
        tiny_multi.load(db, con)
    md = tiny_multi.metadata()
    backend = DuckDBBackend(str(path), md)
    try:
        analysis = analyze_request("SELECT COUNT(*) FROM items", md)
        compiled = compile_plan(backend, plan_execution(analysis, md))
        ran: list[str] = []
        execute = backend.execute_columns

        def recording(sql, params=None):
            ran.append(sql)
            return execute(sql, params)

        monkeypatch.setattr(backend, "execute_columns", recording)
        first = multi_execute.read_pair_truncated(backend, compiled, [], analysis.unit)
        assert len(ran) == 1 and "LIMIT" in ran[0].upper()
        monkeypatch.setattr(multi_execute, "FLAT_ROWS", 4)
        monkeypatch.setattr(multi_rewrite, "FLAT_ROWS", 4)
        again = multi_execute.read_pair_truncated(backend, compiled, [], analysis.unit)
        assert len(ran) == 3 and "GROUP BY" in ran[2].upper()
        assert [x.tolist() for x in again] == [x.tolist() for x in first]
        # customer 1 / supplier 1: 6 rows, customer 2 / supplier 2: 3 rows
        assert first[0].tolist() == [min(6, t) + min(3, t) for t in (2, 4, 8)]
    finally:
        backend.close()


def test_psi_of_flat_rows_is_one_per_row():
    release, _ = _plan("SELECT COUNT(*) FROM items")
    cols = [np.array([1, 1, 1, 2]), np.array([5, 5, 6, 6])]
    (levels,) = pair_levels(cols, release)
    # pair (1, 5) has 2 rows, customer 1 carries 3: at tau 2 it gives 2, customer 2 its 1
    assert levels.tolist() == [3, 4, 4]
