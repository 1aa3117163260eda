"""dpsql.units.multi_rewrite's flat form for plain counts and SUMs over two units: the rows'
unit ids (and a SUM part's row values), ungrouped, give every level exactly the Q_j of the
fallback that groups them in the database (a pair's rows are parallel edges: that module's
argument; a SUM's capacities floored row by row in both); more rows than FLAT_ROWS fall back to
the grouped query; which form is planned depends on the SQL and the metadata only."""

from __future__ import annotations

import random

import duckdb
import numpy as np
import pytest
import sqlglot

from dpsql.analysis.blocks import analyze_request
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.execute.exact import compile_plan
from dpsql.rewrite.plan import ExecutionPlan, plan_execution
from dpsql.units import multi_execute, multi_rewrite
from dpsql.units.multi_execute import fallback_levels, neither_in_full, pair_levels
from dpsql.units.multi_rewrite import is_flat
from tests.db_files import writing
from tests.units import tiny_multi

FLAT = ("SELECT COUNT(*) FROM items",
        "SELECT COUNT(*) FROM items WHERE qty > 1",
        "SELECT COUNT(*) FROM items i JOIN orders o ON i.i_order = o.o_id",
        "SELECT COUNT(*), COUNT(*) FROM items WHERE qty <> 2",
        "SELECT SUM(qty) FROM items",
        # fractional values: each row's capacity is floored at every level's step
        "SELECT COUNT(*), SUM(qty * 0.37) FROM items",
        "SELECT SUM(qty / 3.0), COUNT(*) FROM items i JOIN orders o ON i.i_order = o.o_id")
#: metadata under which FLAT is flat: the default grid, and a wide one (a SUM's levels up to
#: ~2^31 value units: steps delta_j up to 2, so most rows' values floor away at the top)
GRIDS = {"default": {}, "wide": {"max_contribution": 2**27, "level_base": 5.5}}


def _plan(sql: str, md=None) -> tuple[object, ExecutionPlan]:
    md = md or tiny_multi.metadata()
    analysis = analyze_request(sql, md)
    assert analysis.unit is not None and analysis.unit.more
    return analysis.unit, plan_execution(analysis, md)


def test_only_plain_counts_below_2_31_and_sums_are_flat():
    for sql in FLAT:
        plan = _plan(sql)[1]
        assert is_flat(plan.exact_sql) and plan.fallback_sql is not None, sql
        # the plan's queries: the rows (read behind dpsql's guard: the reader's, no LIMIT in
        # the SQL), and the grouped fallback
        release = _plan(sql)[0]
        values = [f"__v{i}" for i, p in enumerate(release.parts) if not p.integer]
        tree = sqlglot.parse_one(plan.exact_sql, read="duckdb")
        assert [e.alias_or_name for e in tree.expressions] == ["__u0", "__u1", *values]
        assert not tree.args.get("limit"), sql
        columns = 2 + len(values)
        guard = multi_rewrite.flat_guard(columns)
        assert guard == (multi_rewrite.FLAT_ROWS if columns <= 3
                         else multi_rewrite.FLAT_ROWS * 3 // columns)
        # the grouped queries, then the rows of neither unit's totals
        *grouped, totals = plan.fallback_sql
        assert all("GROUP BY" in q for q in grouped)
        assert "GROUP BY" not in totals and "__u0 IS NULL AND __f.__u1 IS NULL" in totals
        # at most FALLBACK_COLUMNS capacity columns a query, every (part, level) once
        layout = multi_rewrite.fallback_layout(release)
        assert len(grouped) == len(layout)
        assert all(0 < len(c) <= multi_rewrite.FALLBACK_COLUMNS for c in layout)
    for sql in ("SELECT COUNT(qty) FROM items", "SELECT COUNT(qty), SUM(qty) FROM items"):
        try:
            _, plan = _plan(sql)
        except Exception:  # refused under two units: nothing runs
            continue
        assert not is_flat(plan.exact_sql) and plan.fallback_sql is None, sql
    # a level of 2^31 rows or more floors by a step above 1: the pairs must be grouped
    _, plan = _plan("SELECT COUNT(*) FROM items", tiny_multi.metadata(max_contribution=2**32))
    assert not is_flat(plan.exact_sql) and plan.fallback_sql is None


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("sql", FLAT)
def test_flat_rows_give_the_grouped_levels_on_random_databases(sql, grid):
    release, plan = _plan(sql, tiny_multi.metadata(**GRIDS[grid]))
    assert plan.fallback_sql is not None
    sums = [p for p in release.parts if not p.integer]
    rng = random.Random(sum(map(ord, sql)))
    con = duckdb.connect()
    floored = neither = 0
    for _ in range(5):
        db = tiny_multi.random_database(rng)
        db["items"] = db["items"] * rng.randint(1, 3)  # several rows per pair
        # and rows of neither unit (no supplier; an orphan order, or an order of no customer)
        db["orders"] += [(98, None)]
        db["items"] += [(rng.choice([98, 99]), None, rng.randint(-3, 5))
                        for _ in range(rng.randint(0, 2))]
        tiny_multi.load(db, con)
        flat = list(con.execute(plan.exact_sql).fetchnumpy().values())
        *queries, totals = plan.fallback_sql
        grouped = [list(con.execute(q).fetchnumpy().values()) for q in queries]
        assert len(flat) == 2 + len(sums)
        assert sum(len(g) - 2 for g in grouped) == sum(
            len(multi_rewrite.value_levels(p, release)) if not p.integer else 1
            for p in release.parts)
        want = fallback_levels(grouped, release)
        got = pair_levels(flat, release)
        assert [g.tolist() for g in got] == [w.tolist() for w in want]
        # the rows of neither unit in full: the same numbers from both reads
        (row,) = con.execute(totals).fetchall()
        assert neither_in_full(flat, release) == [float(v or 0) for v in row]
        neither += any(row)
        # the exact sums of the parts' values: a level reaching every unit floors them
        for k, part in enumerate(release.parts):
            if not part.integer:
                values = np.ma.filled(np.ma.asarray(flat[2 + sums.index(part)]), 0)
                floored += got[k][-1] < values.sum()
    if grid == "wide" and sums and "0.37" in sql:
        assert floored  # the test reached the floors it is about
    assert neither  # the test reached rows of neither unit


def test_more_rows_than_the_guard_are_grouped_in_the_database(tmp_path, monkeypatch):
    path = tmp_path / "flat.duckdb"
    with writing(path) as con:
        db = tiny_multi.random_database(random.Random(3))
        db["items"] = [(1, 1, 2)] * 6 + [(2, 2, 1)] * 3 + [(99, None, 1)] * 2
        db["orders"] = [(1, 1), (2, 2)]
        db["customer"] = [(1, 1), (2, 2)]
        db["supplier"] = [(1, 1), (2, 2)]
        tiny_multi.load(db, con)
    md = tiny_multi.metadata()
    backend = DuckDBBackend(str(path), md)
    try:
        analysis = analyze_request("SELECT COUNT(*) FROM items", md)
        compiled = compile_plan(backend, plan_execution(analysis, md))
        ran = tiny_multi.recorded(backend, monkeypatch)
        first, first_neither = multi_execute.read_pair_truncated(
            backend, compiled, [], analysis.unit)
        assert len(ran) == 1 and "GROUP BY" not in ran[0].upper()
        monkeypatch.setattr(multi_execute, "FLAT_ROWS", 4)
        monkeypatch.setattr(multi_rewrite, "FLAT_ROWS", 4)
        again, again_neither = multi_execute.read_pair_truncated(
            backend, compiled, [], analysis.unit)
        assert len(ran) == 4 and "GROUP BY" in ran[2].upper() and "IS NULL" in ran[3]
        assert [x.tolist() for x in again] == [x.tolist() for x in first]
        # customer 1 / supplier 1: 6 rows, customer 2 / supplier 2: 3 rows; the 2 rows of
        # neither unit in full, apart
        assert first[0].tolist() == [min(6, t) + min(3, t) for t in (2, 4, 8)]
        assert first_neither == again_neither == [2.0]
    finally:
        backend.close()


def test_psi_of_flat_rows_is_one_per_row():
    release, _ = _plan("SELECT COUNT(*) FROM items")
    cols = [np.array([1, 1, 1, 2]), np.array([5, 5, 6, 6])]
    (levels,) = pair_levels(cols, release)
    # pair (1, 5) has 2 rows, customer 1 carries 3: at tau 2 it gives 2, customer 2 its 1
    assert levels.tolist() == [3, 4, 4]
