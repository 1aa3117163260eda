"""dpsql/analysis/blocks.py: which queries are several releases, and what each one is (from
the SQL and the public metadata alone; no database here)."""

from __future__ import annotations

import pytest

from dpsql.analysis.blocks import BlockQuery, analyze_request
from dpsql.analysis.elastic import QueryAnalysis
from dpsql.errors import (
    AggregateArithmeticError,
    UnsupportedConstructError,
    UnsupportedQueryError,
)
from dpsql.metadata import loads_metadata

MD = loads_metadata("""
tables:
  orders:
    columns:
      customer_id: {max_freq: 10, type: INTEGER}
      cost: {bounds: [0, 100], type: DOUBLE}
      status: {releasable: true, type: VARCHAR, domain: {values: [a, b]}}
  customers:
    columns:
      customer_id: {max_freq: 1, type: INTEGER}
  regions:
    public: true
    columns:
      region: {type: VARCHAR}
""")


def _blocks(sql: str) -> BlockQuery:
    request = analyze_request(sql, MD)
    assert isinstance(request, BlockQuery), request
    return request


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) AS n FROM orders",
    # an aggregate over a grouped subquery keeps its single-release meaning (count of groups)
    "SELECT COUNT(*) AS n FROM (SELECT status, COUNT(*) AS c FROM orders GROUP BY status) t",
    "WITH t AS (SELECT * FROM orders WHERE cost > 1) SELECT COUNT(*) AS n FROM t",
])
def test_one_release_is_analysed_as_before(sql):
    assert isinstance(analyze_request(sql, MD), QueryAnalysis)


def test_a_cte_block_becomes_a_table_of_noisy_rows():
    request = _blocks("WITH rows AS (SELECT * FROM orders WHERE cost > ?), "
                      "t AS (SELECT status, COUNT(*) AS n FROM rows GROUP BY status) "
                      "SELECT status, n * 2 AS twice FROM t WHERE n > ? ORDER BY twice")
    (block,) = request.blocks
    assert (block.name, block.table, block.scalar) == ("t", "__b0", False)
    assert [m.label for m in block.analysis.measurements] == ["COUNT(*)"]
    # the block is a query of its own, with the CTE of rows it reads
    assert block.analysis.query.sql().startswith("WITH rows AS (SELECT")
    assert request.n_params == 2 and request.final is None
    post = request.post.sql(dialect="duckdb")
    assert "__b0" in post and "orders" not in post and "rows" not in post
    assert "$__dpsql_param_1" in post  # the analyst's second parameter
    assert request.output_names == ("status", "twice")
    assert request.tables == frozenset({"orders"})


def test_a_scalar_subquery_in_a_private_query_is_released_first():
    request = _blocks("SELECT status, COUNT(*) AS n FROM orders WHERE cost > ? "
                      "GROUP BY status HAVING COUNT(*) > (SELECT COUNT(*) / 2 FROM customers)")
    (block,) = request.blocks
    assert block.scalar and block.name == "subquery1"
    assert request.post is None and request.final is not None
    # the subquery is the parameter after the analyst's one
    assert "$__dpsql_param_1" in request.final.query.sql(dialect="duckdb")
    assert [c.name for c in request.final.columns] == ["status", "n"]


def test_public_tables_and_aggregates_outside_the_blocks_are_post_processing():
    request = _blocks("WITH t AS (SELECT status, SUM(cost) AS s FROM orders GROUP BY status) "
                      "SELECT r.region, SUM(t.s) AS total FROM t, regions r GROUP BY r.region")
    assert request.public_tables == ("regions",) and len(request.blocks) == 1
    assert "regions" in request.post.sql(dialect="duckdb")
    # where a single-release rule covers the outer aggregate, it keeps that meaning
    counted = analyze_request(
        "SELECT COUNT(*) AS n FROM (SELECT status, COUNT(*) AS c FROM orders GROUP BY status) t",
        MD)
    assert isinstance(counted, QueryAnalysis)


def test_select_star_over_raw_rows_is_still_refused():
    with pytest.raises(UnsupportedQueryError, match="SELECT \\* releases raw rows"):
        analyze_request("SELECT * FROM orders", MD)
    with pytest.raises(UnsupportedQueryError, match="SELECT \\* releases raw rows"):
        analyze_request("WITH t AS (SELECT * FROM orders) SELECT * FROM t", MD)


@pytest.mark.parametrize(("sql", "error", "match"), [
    ("WITH t AS (SELECT COUNT(*) AS n FROM orders) SELECT t.n, o.cost FROM t "
     "JOIN orders o ON o.customer_id = t.n", UnsupportedQueryError, "orders AS o"),
    ("SELECT COUNT(*) AS n FROM orders o WHERE o.cost > "
     "(SELECT AVG(p.cost) FROM orders p WHERE p.customer_id = o.customer_id)",
     UnsupportedConstructError, "correlated"),
    ("SELECT COUNT(*) AS n FROM orders WHERE cost > "
     "(SELECT status, COUNT(*) FROM orders GROUP BY status)",
     UnsupportedConstructError, "one value"),
    # a block is analysed by today's rules: an aggregate of an aggregate is refused
    ("WITH t AS (SELECT SUM(COUNT(*)) AS s FROM orders) SELECT s FROM t",
     AggregateArithmeticError, "nested aggregate"),
])
def test_refusals_name_the_construct(sql, error, match):
    with pytest.raises(error, match=match):
        analyze_request(sql, MD)


def test_a_threshold_inside_a_block_is_released_before_it():
    request = _blocks("WITH rows AS (SELECT * FROM orders WHERE cost > (SELECT AVG(cost) "
                      "FROM orders)), t AS (SELECT status, COUNT(*) AS n FROM rows "
                      "WHERE cost < (SELECT AVG(cost) * 2 FROM orders) GROUP BY status) "
                      "SELECT * FROM t")
    assert [(b.name, b.param, b.scalar) for b in request.blocks] == [
        ("subquery1", 0, True), ("subquery2", 1, True), ("t", None, False)]
    assert request.n_scalars == 2 and request.n_params == 0
    text = request.blocks[2].analysis.query.sql(dialect="duckdb")
    assert "$__dpsql_param_0" in text and "$__dpsql_param_1" in text
