"""Bins are filled by the session (dpsql.execute.layout.read_bins), not sent by the database.

The exact query returns only the non-empty bins inside the declared domains, as domain
ordinals, and the domains themselves; the engine fills the rest of the domains' product with
zeros before noise. Privacy requires that every bin of the declared domains is released and
noised whether empty or not, and that the released set of bins is exactly the domains'
product in domain order -- what the earlier rewrite produced with a CROSS JOIN of the domains
LEFT JOINed to the exact aggregates, which serves as the reference here (run as plain SQL).
"""

from __future__ import annotations

import dataclasses
import math
from decimal import Decimal

import numpy as np
import pytest

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.execute import layout
from dpsql.execute.exact import read_bins, read_domains
from dpsql.execute.post import sort_order as _sort_order
from dpsql.metadata import loads_metadata
from dpsql.rewrite.post import post_processing_sql
from dpsql.session import Session
from tests.shop_fixture import REGIONS, SEGMENTS, STATUSES, ZeroNoise


def _engine(metadata, shop):
    sampler = ZeroNoise()
    return Session(metadata, DuckDBBackend(shop.path, metadata), sampler=sampler), sampler


# Three keys: 4 regions x 3 statuses x 20 products (a public table domain) = 240 bins; a
# filter leaves most of them empty.
THREE_KEYS = ("SELECT c.region, o.status, o.product_id, COUNT(*) AS n, SUM(o.order_cost) AS s "
              "FROM orders o JOIN customers c ON o.customer_id = c.customer_id "
              "WHERE o.quantity = 5 AND c.age > 80 GROUP BY c.region, o.status, o.product_id")
OLD_FILL = """
WITH e AS (SELECT c.region AS k0, o.status AS k1, o.product_id AS k2, COUNT(*) AS n,
                  SUM(LEAST(GREATEST(o.order_cost, 0), 500)) AS s
           FROM orders o JOIN customers c ON o.customer_id = c.customer_id
           WHERE o.quantity = 5 AND c.age > 80 GROUP BY ALL),
     d0 AS (SELECT * FROM (VALUES {regions}) AS t(v, o)),
     d1 AS (SELECT * FROM (VALUES {statuses}) AS t(v, o)),
     d2 AS (SELECT DISTINCT product_id AS v FROM products)
SELECT d0.v, d1.v, d2.v, COALESCE(e.n, 0), COALESCE(e.s, 0)
FROM d0 CROSS JOIN d1 CROSS JOIN d2
LEFT JOIN e ON e.k0 IS NOT DISTINCT FROM d0.v AND e.k1 IS NOT DISTINCT FROM d1.v
          AND e.k2 IS NOT DISTINCT FROM d2.v
ORDER BY d0.o, d1.o, d2.v
"""


def _values(values) -> str:
    return ", ".join(f"('{v}', {i})" for i, v in enumerate(values))


def test_every_bin_of_the_domains_product_is_released_and_noised(shop, reference):
    engine, sampler = _engine(shop.metadata(), shop)
    result = engine.run(THREE_KEYS, epsilon=1000.0, delta=1e-6)
    want = reference.execute(OLD_FILL.format(regions=_values(REGIONS),
                                             statuses=_values(STATUSES))).fetchall()
    assert len(want) == 4 * 3 * 20
    assert [r[:4] for r in result.rows] == [tuple(r[:4]) for r in want]  # same bins, order
    assert [r[4] for r in result.rows] == pytest.approx([float(r[4]) for r in want])
    empty = sum(1 for r in want if r[3] == 0)
    assert empty > 150  # mostly empty: the fill is what is being tested
    # one noise draw per bin for each of the two measurements, empty bins included
    assert sampler.sizes == [240, 240]


def test_the_database_sends_only_non_empty_bins(shop):
    metadata = shop.metadata()
    engine, _ = _engine(metadata, shop)
    plan = engine.prepare(THREE_KEYS).plan
    compiled = engine.prepare(THREE_KEYS).compiled
    # the domain rows come from their own query (public data), the bins as columns of numbers
    domains = read_domains(engine.backend, compiled, [])
    assert [len(d) for d in domains.values] == [4, 3, 20]
    columns, _ = engine.backend.execute_columns(compiled.exact, plan.exact_bindings([]))
    index, count, _ = columns
    assert 0 < len(index) < 240 - 150
    filled = read_bins(engine.backend, compiled, [], domains)
    assert filled.n_bins == 240 and [len(d) for d in filled.domains] == [4, 3, 20]
    assert int(filled.exact[0].sum()) == int(count.sum())


def test_values_outside_the_domain_are_dropped_and_absent_values_get_zero_bins(shop, reference):
    metadata = shop.metadata(status_domain=("shipped", "lost", "new"))
    engine, sampler = _engine(metadata, shop)
    result = engine.run("SELECT status, COUNT(*) AS n FROM orders GROUP BY status",
                        epsilon=1000.0)
    counts = dict(reference.execute("SELECT status, COUNT(*) FROM orders GROUP BY 1").fetchall())
    assert result.rows == [("shipped", counts["shipped"]), ("lost", 0), ("new", counts["new"])]
    assert sampler.sizes == [3]


@pytest.mark.parametrize("order", [
    "n DESC, region, segment", "region DESC, n", "segment, region DESC", "s, n DESC, region",
])
def test_numpy_order_by_equals_the_sql_post_processing(shop, order):
    sql = (f"SELECT c.region, c.segment, COUNT(*) AS n, SUM(o.order_cost) AS s FROM orders o "
           f"JOIN customers c ON o.customer_id = c.customer_id WHERE o.quantity > 3 "
           f"GROUP BY c.region, c.segment ORDER BY {order}")
    engine, _ = _engine(shop.metadata(), shop)
    prepared = engine.prepare(sql)
    assert prepared.plan.fast_order and prepared.plan.post_sql is None
    fast = engine.run(sql, epsilon=1000.0, delta=1e-6)
    # the same plan without the fast path: the post-processing SQL on DuckDB
    post_sql, post_params = post_processing_sql(prepared.analysis)
    slow_plan = dataclasses.replace(prepared.plan, fast_path=None, fast_order=(),
                                    post_sql=post_sql, post_params=post_params)
    engine._prepared[sql] = dataclasses.replace(
        prepared, compiled=dataclasses.replace(prepared.compiled, plan=slow_plan))
    slow = engine.run(sql, epsilon=1000.0, delta=1e-6)
    assert fast.rows == slow.rows and fast.types == slow.types
    assert len(fast.rows) == len(REGIONS) * len(SEGMENTS)


def test_order_by_a_key_with_a_null_domain_value_falls_back_to_sql(shop, reference):
    metadata = loads_metadata(shop.metadata_yaml().replace(
        "domain: {values: [north, south, east, west]}",
        "domain: {values: [north, south, east, west, null]}"))
    engine, sampler = _engine(metadata, shop)
    sql = "SELECT region, COUNT(*) AS n FROM customers GROUP BY region ORDER BY region"
    result = engine.run(sql, epsilon=1000.0)
    want = reference.execute(sql).fetchall()
    assert result.rows == [*want, (None, 0)]  # SQL: NULLS LAST
    assert sampler.sizes == [5]


def test_ungrouped_queries_have_one_bin(shop, reference):
    engine, sampler = _engine(shop.metadata(), shop)
    result = engine.run("SELECT COUNT(*) AS n, SUM(order_cost) AS s FROM orders WHERE "
                        "quantity > 100", epsilon=1000.0)
    assert result.rows == [(0, 0.0)] and sampler.sizes == [1, 1]
    assert math.isclose(engine.run("SELECT SUM(order_cost) AS s FROM orders",
                                   epsilon=1000.0).rows[0][0],
                        float(reference.execute("SELECT SUM(order_cost) FROM orders")
                              .fetchone()[0]))


def test_domain_products_over_the_cap_are_rejected_before_anything_runs(shop):
    values = ", ".join(str(i) for i in range(2200))
    metadata = loads_metadata(
        shop.metadata_yaml()
        .replace("domain: {values: [north, south, east, west]}", f"domain: {{values: [{values}]}}")
        .replace("domain: {values: [consumer, business]}", f"domain: {{values: [{values}]}}")
        .replace("domain: {values: [1, 2, 3, 4, 5]}", f"domain: {{values: [{values}]}}"))
    engine, sampler = _engine(metadata, shop)
    sql = ("SELECT c.region, c.segment, o.quantity, COUNT(*) AS n FROM orders o JOIN customers c "
           "ON o.customer_id = c.customer_id GROUP BY c.region, c.segment, o.quantity")
    with pytest.raises(NotSupportedError, match="10,000,000 bins"):
        engine.run(sql, epsilon=1.0, delta=1e-6)
    assert sampler.sizes == []


CASES = ["small ints", "wide ints", "floats", "mixed", "ties", "ascending last",
         "ascending only", "one narrow int", "one int just too wide", "nan", "float ascending"]


@pytest.mark.parametrize("case", CASES)
def test_sort_order_equals_a_stable_lexsort(case):
    # The fast path's ORDER BY drops a never-decreasing last key, radix-sorts one narrow
    # integer key and folds integer keys into one argsort key; the released order must be
    # exactly numpy's stable lexsort (ties in bin order), whatever the keys.
    rng = np.random.default_rng(7)
    n = 5_000
    small = rng.integers(-3, 4, n)
    wide = rng.integers(-2**61, 2**61, n)  # folding would overflow: the lexsort fallback
    floats = rng.normal(size=n).round(1)
    ascending = np.sort(rng.integers(0, 40, n))  # a key non-decreasing in bin order
    nan = floats.copy()
    nan[::7] = np.nan
    keys = {"small ints": [small, rng.integers(0, 50, n)], "wide ints": [small, wide, small],
            "floats": [floats, small], "mixed": [small, floats, rng.integers(0, 9, n)],
            "ties": [np.zeros(n, dtype=np.int64)], "ascending last": [-small, ascending],
            "ascending only": [ascending], "one narrow int": [rng.integers(-2**15, 2**15, n)],
            "one int just too wide": [rng.integers(0, 2**16 + 1, n)],
            "nan": [nan, np.sort(nan)], "float ascending": [floats, np.arange(n) / 3.0]}[case]
    want = np.lexsort(keys[::-1])
    assert np.array_equal(_sort_order(keys, n), want)
    assert np.array_equal(_sort_order([], 0), np.array([], dtype=np.int64))


def _read_domains_by_rows(n_keys, rows):
    """Each key's values placed at their ordinals, one row at a time (the reference)."""
    found = [[] for _ in range(n_keys)]
    for r in rows:
        found[r[0] - 1].append((r[1], r[2 + r[0] - 1]))
    out = []
    for entries in found:
        column = np.empty(len(entries), dtype=object)
        for ordinal, value in entries:
            column[ordinal] = value
        out.append(column)
    return out


def test_read_domains_places_each_value_at_its_ordinal():
    rows = [(1, 2, "c", None), (2, 0, None, Decimal("1.50")), (1, 0, "a", None),
            (1, 1, (1, 2), None), (2, 1, None, None), (1, 3, None, None)]
    domains = layout.read_domains(2, rows, ["INTEGER", "INTEGER", "VARCHAR", "DECIMAL(9,2)"])
    want = _read_domains_by_rows(2, rows)
    assert [d.tolist() for d in domains.values] == [w.tolist() for w in want]
    assert domains.values[0].tolist() == ["a", (1, 2), "c", None]  # a tuple stays one value
    assert domains.types == ["VARCHAR", "DECIMAL(9,2)"] and domains.n_bins == 8
    empty = layout.read_domains(1, [], ["INTEGER", "INTEGER", "VARCHAR"])
    assert [len(d) for d in empty.values] == [0]


@pytest.mark.parametrize("rows", [
    [(3, 0, "a", None)],  # no third key
    [(0, 0, "a", None)],
    [(1, 0, "a", None), (1, 0, "b", None)],  # an ordinal twice
    [(1, 1, "a", None)],  # a gap
])
def test_a_malformed_domain_result_is_refused(rows):
    with pytest.raises(ProgrammingError, match="malformed"):
        layout.read_domains(2, rows, ["INTEGER", "INTEGER", "VARCHAR", "VARCHAR"])
