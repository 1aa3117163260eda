"""Red team (issue #17): a derived table grouped by the privacy unit (dpsql.units.derived).

Attacks on "one unit is at most one row of D, and the outer aggregate's bound holds", on real
DuckDB over tests/units/tiny.py's shop:

* BROKE (fixed): an operation above an aggregate in D's HAVING or select list runs on exact
  per-unit values, and DuckDB refuses TRY around an aggregate, so the totality pass left it
  bare: ``HAVING CAST(SUM(o.amount) AS UTINYINT) > 3`` raised iff some unit's total exceeded
  255 -- an error depending on one unit. The same held for the row-level Q13 rule (no unit).
  Now refused by dpsql.analysis.aggregate_totality, called for every aggregate subquery.
* held: NULL and repeated unit ids (customers with a NULL or a shared c_id), orphans and NULL
  paths, under every accepted query of tests/bruteforce/test_units_keyed_derived.py and the
  further shapes below (joins through a public table, the unit table LEFT JOINed to a direct
  path's key, quoted / upper-case identifiers, a derived table's column aliases, an inner
  DISTINCT without the key, inner HAVING with an outer WHERE).
* precondition: a repeated key a via path points to does break "one row per unit" (an item
  of order 5 belongs to two customers); ``dpsql metadata check`` reports it as an error.
* refused before anything runs (checked here so they stay refused): LIMIT / ORDER BY /
  QUALIFY / window functions / TABLESAMPLE / ROLLUP inside D, a CTE hiding a table, a second
  CTE, a CTE read twice, set operations, a correlated or uncorrelated subquery in D, a
  duplicate alias differing only in case.
"""

from __future__ import annotations

import random

import duckdb
import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.errors import Error, UnsupportedConstructError
from dpsql.metadata.unit_check import check_units
from dpsql.rewrite.plan import plan_execution
from dpsql.units.analysis import structural_metadata
from tests.bruteforce import test_units_keyed_derived as bf
from tests.units import tiny

MD = bf.MD

# --------------------------------------------------------- data-dependent errors (BROKE, fixed)

#: customer 2's orders sum to 305 in the big neighbour, 5 in the small one: above 255 the
#: CAST raised a ConversionException (removing customer 2 made the error go away)
SMALL = {"customer": [(1, 1), (2, 1)], "orders": [(1, 1, 5), (2, 2, 5)], "items": [],
         "regions": [(1,), (2,)]}
BIG = {**SMALL, "orders": SMALL["orders"] + [(10 + i, 2, 5) for i in range(60)]}

ERRORS = [
    "SELECT n, COUNT(*) FROM (SELECT o.o_cust, LEAST(COUNT(*), 3) AS n FROM orders o "
    "GROUP BY o.o_cust HAVING CAST(SUM(o.amount) AS UTINYINT) > 3) d GROUP BY n",
    "SELECT COUNT(s) FROM (SELECT o.o_cust, CAST(SUM(o.amount) AS UTINYINT) AS s FROM orders o "
    "GROUP BY o.o_cust) d",
    "WITH d AS (SELECT c.c_id, LEAST(COUNT(o.o_id), 3) AS n FROM customer c LEFT JOIN orders o "
    "ON o.o_cust = c.c_id GROUP BY c.c_id HAVING CAST(SUM(o.amount) AS TINYINT) > 0) "
    "SELECT n, COUNT(*) FROM d GROUP BY n",
]


def _row_level(md):
    """``md`` without its privacy unit (the row-level keyed-group rule, FLEX's Q13)."""
    import dataclasses

    md = structural_metadata(md)
    tables = {k: dataclasses.replace(t, unit=None) for k, t in md.tables.items()}
    return dataclasses.replace(md, tables=tables, privacy_unit=None)


def _raises(sql: str, db: tiny.Database) -> bool:
    try:
        tiny.load(db).execute(sql).fetchall()
    except duckdb.Error:
        return True
    return False


@pytest.mark.parametrize("sql", ERRORS)
def test_an_operation_above_an_aggregate_in_the_derived_table_is_refused(sql):
    # the attack: the analyst's SQL raises on one neighbour and not on the other
    assert _raises(sql, BIG) and not _raises(sql, SMALL)
    for md in (MD, _row_level(MD)):
        with pytest.raises(UnsupportedConstructError, match="aggregate's exact value"):
            analyze_request(sql, md)


def test_total_forms_above_aggregates_stay_accepted_and_run_on_both_neighbours():
    sql = ("SELECT n, COUNT(*) FROM (SELECT o.o_cust, LEAST(COUNT(*), 3) AS n FROM orders o "
           "GROUP BY o.o_cust HAVING SUM(o.amount) > 255 AND COUNT(*) BETWEEN 1 AND 100) d "
           "GROUP BY n")
    analysis = analyze_request(sql, MD)
    exact = plan_execution(analysis, MD).exact_sql
    assert not _raises(exact, BIG) and not _raises(exact, SMALL)


# ------------------------------------------------ NULL and repeated unit ids, more shapes (held)

MORE = [
    # joined through a public table whose column equals the unit id
    ("SELECT c.c_id, COUNT(*) AS n FROM customer c JOIN regions r ON r.r = c.c_id "
     "JOIN orders o ON o.o_cust = r.r GROUP BY c.c_id",
     "SELECT n, COUNT(*) FROM ({}) d GROUP BY n"),
    # the direct path's column as the key, the unit table LEFT JOINed to it
    ("SELECT o.o_cust, COUNT(c.c_id) AS n FROM orders o LEFT JOIN customer c "
     "ON c.c_id = o.o_cust GROUP BY o.o_cust", "SELECT n, COUNT(*) FROM ({}) d GROUP BY n"),
    # quoted and upper-case identifiers (DuckDB folds both)
    ("SELECT C.C_ID, COUNT(O.O_ID) AS n FROM CUSTOMER C LEFT JOIN ORDERS O "
     "ON O.\"O_CUST\" = C.C_ID GROUP BY \"C\".C_ID", "SELECT n, COUNT(*) FROM ({}) d GROUP BY n"),
    # the derived table's columns renamed by aliases
    ("SELECT c.c_id, COUNT(o.o_id) AS n FROM customer c, orders o WHERE o.o_cust = c.c_id "
     "GROUP BY c.c_id", "SELECT n, COUNT(*) FROM ({}) AS d(a, n) GROUP BY n"),
    # an inner DISTINCT without the key: still at most one row more
    ("SELECT DISTINCT LEAST(COUNT(*), 2) AS n FROM orders o GROUP BY o.o_cust",
     "SELECT n, COUNT(*) FROM ({}) d GROUP BY n"),
    # inner HAVING on a sum, outer WHERE on the count; a key-only outer query (selected)
    ("SELECT o.o_cust, LEAST(COUNT(*), 3) AS n FROM orders o GROUP BY o.o_cust "
     "HAVING SUM(o.amount) > 2", "SELECT n, COUNT(*) FROM ({}) d WHERE n > 1 GROUP BY n"),
    ("SELECT c.c_id, COUNT(*) AS n FROM customer c LEFT JOIN orders o ON o.o_cust = c.c_id "
     "WHERE o.o_id IS NULL OR o.amount > 2 GROUP BY c.c_id", "SELECT n FROM ({}) d GROUP BY n"),
]


def _odd_databases(n: int) -> list[tiny.Database]:
    """The brute force's shops, with some customers' ids NULL or repeated (rows of no unit,
    and one unit of two customer rows: the neighbouring relation removes both)."""
    rng = random.Random(1713)
    out = []
    for db in bf.random_databases(rng, n):
        customers = [(None if rng.random() < 0.2 else c, r) for c, r in db["customer"]]
        if customers and rng.random() < 0.5:
            customers.append((customers[0][0], 2))
        out.append({**db, "customer": customers})
    return out


def _queries():
    return list(bf.QUERIES) + [(d, q.format(d)) for d, q in MORE]


def test_null_and_repeated_unit_ids_keep_one_row_per_unit():
    databases = _odd_databases(10)
    plans = {sql: bf._plan(sql) for _, sql in _queries()}
    sqls = [d for d, _ in _queries()] + [p.exact_sql for _, p in plans.values()]
    readings = bf.variant_rows(databases, sqls)  # (a NULL id is no unit: never removed)
    for derived, sql in _queries():
        analysis, plan = plans[sql]
        bf.check_derived(derived, sql, analysis, plan.exact_sql, databases, readings)


# ------------------------------------------------------------ a repeated key (the precondition)

def test_a_repeated_via_key_breaks_one_row_per_unit_and_metadata_check_reports_it():
    # orders 5 of customers 1 and 2: the items of order 5 belong to both, so removing
    # customer 1 (and, by the cascade, the items of its order 5) changes customer 2's row too
    db = {"customer": [(1, 1), (2, 1)], "orders": [(5, 1, 1), (5, 2, 1)],
          "items": [(5, 1, 1), (5, 2, 1)], "regions": [(1,), (2,)]}
    derived = bf.VIA
    before = set(bf._load(db).execute(derived).fetchall())
    after = set(bf._load(tiny.remove_unit(db, 1)).execute(derived).fetchall())
    assert len(before - after) == 2  # customer 1's row and customer 2's changed row
    con = bf._load(db)
    report = check_units(MD, lambda sql: con.execute(sql).fetchall())
    assert not report.ok
    assert [(k.table, k.column) for k in report.keys if not k.unique] == [("orders", "o_id")]


# ------------------------------------------------------------------------------ still refused

D = ("SELECT c.c_id, LEAST(COUNT(o.o_id), 3) AS n FROM customer c LEFT JOIN orders o "
     "ON o.o_cust = c.c_id GROUP BY c.c_id")


@pytest.mark.parametrize("sql", [
    f"SELECT n, COUNT(*) FROM ({D} ORDER BY n LIMIT 1) d GROUP BY n",
    f"SELECT n, COUNT(*) FROM ({D} QUALIFY ROW_NUMBER() OVER (ORDER BY c.c_id) < 3) d GROUP BY n",
    "SELECT n, COUNT(*) FROM (SELECT c.c_id, COUNT(*) OVER () AS n FROM customer c "
    "GROUP BY c.c_id) d GROUP BY n",
    "SELECT n, COUNT(*) FROM (SELECT c.c_id, LEAST(COUNT(*), 3) AS n FROM customer c "
    "TABLESAMPLE 50% GROUP BY c.c_id) d GROUP BY n",
    "SELECT n, COUNT(*) FROM (SELECT c.c_id, LEAST(COUNT(*), 3) AS n FROM customer c "
    "GROUP BY ROLLUP (c.c_id)) d GROUP BY n",
    f"SELECT n, COUNT(*) FROM ({D}) d GROUP BY ROLLUP (n)",
    # a CTE hiding a table, a second CTE, a CTE read twice, a set operation
    "WITH orders AS (SELECT o.o_cust, COUNT(*) AS n FROM orders o GROUP BY o.o_cust) "
    "SELECT n, COUNT(*) FROM orders GROUP BY n",
    f"WITH d AS ({D}), e AS ({D}) SELECT n, COUNT(*) FROM d GROUP BY n",
    f"WITH d AS ({D}) SELECT n, COUNT(*) FROM d WHERE n IN (SELECT n FROM d) GROUP BY n",
    f"SELECT n, COUNT(*) FROM ({D}) d GROUP BY n UNION ALL SELECT n, COUNT(*) FROM ({D}) e "
    "GROUP BY n",
    f"SELECT n, COUNT(*) FROM ({D} UNION ALL {D}) d GROUP BY n",
    # subqueries in D, correlated or not
    "SELECT n, COUNT(*) FROM (SELECT c.c_id, LEAST(COUNT(*), 3) AS n FROM customer c "
    "WHERE c.region IN (SELECT o.amount FROM orders o) GROUP BY c.c_id) d GROUP BY n",
    "SELECT n, COUNT(*) FROM (SELECT c.c_id, LEAST(COUNT(*), 3) AS n FROM customer c "
    "WHERE EXISTS (SELECT 1 FROM orders o WHERE o.o_cust = c.c_id) GROUP BY c.c_id) d "
    "GROUP BY n",
    # two aliases DuckDB takes for one
    "SELECT n, COUNT(*) FROM (SELECT \"C\".c_id, COUNT(c.o_id) AS n FROM customer \"C\" "
    "LEFT JOIN orders c ON c.o_cust = \"C\".c_id GROUP BY \"C\".c_id) d GROUP BY n",
    # the parameter DuckDB casts when a row reaches it
    "SELECT n, COUNT(*) FROM (SELECT o.o_cust, LEAST(COUNT(*), 3) AS n FROM orders o "
    "GROUP BY o.o_cust HAVING COUNT(*) > ?) d GROUP BY n",
])
def test_still_refused(sql):
    with pytest.raises(Error):
        analyze_request(sql, MD)
