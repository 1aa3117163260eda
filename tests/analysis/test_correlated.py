"""dpsql/analysis/correlated.py: a correlated scalar subquery keyed by one equality is the
histogram GROUP BY its inner key (restricted by the outer public table's own conjuncts), read
by the final query as a lookup of the outer column; every other shape is refused with the
correlated-subquery message (SQL and public metadata only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpsql.analysis.blocks import BlockQuery, analyze_request
from dpsql.analysis.parse import DIALECT
from dpsql.errors import UnsupportedConstructError
from dpsql.metadata import load_metadata, loads_metadata
from dpsql.rewrite.parameters import PARAM_PREFIX

TPCH = load_metadata(Path(__file__).parents[2] / "schemas" / "tpch.yaml")

Q17 = """
select sum(l_extendedprice) / 7.0 as avg_yearly from lineitem, part
where p_partkey = l_partkey and p_brand = 'Brand#23' and p_container = 'MED BOX'
  and l_quantity < (select 0.2 * avg(l_quantity) from lineitem where l_partkey = p_partkey)
"""

MD = loads_metadata("""
tables:
  orders:
    columns:
      customer_id: {max_freq: 10, type: INTEGER}
      product_id: {max_freq: 50, type: INTEGER, releasable: true,
                   domain: {table: products, column: product_id}}
      status: {max_freq: 90, type: VARCHAR, releasable: true, domain: {values: [a, b]}}
      cost: {bounds: [0, 100], type: DOUBLE}
  products:
    public: true
    columns:
      product_id: {max_freq: 1, type: INTEGER}
      category: {type: VARCHAR}
      price: {type: DOUBLE}
""")


def _request(sql: str, md=MD) -> BlockQuery:
    request = analyze_request(sql, md)
    assert isinstance(request, BlockQuery) and request.final is not None
    return request


def test_q17_is_a_histogram_over_l_partkey_restricted_to_the_brand_and_container():
    request = _request(Q17, TPCH)
    (block,) = request.blocks
    assert (block.name, block.table, block.scalar, block.param) == ("subquery1", "__b0",
                                                                     False, 0)
    assert block.analysis.query.sql(dialect=DIALECT) == (
        "SELECT lineitem.l_partkey AS l_partkey, 0.2 * AVG(lineitem.l_quantity) AS value "
        "FROM lineitem AS lineitem WHERE lineitem.l_partkey IN (SELECT part.p_partkey "
        "FROM part AS part WHERE part.p_brand = 'Brand#23' AND part.p_container = 'MED BOX') "
        "GROUP BY lineitem.l_partkey")
    assert [k.name for k in block.analysis.group_keys] == ["l_partkey"]
    assert [m.function for m in block.analysis.measurements] == ["SUM", "COUNT"]
    # a GROUP BY key histogram: a changed lineitem row leaves one bin and enters one
    sum_, count = block.analysis.measurements
    assert count.sensitivity.at(0) == 2 and sum_.sensitivity.at(0) == 2 * 50
    assert block.lookup is not None
    assert block.lookup.column.sql(dialect=DIALECT) == "part.p_partkey"
    assert block.lookup.key_type == "BIGINT"
    assert request.final.query.sql(dialect=DIALECT).endswith(
        f"AND lineitem.l_quantity < ${PARAM_PREFIX}0")
    assert request.n_scalars == 1 and request.n_params == 0


def test_a_private_outer_column_is_not_restricted_and_parameters_keep_their_place():
    request = _request(
        "SELECT COUNT(*) AS n FROM orders o WHERE o.cost > ? AND o.cost > (SELECT AVG(i.cost) "
        "FROM orders i WHERE i.status = o.status AND i.cost < ?)")
    (block,) = request.blocks
    assert block.analysis.query.sql(dialect=DIALECT) == (
        f"SELECT i.status AS status, AVG(i.cost) AS value FROM orders AS i WHERE "
        f"i.cost < ${PARAM_PREFIX}1 GROUP BY i.status")
    assert block.param == 2 and request.n_params == 2
    assert block.lookup is not None and block.lookup.key_type == "VARCHAR"


def test_the_restriction_keeps_only_the_outer_tables_own_plain_conjuncts():
    request = _request(
        "SELECT COUNT(*) AS n FROM orders o, products p WHERE p.product_id = o.product_id "
        "AND p.category = 'x' AND p.price > ? AND o.cost > 3 AND p.price < o.cost "
        "AND o.cost > (SELECT SUM(i.cost) AS total FROM orders i "
        "WHERE i.product_id = p.product_id)")
    (block,) = request.blocks
    assert block.analysis.query.sql(dialect=DIALECT) == (
        "SELECT i.product_id AS product_id, SUM(i.cost) AS total FROM orders AS i WHERE "
        "i.product_id IN (SELECT p.product_id FROM products AS p WHERE p.category = 'x') "
        "GROUP BY i.product_id")


@pytest.mark.parametrize(("sql", "match"), [
    ("SELECT COUNT(*) AS n FROM orders o WHERE o.cost > (SELECT AVG(i.cost) FROM orders i "
     "WHERE i.customer_id = o.customer_id)", r"histogram GROUP BY i\.customer_id"),
    ("SELECT COUNT(*) AS n FROM orders o WHERE o.cost > (SELECT AVG(i.cost) FROM orders i "
     "WHERE i.status > o.status)", r"i\.status > o\.status is not an equality"),
    ("SELECT COUNT(*) AS n FROM orders o WHERE o.cost > (SELECT AVG(i.cost) FROM orders i "
     "WHERE i.status = o.status OR i.cost > 1)", "not an equality"),
    ("SELECT COUNT(*) AS n FROM orders o WHERE o.cost > (SELECT AVG(i.cost) FROM orders i "
     "WHERE i.status = o.status GROUP BY i.status)", "one value|without GROUP BY"),
    ("SELECT COUNT(*) AS n FROM orders o WHERE o.cost > (SELECT AVG(i.cost) FROM orders i "
     "WHERE i.status = o.status AND i.cost > (SELECT AVG(cost) FROM orders))",
     "subquery or window"),
    ("WITH c AS (SELECT * FROM orders) SELECT COUNT(*) AS n FROM orders o WHERE o.cost > "
     "(SELECT AVG(c.cost) FROM c WHERE c.status = o.status)", "one declared table"),
    ("SELECT COUNT(*) AS n FROM (SELECT * FROM orders) o WHERE o.cost > "
     "(SELECT AVG(i.cost) FROM orders i WHERE i.status = o.status)",
     "column of a declared table"),
    ("SELECT COUNT(*) AS n FROM orders o WHERE CASE WHEN o.cost > 1 THEN TRUE END AND "
     "EXISTS (SELECT 1 FROM orders i WHERE i.status = o.status AND i.cost > "
     "(SELECT AVG(j.cost) FROM orders j WHERE j.status = o.status))", "correlated"),
    ("SELECT COUNT(*) AS n FROM orders o WHERE o.product_id = (SELECT COUNT(*) FROM orders i "
     "WHERE CAST(i.product_id AS VARCHAR) = o.status)", "must compare a column"),
])
def test_other_shapes_keep_the_correlated_refusal(sql, match):
    with pytest.raises(UnsupportedConstructError, match=f"correlated(.|\\n)*({match})"):
        analyze_request(sql, MD)
