"""dpsql.units.refusals: the example join in a refusal comes from the metadata's own declared
unit paths (never another schema's columns), and the outer-join refusal says what it refuses
and that an inner join is the fix, also when the query already joins along the path."""

from __future__ import annotations

import dataclasses

import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.errors import UnsupportedConstructError
from dpsql.metadata import load_metadata, loads_metadata
from dpsql.units.refusals import fix_text, path_joins
from tests.metadata.helpers import ROOT
from tests.units import tiny

SHOP = ROOT / "schemas" / "shop-units.yaml"


def _refusal(sql: str, md) -> str:
    with pytest.raises(UnsupportedConstructError) as err:
        analyze_request(sql, md)
    return str(err.value)


def test_path_joins_are_the_declared_paths_via_first():
    assert path_joins(tiny.metadata()) == (
        (("items", "orders"), "items.i_order = orders.o_id"),
        (("orders", "customer"), "orders.o_cust = customer.c_id"))


def test_without_a_unit_there_is_no_example():
    md = dataclasses.replace(tiny.metadata(), privacy_unit=None)
    assert path_joins(md) == ()
    assert fix_text(path_joins(md)).endswith("(join the tables along their unit paths)")


def test_the_example_prefers_a_join_touching_the_refused_table():
    joins = path_joins(tiny.metadata())
    assert fix_text(joins, "customer").endswith("e.g. orders.o_cust = customer.c_id)")
    assert fix_text(joins, "items").endswith("e.g. items.i_order = orders.o_id)")
    assert fix_text(joins).endswith("e.g. items.i_order = orders.o_id)")


def test_the_demo_shops_refusal_names_its_own_columns():
    # the audit's bug 5: this said "e.g. l_orderkey = o_orderkey" on the shop
    md = load_metadata(SHOP)
    text = _refusal("SELECT COUNT(*) FROM orders a JOIN orders b "
                    "ON a.product_id = b.product_id", md)
    assert text == (
        "under the privacy unit, a row of orders (b) may belong to another unit than the rows "
        "counted (a result row would belong to two units): every private table the query "
        "reads must belong to the same unit as the rows it counts (join the tables along "
        "their unit paths, e.g. a.customer_id = b.customer_id)")
    # the example is the query's own tables tied by their unit ids (QA round 6: it was a
    # path to a table the query does not read), and it is accepted
    analyze_request("SELECT COUNT(*) FROM orders a JOIN orders b ON a.product_id = "
                    "b.product_id AND a.customer_id = b.customer_id", md)


def test_the_unit_table_alone_is_named_by_its_id():
    md = loads_metadata("""
privacy_unit: {table: people, column: pid}
tables:
  people: {columns: {pid: {type: INTEGER}, town: {type: INTEGER}}}
""", "<people>")
    text = _refusal("SELECT COUNT(*) FROM people a JOIN people b ON a.town = b.town", md)
    assert text.endswith("(join the tables along their unit paths, e.g. a.pid = b.pid)")
    analyze_request("SELECT COUNT(*) FROM people a JOIN people b ON a.town = b.town "
                    "AND a.pid = b.pid", md)  # the fix it gives is accepted


@pytest.mark.parametrize("sql, table, example", [
    # already joined along the path: "join along the paths" would be wrong advice; the fix is
    # the query's own join made inner (QA round 6: a path example named tables it does not
    # read)
    ("SELECT COUNT(*) FROM items i LEFT JOIN orders o ON i.i_order = o.o_id", "orders",
     "JOIN orders AS o ON i.i_order = o.o_id"),
    ("SELECT COUNT(*) FROM regions r LEFT JOIN customer c ON c.region = r.r", "customer",
     "JOIN customer AS c ON c.region = r.r"),
])
def test_the_outer_join_refusal_says_what_it_refuses_and_the_fix(sql, table, example):
    text = _refusal(sql, tiny.metadata())
    assert text == (
        f"under the privacy unit, LEFT JOIN null-extends the private table {table}: dpsql "
        "proves the unit of each row only through inner joins, so an outer join may "
        "null-extend public tables only, even along a unit path; write it as an inner JOIN "
        f"(e.g. {example})")
    assert "join the tables along their unit paths" not in text


def test_the_outer_join_fix_is_accepted():
    analyze_request("SELECT COUNT(*) FROM items i JOIN orders o ON i.i_order = o.o_id",
                    tiny.metadata())


def test_the_outer_join_refusal_without_a_path_join_shows_the_querys_own_join():
    md = loads_metadata("""
privacy_unit: {table: people, column: pid}
tables:
  people: {columns: {pid: {type: INTEGER}, town: {type: INTEGER}}}
  towns: {public: true, columns: {t: {type: INTEGER}}}
""", "<people>")
    text = _refusal("SELECT COUNT(*) FROM towns t LEFT JOIN people p ON p.town = t.t", md)
    assert text.endswith("write it as an inner JOIN (e.g. JOIN people AS p ON p.town = t.t)")
