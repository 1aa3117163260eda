"""Which queries dpsql.units.paths proves single-unit, and the refusals of the others."""

from __future__ import annotations

import dataclasses

import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import UnsupportedConstructError
from dpsql.metadata import UnitPath
from dpsql.units.identity import path_type_mismatches
from tests.ledgers import charged, ledger_session, open_ledger
from tests.shop_fixture import ZeroNoise
from tests.units import tiny


@pytest.mark.parametrize("sql,source,hops", [
    ("SELECT COUNT(*) FROM orders", "orders.o_cust", 0),
    ("SELECT COUNT(*) FROM customer", "customer.c_id", 0),
    # lineitem-like: the unit is looked up through orders
    ("SELECT COUNT(*) FROM items", "items.i_order", 1),
    # joined along the path: the order's own column, no lookup
    ("SELECT COUNT(*) FROM items i JOIN orders o ON o.o_id = i.i_order", "orders.o_cust", 0),
    ("SELECT COUNT(*) FROM items i, orders o WHERE o.o_id = i.i_order", "orders.o_cust", 0),
    ("SELECT COUNT(*) FROM orders o JOIN customer c ON c.c_id = o.o_cust", "orders.o_cust", 0),
    # a self-join within one unit
    ("SELECT COUNT(*) FROM orders a JOIN orders b ON a.o_cust = b.o_cust", "orders.o_cust", 0),
    ("SELECT COUNT(*) FROM items a JOIN items b ON a.i_order = b.i_order", "items.i_order", 1),
    # correlated semi- and anti-joins on the path
    ("SELECT COUNT(*) FROM orders o WHERE EXISTS (SELECT 1 FROM items i "
     "WHERE i.i_order = o.o_id)", "orders.o_cust", 0),
    ("SELECT COUNT(*) FROM orders o WHERE NOT EXISTS (SELECT 1 FROM items i "
     "WHERE i.i_order = o.o_id AND i.qty > 2)", "orders.o_cust", 0),
    ("SELECT COUNT(*) FROM orders WHERE o_id IN (SELECT i_order FROM items)",
     "orders.o_cust", 0),
    # an EXISTS body's equalities hold for the counted rows: a and b are one customer
    ("SELECT COUNT(*) FROM orders a JOIN orders b ON a.amount = b.amount WHERE EXISTS "
     "(SELECT 1 FROM regions r WHERE r.r = a.o_cust AND r.r = b.o_cust)", "orders.o_cust", 0),
    # public tables join freely
    ("SELECT COUNT(*) FROM customer c JOIN regions r ON r.r = c.region", "customer.c_id", 0),
    ("SELECT COUNT(*) FROM customer c LEFT JOIN regions r ON r.r = c.region",
     "customer.c_id", 0),
])
def test_accepted_queries_and_where_their_unit_comes_from(sql, source, hops):
    unit = analyze_request(sql, tiny.metadata()).unit
    assert unit is not None
    assert unit.source.description == source
    assert len(unit.source.hops) == hops


@pytest.mark.parametrize("sql,fragment", [
    # a result row of two units
    ("SELECT COUNT(*) FROM orders a JOIN orders b ON a.amount = b.amount", "two units"),
    ("SELECT COUNT(*) FROM customer a JOIN customer b ON a.region = b.region", "two units"),
    ("SELECT COUNT(*) FROM items i JOIN orders o ON o.o_id = i.qty", "two units"),
    # a subquery whose rows are not the outer row's unit
    ("SELECT COUNT(*) FROM orders o WHERE EXISTS (SELECT 1 FROM items i "
     "WHERE i.qty = o.amount)", "two units"),
    ("SELECT COUNT(*) FROM orders WHERE amount IN (SELECT qty FROM items)", "two units"),
    # a NOT EXISTS body's equalities do not hold for the rows counted (it counts the rows
    # where they fail): they do not make a and b one unit
    ("SELECT COUNT(*) FROM orders a JOIN orders b ON a.amount = b.amount WHERE NOT EXISTS "
     "(SELECT 1 FROM regions r WHERE r.r = a.o_cust AND r.r = b.o_cust)", "orders (b)"),
    ("SELECT COUNT(*) FROM orders a JOIN orders b ON a.amount = b.amount WHERE NOT EXISTS "
     "(SELECT 1 FROM items i WHERE i.i_order = a.o_id AND a.o_cust = b.o_cust)", "orders (b)"),
    # rows of public tables, decided by private ones
    ("SELECT COUNT(*) FROM regions r WHERE EXISTS (SELECT 1 FROM customer c "
     "WHERE c.region = r.r)", "public tables only"),
    ("SELECT COUNT(*) FROM regions r LEFT JOIN customer c ON c.region = r.r",
     "null-extends the private table customer"),
    ("SELECT COUNT(*) FROM orders o FULL JOIN regions r ON r.r = o.amount",
     "null-extends the private table orders"),
    ("SELECT COUNT(*) FROM orders o RIGHT JOIN regions r ON r.r = o.amount",
     "null-extends the private table orders"),
    # not yet: private tables inside CTEs / derived tables / aggregates in subqueries
    ("WITH x AS (SELECT * FROM orders) SELECT COUNT(*) FROM x", "CTE or derived table"),
    ("SELECT COUNT(*) FROM (SELECT * FROM orders) t", "CTE or derived table"),
    ("SELECT COUNT(DISTINCT o_cust) FROM orders", "COUNT(DISTINCT"),
    # set operations over private tables (their refusal used to crash with AttributeError)
    ("SELECT COUNT(*) FROM (SELECT o_id FROM orders UNION ALL SELECT o_id FROM orders) d",
     "a UNION reads a private table"),
    ("SELECT COUNT(*) FROM orders o WHERE o.o_id IN (SELECT i_order FROM items "
     "UNION ALL SELECT o_id FROM orders)", "a UNION reads a private table"),
    ("SELECT c FROM (SELECT COUNT(*) AS c FROM orders) t", "not grouped by one column"),
])
def test_refusals_name_the_construct(sql, fragment):
    with pytest.raises(UnsupportedConstructError, match="unit") as err:
        analyze_request(sql, tiny.metadata())
    assert fragment in str(err.value)


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM orders a, orders b",  # a cross join
    "SELECT COUNT(*) FROM orders o WHERE EXISTS (SELECT 1 FROM items i "
    "WHERE i.i_order = o.o_id OR i.qty = 1)",  # no AND-ed correlation
])
def test_shapes_the_row_level_rules_refuse_stay_refused(sql):
    with pytest.raises(UnsupportedConstructError):
        analyze_request(sql, tiny.metadata())


def _retyped(table: str, column: str, type_: str):
    """tiny.metadata() with ``table.column`` declared as ``type_``."""
    md = tiny.metadata()
    t = md.tables[table]
    col = dataclasses.replace(t.columns[column], type=type_)
    tables = {**md.tables, table: dataclasses.replace(t, columns={**t.columns, column: col})}
    return dataclasses.replace(md, tables=tables)


def test_a_path_comparing_different_types_is_refused():
    md = _retyped("items", "i_order", "VARCHAR")
    with pytest.raises(UnsupportedConstructError, match="compares VARCHAR with INTEGER"):
        analyze_request("SELECT COUNT(*) FROM orders", md)


def test_a_direct_paths_type_must_compare_with_the_unit_ids():
    """The acceptance audit of #17: a direct path's column of another type than the unit's id
    (BIGINT ids stored as VARCHAR there) was never compared: a row's unit id is then not one
    the unit table stores ('01' is not 1). Refused from the metadata alone, and `dpsql
    metadata check` says so without a database."""
    md = _retyped("orders", "o_cust", "VARCHAR")
    with pytest.raises(UnsupportedConstructError, match=r"orders\.o_cust -> customer\.c_id "
                       r"\(the unit's id\) compares VARCHAR with INTEGER"):
        analyze_request("SELECT COUNT(*) FROM orders", md)
    assert path_type_mismatches(md) == [
        "the unit path orders.o_cust -> customer.c_id (the unit's id) compares VARCHAR with "
        "INTEGER: declare both columns with the same type (or integer types), so each row's "
        "unit id is one the unit table stores"]
    assert path_type_mismatches(tiny.metadata()) == []


def test_a_private_table_without_a_path_is_refused():
    md = tiny.metadata()
    tables = dict(md.tables)
    tables["items"] = dataclasses.replace(md.tables["items"], unit=None)
    md = dataclasses.replace(md, tables=tables)
    with pytest.raises(UnsupportedConstructError, match="items declares no path"):
        analyze_request("SELECT COUNT(*) FROM items", md)


def test_public_queries_are_the_row_level_analysis():
    analysis = analyze_request("SELECT COUNT(*) FROM regions", tiny.metadata())
    assert analysis.unit is None


def test_unit_path_helper_is_direct_or_via():
    assert UnitPath("o_cust").direct
    assert not UnitPath("i_order", "orders", "o_id").direct


def test_selection_aggregates_are_refused_and_top_k_is_the_units_histogram():
    from dpsql.analysis.selection_aggregates import analyze_selection

    with pytest.raises(UnsupportedConstructError, match="privacy unit, MIN"):
        analyze_selection("SELECT MAX(qty) FROM items", tiny.metadata())
    top = "SELECT kind, COUNT(*) AS n FROM items GROUP BY kind ORDER BY COUNT(*) DESC LIMIT 1"
    assert analyze_selection(top, tiny.metadata()) is None
    assert analyze_request(top, tiny.metadata()).unit is not None


# ------------------------------------ the refusals' words (dpsql.units.refusals), end to end

SELF_JOIN = "SELECT COUNT(*) AS n FROM orders a JOIN orders b ON a.amount = b.amount"


@pytest.fixture
def session(tmp_path):
    db = {"customer": [(1, 1), (2, 2)], "orders": [(1, 1, 3), (2, 2, 3)], "items": [],
          "regions": [(1,), (2,)]}
    md = tiny.metadata()
    backend = DuckDBBackend(tiny.write_file(tmp_path / "shop.duckdb", db), md)
    ledger = open_ledger(tmp_path / "ledger.sqlite", epsilon=10.0, delta=0.0)
    yield ledger_session(md, backend, ledger, sampler=ZeroNoise())
    backend.close()
    ledger.close()


def test_a_refusal_of_the_proof_reaches_the_analyst_whole_and_uncharged(session):
    with pytest.raises(UnsupportedConstructError) as err:
        session.run(SELF_JOIN, epsilon=1.0)
    assert str(err.value) == (
        "under the privacy unit, a row of orders (b) may belong to another unit than the rows "
        "counted (a result row would belong to two units): every private table the query reads "
        "must belong to the same unit as the rows it counts (join the tables along their unit "
        "paths, e.g. a.o_cust = b.o_cust)")
    assert charged(session) == []
