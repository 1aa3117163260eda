"""dpsql/analysis/scalar_blocks.py: what each relation of a query is, and one block made a
release of its own, its scalar subqueries released first (SQL and public metadata only)."""

from __future__ import annotations

import pytest
from sqlglot import exp

from dpsql.analysis.parse import parse_query
from dpsql.analysis.scalar_blocks import (
    BLOCK,
    POST,
    PRIVATE,
    PUBLIC,
    BlockBuilder,
    own_aggregate,
    scalar_position,
)
from dpsql.errors import UnsupportedConstructError
from dpsql.metadata import loads_metadata

MD = loads_metadata("""
tables:
  orders:
    columns:
      customer_id: {max_freq: 10, type: INTEGER}
      cost: {bounds: [0, 100], type: DOUBLE}
  regions:
    public: true
    columns:
      region: {type: VARCHAR}
""")


def _builder(sql: str) -> BlockBuilder:
    return BlockBuilder(parse_query(sql, MD, allow_top_star=True), MD)


def _selects(builder: BlockBuilder) -> list[exp.Select]:
    return list(builder.query.find_all(exp.Select))


@pytest.mark.parametrize(("sql", "kind"), [
    ("SELECT cost FROM orders", PRIVATE),
    ("SELECT COUNT(*) AS n FROM orders", BLOCK),
    ("SELECT region FROM regions", PUBLIC),
    ("SELECT COUNT(*) AS n FROM regions", BLOCK),  # public aggregates: released exactly
    ("WITH t AS (SELECT COUNT(*) AS n FROM orders) SELECT n + 1 AS m FROM t", POST),
    ("WITH t AS (SELECT cost FROM orders) SELECT cost FROM t", PRIVATE),
    ("SELECT 1 AS one", PUBLIC),
])
def test_the_kind_of_a_query_depends_on_its_sources_and_aggregates(sql, kind):
    builder = _builder(sql)
    assert builder.query_kind(builder.query) == kind


def test_own_aggregate_and_scalar_position():
    builder = _builder("SELECT COUNT(*) AS n FROM orders WHERE cost > "
                       "(SELECT AVG(cost) FROM orders) AND customer_id IN "
                       "(SELECT customer_id FROM orders)")
    outer, avg, keys = _selects(builder)
    assert own_aggregate(outer) and own_aggregate(avg) and not own_aggregate(keys)
    assert scalar_position(avg.parent) and not scalar_position(keys.parent)


def test_a_scalar_aggregate_subquery_becomes_a_parameter_released_first():
    builder = _builder("SELECT COUNT(*) AS n FROM orders WHERE cost > ? AND cost < "
                       "(SELECT AVG(cost) * 2 FROM orders)")
    assert builder.n_params == 1
    assert builder.release_scalars(builder.query)
    (block,) = builder.blocks
    assert (block.name, block.param, block.scalar, block.table) == ("subquery1", 1, True, "__b0")
    assert [m.function for m in block.analysis.measurements] == ["SUM", "COUNT"]
    assert "$__dpsql_param_1" in builder.query.sql(dialect="duckdb")
    assert not builder.release_scalars(builder.query)  # nothing left to release


@pytest.mark.parametrize(("sql", "match"), [
    ("SELECT COUNT(*) AS n FROM orders o WHERE o.cost > "
     "(SELECT AVG(p.cost) FROM orders p WHERE p.customer_id = o.customer_id)", "correlated"),
    ("SELECT COUNT(*) AS n FROM orders WHERE cost > "
     "(SELECT customer_id, COUNT(*) FROM orders GROUP BY customer_id)", "one value"),
])
def test_a_block_that_cannot_be_one_release_is_refused(sql, match):
    builder = _builder(sql)
    with pytest.raises(UnsupportedConstructError, match=match):
        builder.release_scalars(builder.query)
