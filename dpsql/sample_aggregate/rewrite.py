"""The one-pass SQL of a sample-and-aggregate release: every block's answer, by GROUP BY.

From an accepted :class:`~.analysis.SampleAggregateQuery`, :func:`plan_sample_aggregate`
writes::

    SELECT __sa.__sa_block, TRY_CAST(<expr over __sa.__a0..> AS DOUBLE) AS __sa0, ...
    FROM (SELECT ((HASH(HASH(CAST($__dpsql_sa_key AS BIGINT), t.by)) % m) + m) % m
                   AS __sa_block,
                 <aggregate 0, its arguments made total> AS __a0, ...
          FROM t JOIN public ... WHERE ...            -- the analyst's FROM and WHERE, total
          GROUP BY <the block expression>) AS __sa

Contract (precondition: the analysis accepted the query). With the key bound:

* a row of the private table is in block ``HASH(HASH(key, by)) mod m`` (of every declared
  column without ``by``): a function of that row alone, the same for every row of the joined
  relation it produces (the private table is the top-level FROM and every join keeps or drops
  its rows without null-extending them), so block b's answer is the analyst's expression over
  exactly the joined rows of private block b;
* an empty block produces no row (the release counts it as the lower bound);
* nothing can raise on a row: the analyst's WHERE / ON / arguments go through
  :mod:`dpsql.rewrite.totality`, aggregates are on the positive list of
  :mod:`.analysis` (numeric ones over ``TRY_CAST(arg AS DOUBLE)``), the arithmetic over
  aggregates runs in the outer query wrapped by totality, and the answer is ``TRY_CAST(...
  AS DOUBLE)`` (a value that is not a number becomes NULL);
* with noise off, each block's answer equals the analyst's query over that block (up to the
  double conversion of numeric aggregates' arguments).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from dpsql.analysis.parse import DIALECT
from dpsql.analysis.trees import copy_tree
from dpsql.metadata import Metadata
from dpsql.rewrite.ordered import ordered
from dpsql.rewrite.parameters import bind_params, number_parameters, used_params
from dpsql.rewrite.safe_compare import ColumnKind, column_kinds
from dpsql.rewrite.totality import make_total, total_query
from dpsql.sample_aggregate.analysis import (
    AGGREGATES,
    NUMERIC_AGGREGATES,
    SampleAggregateQuery,
)

#: the named parameter the per-release secret key binds to
KEY_PARAM = "__dpsql_sa_key"
#: the block id column of the exact query's result (first), then ``__sa<j>`` per output
BLOCK = "__sa_block"
_INNER = "__sa"
_DOUBLE = exp.DataType.build("DOUBLE")
_BIGINT = exp.DataType.build("BIGINT")


@dataclass(frozen=True)
class SamplePlan:
    """The exact query and what reading its result needs."""

    exact_sql: str
    exact_params: tuple[int, ...]  # positions of the analyst's parameters it uses
    n_params: int
    blocks: int
    names: tuple[str, ...]
    bounds: tuple[tuple[float, float], ...]

    def bindings(self, params: Sequence[Any], key: int) -> dict[str, Any]:
        """Every named parameter of ``exact_sql``: the analyst's, and the block key."""
        bound = bind_params(self.exact_params, params)
        bound[KEY_PARAM] = key
        return bound


def plan_sample_aggregate(q: SampleAggregateQuery, metadata: Metadata) -> SamplePlan:
    """The exact query of ``q`` (module contract)."""
    n_params = sum(1 for p in q.query.find_all(exp.Placeholder) if not p.this)
    query = number_parameters(copy_tree(q.query))
    assert isinstance(query, exp.Select)
    inner = exp.Select(expressions=[exp.Literal.number(1)])
    inner.set("from_", query.args["from_"])
    inner.set("joins", query.args.get("joins"))
    inner.set("where", query.args.get("where"))
    total_query(inner, metadata)  # ON, WHERE and their subqueries
    kind = column_kinds(inner, metadata, frozenset())
    block = block_expression(q, metadata)
    aggregates: list[exp.Expression] = []
    outputs: list[exp.Expression] = []
    for j, item in enumerate(query.expressions):
        wrapper = item.this if isinstance(item, exp.Alias) else item
        expression = copy_tree(wrapper.expressions[0])
        for agg in list(expression.find_all(*AGGREGATES)):
            column = exp.column(f"__a{len(aggregates)}", table=_INNER)
            aggregates.append(_total_aggregate(agg, kind))
            if agg is expression:
                expression = column
            else:
                agg.replace(column)
        answer = exp.TryCast(this=make_total(expression), to=_DOUBLE.copy())
        outputs.append(exp.alias_(answer, f"__sa{j}"))
    inner.set("expressions", [exp.alias_(block, BLOCK),
                              *(exp.alias_(a, f"__a{i}") for i, a in enumerate(aggregates))])
    inner.set("group", exp.Group(expressions=[block.copy()]))
    outer = exp.select(exp.alias_(exp.column(BLOCK, table=_INNER), BLOCK), *outputs).from_(
        inner.subquery(_INNER))
    sql = outer.sql(dialect=DIALECT)
    return SamplePlan(
        exact_sql=sql, exact_params=used_params(sql), n_params=n_params, blocks=q.blocks,
        names=tuple(o.name for o in q.outputs),
        bounds=tuple((o.lower, o.upper) for o in q.outputs))


def block_expression(q: SampleAggregateQuery, metadata: Metadata) -> exp.Expression:
    """``((HASH(HASH(key, cols)) % m) + m) % m``: in [0, m) for a signed hash too (Spark's)."""
    columns = ([q.setting.by] if q.setting.by is not None
               else list(metadata.table(q.table).columns))
    key = exp.Cast(this=exp.Placeholder(this=KEY_PARAM), to=_BIGINT.copy())
    combined = exp.Anonymous(this="HASH", expressions=[
        key, *(exp.column(c, table=q.alias, quoted=True) for c in columns)])
    # DuckDB combines the arguments' hashes almost linearly: the low bits of HASH(key, x) are
    # those of HASH(x) relabelled by the key, so for m a power of two every key would give
    # the same split. Hashing the combination again mixes the key into every bit.
    hashed = exp.Anonymous(this="HASH", expressions=[combined])
    m = exp.Literal.number(q.blocks)
    return exp.Mod(this=exp.paren(exp.Add(this=exp.paren(exp.Mod(this=hashed, expression=m)),
                                          expression=m.copy())),
                   expression=m.copy())


def _total_aggregate(agg: exp.Expression, kind: ColumnKind) -> exp.Expression:
    """``agg`` with its value arguments made total (numeric aggregates' cast to DOUBLE, and
    their terms in an order fixed by their values: :func:`dpsql.rewrite.ordered.ordered`); a
    quantile's literal fraction and COUNT(*)'s star stay as they are. Ordered, a block's answer
    is a function of that block's multiset of values alone, so a neighbour changes one block's
    answer, as the release's sensitivity assumes (docs/privacy.md, section 4)."""
    agg = copy_tree(agg)
    numeric = isinstance(agg, NUMERIC_AGGREGATES)
    for key, child in list(agg.args.items()):
        if key == "quantile" or (key == "expression" and not numeric):
            continue  # the fraction of QUANTILE_CONT / QUANTILE_DISC / QUANTILE: a literal
        if isinstance(child, exp.Expression):
            agg.set(key, _total_argument(child, kind, numeric))
    return ordered(agg) if numeric else agg


def _total_argument(node: exp.Expression, kind: ColumnKind, numeric: bool) -> exp.Expression:
    if isinstance(node, exp.Star):
        return node
    if isinstance(node, exp.Distinct):
        node.set("expressions", [_total_argument(e, kind, numeric) for e in node.expressions])
        return node
    node = make_total(node, kind)
    return exp.TryCast(this=node, to=_DOUBLE.copy()) if numeric else node
