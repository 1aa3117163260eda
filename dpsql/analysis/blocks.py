"""Release blocks: aggregates computed in a CTE, a derived table or a scalar subquery.

A *release block* is an aggregate SELECT over declared tables (what dpsql analyses at the top
level: COUNT / SUM / AVG, optionally with GROUP BY over declared domains) that sits inside the
analyst's query. :func:`analyze_request` finds them from the SQL alone and returns one of:

* a :class:`~dpsql.analysis.model.QueryAnalysis`: no block (today's single release);
* a :class:`BlockQuery` with ``post`` set (*blocks, then post-processing*): the query outside
  the blocks (with no aggregate of its own, or one no single-release rule covers) reads only
  blocks (and CTEs / derived tables built from blocks), so everything
  there (selecting, renaming, arithmetic, filters, ORDER BY, LIMIT, joins of blocks) is
  post-processing of noisy values (public tables may be joined there too: public rows). Each
  block becomes the table ``__b<i>`` of its noisy rows, and ``post`` is the analyst's query
  with each block's SELECT replaced by ``SELECT * FROM __b<i>``, run over those tables (and
  copies of the public tables it reads) only;
* a :class:`BlockQuery` with ``final`` set (*two phases*): the top-level query aggregates over
  private rows and compares them with uncorrelated scalar aggregate subqueries. Each such
  subquery is a scalar block released first; ``final`` is the analysis of the query with each
  subquery replaced by the parameter ``n_params + i`` (public: its value is the noisy release),
  so that analysis and its refusals happen before anything is charged.

A scalar aggregate subquery inside a block (or inside a CTE a block reads) is released before
that block in the same way, and the block reads it as a parameter: the blocks are in release
order, each scalar one with ``param`` set (``n_scalars`` of them, parameters ``n_params..``).

Contract: the split and every refusal here depend on the SQL and the public metadata alone.
Each block is analysed by :func:`~dpsql.analysis.elastic.analyze_query` as a query of its own
(with the CTEs it reads), so its measurements carry that analysis's ES(k) guarantee. ``post``
reads no private table at all (checked here: a query whose outside reads a private table
directly would release raw rows, and is refused); its parameters are the analyst's. A
correlated aggregate subquery (one that reads a column of the enclosing query) is refused.

This module is the split; what each relation is and how one block is made (scalar subqueries
released first) are :mod:`dpsql.analysis.scalar_blocks`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dpsql.analysis.checks import has_inner_aggregate, sql_text
from dpsql.analysis.elastic import QueryAnalysis, analyze_query
from dpsql.analysis.model import OutputColumn
from dpsql.analysis.parse import parse_query, star_error
from dpsql.analysis.scalar_blocks import (
    BLOCK,
    BLOCK_TABLE,
    POST,
    PRIVATE,
    Block,
    BlockBuilder,
    own_aggregate,
    scalar_position,
)
from dpsql.errors import Error, UnsupportedQueryError
from dpsql.metadata import Metadata

__all__ = ["Block", "BlockQuery", "Outputs", "analyze_request"]


@dataclass(frozen=True)
class Outputs:
    """The output columns of a block query (what a client's Describe needs)."""

    columns: tuple[OutputColumn, ...]


@dataclass(frozen=True)
class BlockQuery:
    """A query of several releases (module docstring): exactly one of ``post`` and ``final``."""

    qualified_sql: str  # the whole qualified query, its ``?`` numbered (the answer-cache key)
    tables: frozenset[str]  # the declared tables it reads (where a server checks grants)
    blocks: tuple[Block, ...]
    n_params: int  # the analyst's ``?`` markers
    n_scalars: int  # scalar blocks bound as parameters n_params.. of later releases
    post: exp.Query | None = None
    final: QueryAnalysis | None = None
    output_names: tuple[str, ...] = ()
    #: public tables ``post`` reads (copied into the post-processing DuckDB before the charge)
    public_tables: tuple[str, ...] = ()

    @property
    def analysis(self) -> QueryAnalysis | Outputs:
        """The final release's analysis, or the post-processing query's output names."""
        if self.final is not None:
            return self.final
        return Outputs(tuple(OutputColumn(n, "expression", None) for n in self.output_names))

    @property
    def analyses(self) -> tuple[QueryAnalysis, ...]:
        """Every release, in the order they run (blocks first, then ``final``)."""
        out = tuple(b.analysis for b in self.blocks)
        return out + ((self.final,) if self.final is not None else ())


def analyze_request(sql: str, metadata: Metadata) -> QueryAnalysis | BlockQuery:
    """Analyse ``sql``: one release (as :func:`~dpsql.analysis.elastic.analyze`) or a query
    of several (module contract). Raises the analysis's refusals, before anything runs."""
    query = parse_query(sql, metadata, allow_top_star=True)
    top_star = bool(query.meta.get("dpsql_top_star")) if query._meta else False
    if metadata.privacy_unit is not None:  # one release, bounded per unit (dpsql.units)
        from dpsql.units.analysis import analyze_unit_request
        return analyze_unit_request(sql, query, metadata, top_star)
    if not _may_have_blocks(sql, query):
        if top_star:
            raise star_error()
        return analyze_query(query, metadata)
    result = _Splitter(query, metadata).split()
    if not isinstance(result, BlockQuery) and top_star:
        raise star_error()
    if result is None:
        return analyze_query(query, metadata)
    return result


def _may_have_blocks(sql: str, query: exp.Query) -> bool:
    """Cheap test: a block needs an aggregate below a nested SELECT (a query with one SELECT
    keyword pays no walk; one with subqueries one walk over its aggregates, ~0.1 ms)."""
    return sql.upper().count("SELECT") >= 2 and has_inner_aggregate(query)


class _Splitter(BlockBuilder):
    """The split of one query (module docstring); blocks are made by BlockBuilder."""

    # -- the split ------------------------------------------------------------------------

    def split(self) -> BlockQuery | QueryAnalysis | None:
        """The request (None: one release, to analyse as usual)."""
        query = self.query
        if not isinstance(query, exp.Select):
            return None
        kind = self.query_kind(query)
        if kind == POST and not own_aggregate(query):
            return self._post_query(query)
        if kind == POST:
            # An aggregate over blocks: where a single-release rule covers it (COUNT(*) over a
            # grouped subquery counts its groups, 2 S), that meaning stays; where none does
            # (SUM of a block's value, a key computed in a block), the aggregate is
            # post-processing of the blocks' noisy rows. Both refusals depend on the SQL and
            # metadata alone; the first one is shown if neither applies. A single release
            # whose keys need partition selection (a block's per-key COUNT as a key) yields to
            # the blocks when they can answer: their keys' declared domains need no delta and
            # keep empty bins (issue #16: declared domains have priority).
            try:
                single = analyze_query(self.original, self.metadata)
            except Error as first:
                try:
                    return self._post_query(query)
                except Error:
                    raise first from None
            if any(k.partition for k in single.group_keys):
                try:
                    return self._post_query(query)
                except Error:
                    pass
            return single
        if kind == BLOCK:
            return self._two_phase(query)
        if kind == PRIVATE and not own_aggregate(query):
            self._reject_raw_outside_blocks(query)
        return None

    def _reject_raw_outside_blocks(self, query: exp.Select) -> None:
        """An outer query joining a block with private rows: say so, rather than the
        single-release analysis's message about the block's columns."""
        from_ = query.args.get("from_")
        items = [from_.this] + [j.this for j in query.args.get("joins") or []] if from_ else []
        kinds = [self.source_kind(i) for i in items]
        if BLOCK in kinds or POST in kinds:
            private = [i for i, k in zip(items, kinds, strict=True) if k == PRIVATE]
            raise UnsupportedQueryError(
                f"the query outside its aggregate CTEs / subqueries reads {sql_text(private[0])} "
                "(private rows) directly, which would release raw rows: read private tables "
                "only inside an aggregate (COUNT / SUM / AVG) and join the aggregates"
            )

    def _post_query(self, query: exp.Select) -> BlockQuery:
        found: list[exp.Select] = []
        self._collect(query, found)
        blocks = []
        for select in found:
            scalar = isinstance(select.parent, exp.Subquery) and scalar_position(select.parent)
            blocks.append(self.make_block(select, scalar))
        self._drop_private_ctes(query)  # (kinds read from the bodies before the replacement)
        for block, select in zip(blocks, found, strict=True):
            select.replace(exp.select("*").from_(block.table))
        public = self._check_post(query)
        names = tuple(item.alias_or_name for item in query.expressions)
        return BlockQuery(self.sql, self.tables, tuple(self.blocks), self.n_params,
                          self.n_scalars, post=query, output_names=names, public_tables=public)

    def _collect(self, node: exp.Expression, found: list[exp.Select]) -> None:
        """The outermost blocks below ``node`` (a block's inside is its own analysis's)."""
        for child in node.iter_expressions():
            if isinstance(child, exp.CTE) and self.query_kind(child.this) == PRIVATE:
                continue  # read by blocks only (else the query would not be POST); dropped
            if isinstance(child, exp.Select) and self.query_kind(child) == BLOCK:
                found.append(child)
                continue
            self._collect(child, found)

    def _two_phase(self, query: exp.Select) -> BlockQuery | None:
        if not self.release_scalars(query, correlated=True):
            return None
        final = analyze_query(query, self.metadata)
        return BlockQuery(self.sql, self.tables, tuple(self.blocks), self.n_params,
                          self.n_scalars, final=final,
                          output_names=tuple(c.name for c in final.columns))

    def _drop_private_ctes(self, query: exp.Expression) -> None:
        for with_ in list(query.find_all(exp.With)):
            keep = [c for c in with_.expressions if self.query_kind(c.this) != PRIVATE]
            if not keep:
                with_.pop()
            elif len(keep) != len(with_.expressions):
                with_.set("expressions", keep)

    def _check_post(self, query: exp.Expression) -> tuple[str, ...]:
        """The post-processing query reads block tables, its own CTEs and public tables only;
        returns the public tables."""
        ctes = {c.alias_or_name.lower() for c in query.find_all(exp.CTE)}
        public: dict[str, None] = {}
        for table in query.find_all(exp.Table):
            name = table.name.lower()
            if name.startswith(BLOCK_TABLE) or (name in ctes and not table.db):
                continue
            meta = self.metadata.tables.get(name)
            if meta is not None and meta.public and not table.db:
                public[name] = None
                continue
            raise UnsupportedQueryError(
                f"the query outside its aggregate CTEs / subqueries reads the private table "
                f"{name} directly, which would release raw rows: read it only inside an "
                "aggregate (COUNT / SUM / AVG)"
            )
        return tuple(public)
