"""CTE resolution (dpsql.analysis.relations): which relation a table reference reads.

References are resolved by sqlglot's scope module (cte_references); each CTE is analysed once,
so a CTE read twice is one relation with one set of ancestors (a self-join).
"""

from __future__ import annotations

import dataclasses

import pytest
from sqlglot import exp

from dpsql.analysis.elastic import analyze
from dpsql.analysis.keytypes import is_marked_comparable
from dpsql.analysis.parse import parse_query
from dpsql.analysis.sources import base_table, cte_references
from dpsql.errors import ProgrammingError
from tests.analysis.test_elastic import MD, es


def test_cte_references_name_the_defining_cte():
    query = parse_query(
        "WITH c AS (SELECT customer_id FROM customers) SELECT COUNT(*) FROM orders o "
        "JOIN c ON c.customer_id = o.customer_id", MD)
    refs = cte_references(query)
    tables = {t.name: t for t in query.find_all(exp.Table)}
    assert set(refs) == {id(tables["c"])}
    assert refs[id(tables["c"])].alias == "c"


def test_cte_used_twice_is_a_self_join():
    sql = ("WITH c AS (SELECT customer_id FROM orders) SELECT COUNT(*) FROM c "
           "JOIN c AS c2 ON c.customer_id = c2.customer_id")
    # shared ancestor orders: 2 (100+k) + 1
    assert es(sql) == [201.0, 203.0, 205.0, 211.0]


def test_the_innermost_with_wins():
    # The derived table's own c (over private orders) shadows the outer c (public products)
    # inside it; outside, c is the outer one.
    sql = ("WITH c AS (SELECT product_id AS pid FROM products) SELECT COUNT(*) FROM "
           "(WITH c AS (SELECT product_id AS pid FROM orders) SELECT pid FROM c) AS d "
           "JOIN c ON c.pid = d.pid")
    # max(mf(d.pid) * S(c) = 0, mf(c.pid) = 1 * S(d) = 1)
    assert es(sql) == [1.0, 1.0, 1.0, 1.0]
    inner_only = ("WITH c AS (SELECT product_id AS pid FROM products) SELECT COUNT(*) FROM "
                  "(WITH c AS (SELECT product_id AS pid FROM orders) SELECT pid FROM c) AS d")
    assert es(inner_only) == [1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("sql", [
    # a CTE inside a derived table is not visible outside it
    "SELECT COUNT(*) FROM (WITH c AS (SELECT customer_id FROM customers) SELECT customer_id "
    "FROM c) AS d JOIN c ON c.customer_id = d.customer_id",
])
def test_invisible_ctes_are_tables(sql):
    with pytest.raises(ProgrammingError, match="not declared"):
        analyze(sql, MD)


def test_key_equalities_in_a_nested_with_body_stay_unmarked():
    # Kept from the analysis on a copy: only key equalities outside the body of a nested
    # query with a WITH are marked comparable (the rewrite treats the others as fallible).
    sql = ("WITH c AS (SELECT o.customer_id FROM orders o JOIN customers cu "
           "ON o.customer_id = cu.customer_id) SELECT COUNT(*) FROM "
           "(WITH d AS (SELECT customer_id FROM customers) SELECT c.customer_id FROM c "
           "JOIN d ON c.customer_id = d.customer_id) AS x")
    query = analyze(sql, MD).query
    marked = [n.sql() for n in query.walk() if is_marked_comparable(n)]
    assert marked == ["o.customer_id = cu.customer_id"]


def test_base_table_relations_are_kept_per_metadata_object():
    rel = base_table(MD, "orders")
    assert base_table(MD, "orders") is rel  # built once per Metadata object
    # another Metadata (an owner's edit: orders made public) never reads the first one's
    edited = dataclasses.replace(MD, tables={
        **MD.tables, "orders": dataclasses.replace(MD.tables["orders"], public=True)})
    other = base_table(edited, "orders")
    assert other is not rel
    assert other.stability.at(0) == 0 and rel.stability.at(0) == 1
    assert other.ancestors == frozenset() and rel.ancestors == frozenset({"orders"})


def test_aliased_base_relations_are_kept_only_under_the_table_name():
    rel = base_table(MD, "orders", "orders")
    assert base_table(MD, "orders", "orders") is rel
    assert set(rel.columns) == {("orders", c) for (_, c) in base_table(MD, "orders").columns}
    # the analyst's own aliases are answered but not kept (the memo stays metadata-sized)
    other = base_table(MD, "orders", "o")
    assert base_table(MD, "orders", "o") is not other
    assert set(other.columns) == {("o", c) for (_, c) in base_table(MD, "orders").columns}
