"""Queries under a privacy unit with noise off, on DuckDB and on Spark (``make_backend`` runs
this module once per backend): R2T's top level is the analyst's exact answer (every unit below
GS), each level Q(tau_j) is sum_u min(c_u, tau_j b) computed in Python from the raw rows, and
a GROUP BY whose bounds every unit meets is exact."""

from __future__ import annotations

from collections import Counter

import duckdb
import numpy as np
import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.execute.exact import compile_plan
from dpsql.noise.r2t import levels
from dpsql.rewrite.plan import plan_execution
from dpsql.session import Session
from dpsql.units.execute import read_truncated
from tests.db_files import writing
from tests.shop_fixture import ZeroNoise
from tests.units import tiny

DB = {
    "customer": [(c, 1 + c % 2) for c in range(1, 9)],
    "orders": [(o, 1 + o % 8 if o < 30 else 1, o % 9 - 3) for o in range(1, 41)],
    "items": [(1 + i % 45, i % 5, 1 + i % 3) for i in range(120)],  # orders 41..45: orphans
    "regions": [(1,), (2,)],
}


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    path = tmp_path_factory.mktemp("units_backends") / "shop.duckdb"
    with writing(path) as con:
        for table, columns in tiny.COLUMNS.items():
            con.execute(f"CREATE TABLE {table} ({', '.join(c + ' INTEGER' for c in columns)})")
            values = ", ".join("(" + ", ".join(map(str, r)) + ")" for r in DB[table])
            con.execute(f"INSERT INTO {table} VALUES {values}")
    return path


@pytest.fixture(scope="module")
def metadata():
    return tiny.metadata(max_contribution=64, max_groups=3, max_rows_per_group=64)


@pytest.fixture(scope="module")
def backend(database, metadata, make_backend):
    b = make_backend(database, metadata)
    yield b
    b.close()


def _unit_of_item(order: int) -> int | None:
    owner = {o: c for o, c, _ in DB["orders"]}
    return owner.get(order)


def test_r2t_levels_are_sums_of_truncated_unit_contributions(backend, metadata):
    analysis = analyze_request("SELECT COUNT(*), SUM(qty) FROM items", metadata)
    plan = compile_plan(backend, plan_execution(analysis, metadata))
    got = read_truncated(backend, plan, [], analysis.unit)
    counts: Counter = Counter()
    sums: Counter = Counter()
    for order, qty, _ in DB["items"]:
        u = _unit_of_item(order)  # None: an orphan, the one group of no unit
        counts[u] += 1
        sums[u] += min(max(qty, 0), 4)
    taus = levels(64)
    # the rows of no unit (None) are added in full at every level, never truncated
    want_counts = [sum(c if u is None else min(c, t) for u, c in counts.items()) for t in taus]
    # a SUM's levels are in value units (dpsql.units.grid): 2, 4, .., 256 = 64 rows x 4
    value_taus = levels(256)
    want_sums = [sum(s if u is None else min(s, t) for u, s in sums.items())
                 for t in value_taus]
    assert counts[None] > taus[0] and sums[None] > value_taus[0]  # they would be truncated
    assert list(got[0]) == want_counts
    assert len(got[1]) == len(value_taus) == 8
    assert np.allclose(got[1], want_sums)
    assert want_counts[-1] == len(DB["items"])  # the top level truncates nothing


def test_a_grouped_query_within_its_bounds_is_exact(backend, metadata, database):
    session = Session(metadata, backend, sampler=ZeroNoise())
    sql = "SELECT kind, COUNT(*) AS n, SUM(qty) AS s FROM items GROUP BY kind"
    rows = sorted(session.run(sql, epsilon=1.0).rows)
    con = duckdb.connect(str(database), read_only=True)
    want = sorted(con.execute(sql).fetchall())
    con.close()
    assert [(k, n) for k, n, _ in rows] == [(k, n) for k, n, _ in want]
    assert [float(s) for _, _, s in rows] == [float(s) for _, _, s in want]


@pytest.mark.parametrize(("sql", "base"), [
    ("SELECT COUNT(*) FROM items", 2.0),
    ("SELECT COUNT(*), COUNT(i.kind) FROM items i JOIN orders o ON o.o_id = i.i_order"
     " WHERE o.amount > -2", 2.5)])
def test_count_levels_through_the_histogram_are_exact(database, make_backend, sql, base):
    # counts only: the executed query aggregates a histogram of the units' contributions
    # (dpsql.units.rewrite._r2t_histogram); on the owner's grid 2, 6, 15, 39 (base 2.5, GS 39)
    # the lower levels truncate (customers hold up to ~20 items)
    md = tiny.metadata(max_contribution=39, level_base=base)
    b = make_backend(database, md)
    try:
        analysis = analyze_request(sql, md)
        plan = compile_plan(b, plan_execution(analysis, md))
        assert "__h" in plan.plan.exact_sql
        got = read_truncated(b, plan, [], analysis.unit)
    finally:
        b.close()
    owner = {o: (c, amount) for o, c, amount in DB["orders"]}
    counts: Counter = Counter()
    for order, _, _ in DB["items"]:
        if "JOIN" in sql and (order not in owner or owner[order][1] <= -2):
            continue
        counts[owner[order][0] if order in owner else None] += 1
    taus = levels(39, base)
    want = [sum(c if u is None else min(c, t) for u, c in counts.items()) for t in taus]
    assert want[0] < want[-1]  # truncation is active
    for part in got:
        assert part.dtype == np.int64 and list(part) == want


def test_a_derived_table_grouped_by_the_unit_is_the_plain_query_noise_off(backend, metadata,
                                                                          database):
    # dpsql.units.derived: the executed query is the row-level one, bins 0..12 from LEAST
    session = Session(metadata, backend, sampler=ZeroNoise())
    sql = ("SELECT n, COUNT(*) AS k FROM (SELECT c.c_id, LEAST(COUNT(i.qty), 12) AS n FROM "
           "customer c JOIN orders o ON o.o_cust = c.c_id LEFT JOIN items i "
           "ON i.i_order = o.o_id AND i.kind > 1 GROUP BY c.c_id) d GROUP BY n")
    result = session.run(sql, epsilon=1.0)
    assert result.release.privacy_unit == "customer.c_id"
    con = duckdb.connect(str(database), read_only=True)
    want = dict(con.execute(sql).fetchall())
    con.close()
    assert len(want) > 1
    assert dict(result.rows) == {n: want.get(n, 0) for n in range(13)}
