"""Release blocks one at a time: what each relation of a query is, and one aggregate SELECT
made a release of its own (docs/privacy.md, "Release blocks"; the split of a whole query into
blocks and post-processing is dpsql.analysis.blocks).

:class:`BlockBuilder` holds one query's split state: the query with its ``?`` numbered, its CTE
references and the blocks made so far, in release order. It classifies each relation the query
reads (:data:`PRIVATE` raw rows, :data:`BLOCK` an aggregate over declared tables, :data:`POST`
noisy or public values only, :data:`PUBLIC` public tables only) and turns a block's SELECT into
a :class:`Block` analysed as a query of its own, with the CTEs it reads. An uncorrelated scalar
aggregate subquery used as a value (a threshold: *two phases*) becomes a block released first,
replaced by the parameter its noisy value binds (:meth:`BlockBuilder.release_scalars`).

Contract: every kind and every refusal here depends on the SQL and the public metadata alone.
Each block is analysed by :func:`~dpsql.analysis.elastic.analyze_query` as a query of its own,
so its measurements carry that analysis's ES(k) guarantee. A correlated aggregate subquery (one
that reads a column of the enclosing query) is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dpsql.analysis.checks import has_aggregate, sql_text
from dpsql.analysis.correlated import Lookup, correlation_error, lookup_block, outer_references
from dpsql.analysis.elastic import QueryAnalysis, analyze_query
from dpsql.analysis.parse import DIALECT
from dpsql.analysis.sources import cte_references
from dpsql.analysis.trees import copy_tree
from dpsql.errors import UnsupportedConstructError
from dpsql.metadata import Metadata
from dpsql.rewrite.parameters import PARAM_PREFIX, number_parameters

#: relation kinds: raw private rows; a release block (aggregate over declared tables); noisy
#: or public values only (post-processing); public tables only
PRIVATE, BLOCK, POST, PUBLIC = "private", "block", "post", "public"

BLOCK_TABLE = "__b"


@dataclass(frozen=True)
class Block:
    """One release block: its analysis (as a query of its own) and where its noisy rows go."""

    name: str  # the record's label: the CTE's name, the derived table's alias, "subquery<i>"
    table: str  # the post-processing table holding its noisy rows (``__b<i>``)
    analysis: QueryAnalysis
    scalar: bool  # a scalar subquery: one column, one row (no GROUP BY)
    #: a scalar used as a constant by a later release: the parameter its noisy value binds
    param: int | None = None
    #: a correlated subquery released as a histogram (dpsql.analysis.correlated): the final
    #: query reads its noisy rows as a public lookup in place of the parameter ``param``
    lookup: Lookup | None = None


def own_aggregate(select: exp.Select) -> bool:
    """Whether ``select`` aggregates itself (GROUP BY, or an aggregate in its list or HAVING)."""
    return (select.args.get("group") is not None
            or any(has_aggregate(e) for e in select.expressions)
            or (select.args.get("having") is not None and has_aggregate(select.args["having"])))


def scalar_position(sub: exp.Expression) -> bool:
    """Whether a Subquery is used as a value (not a FROM source, IN list or EXISTS body)."""
    parent = sub.parent
    if isinstance(parent, (exp.From, exp.Join, exp.Exists, exp.CTE, exp.Union)):
        return False
    return not (isinstance(parent, exp.In) and parent.args.get("query") is sub)


class BlockBuilder:
    """One query's blocks, made one at a time (module docstring)."""

    def __init__(self, query: exp.Query, metadata: Metadata) -> None:
        self.metadata = metadata
        self.original = query  # never mutated here
        numbered = number_parameters(query)
        self.query = numbered if numbered is not query else copy_tree(query)
        self.n_params = sum(1 for p in self.query.find_all(exp.Placeholder))
        self.refs = cte_references(self.query)
        self.kinds: dict[int, str] = {}
        self.blocks: list[Block] = []  # in release order
        self.n_scalars = 0
        self.sql = self.query.sql(dialect=DIALECT)
        self.tables = frozenset(t.name for t in self.query.find_all(exp.Table)
                                if id(t) not in self.refs)

    # -- kinds ----------------------------------------------------------------------------

    def source_kind(self, node: exp.Expression) -> str:
        if isinstance(node, exp.Table):
            cte = self.refs.get(id(node))
            if cte is not None:
                return self.query_kind(cte.this)
            table = self.metadata.tables.get(node.name.lower())
            return PUBLIC if table is not None and table.public else PRIVATE
        if isinstance(node, exp.Subquery):
            return self.query_kind(node.this)
        return PRIVATE  # anything else (VALUES, functions): never post-processing

    def query_kind(self, node: exp.Expression) -> str:
        """PRIVATE / BLOCK / POST / PUBLIC of a query used as a relation (memoised)."""
        while isinstance(node, exp.Subquery):
            node = node.this
        known = self.kinds.get(id(node))
        if known is not None:
            return known
        if isinstance(node, exp.Select):
            kind = self._select_kind(node)
        elif isinstance(node, exp.SetOperation):
            kinds = {POST if k == BLOCK else k
                     for k in (self.query_kind(node.left), self.query_kind(node.right))}
            kind = PRIVATE if PRIVATE in kinds else POST if POST in kinds else PUBLIC
        else:
            kind = PRIVATE
        self.kinds[id(node)] = kind
        return kind

    def _select_kind(self, select: exp.Select) -> str:
        from_ = select.args.get("from_")
        if from_ is None:
            return PUBLIC
        items = [from_.this] + [j.this for j in select.args.get("joins") or []]
        # a block source is read as its noisy rows
        kinds = {POST if k == BLOCK else k for k in map(self.source_kind, items)}
        if own_aggregate(select) and (PRIVATE in kinds or kinds == {PUBLIC}):
            return BLOCK  # an aggregate over declared tables (public ones: released exactly)
        if PRIVATE in kinds:
            return PRIVATE
        return POST if POST in kinds else PUBLIC

    # -- blocks ---------------------------------------------------------------------------

    def release_scalars(self, node: exp.Expression, *, correlated: bool = False) -> bool:
        """Make each scalar aggregate subquery below ``node`` a block released first, replaced
        by the parameter its noisy value binds; whether there was any. With ``correlated``
        (``node`` the final query of two phases), one correlated by an equality in its WHERE
        is a histogram block read as a lookup (dpsql.analysis.correlated)."""
        found = self._scalar_subqueries(node)
        for select in found:
            if correlated and isinstance(node, exp.Select) and outer_references(select):
                block = self._lookup_block(select, node)
            else:
                block = self.make_block(select, True, as_param=True)
            assert select.parent is not None and block.param is not None
            select.parent.replace(exp.Placeholder(this=f"{PARAM_PREFIX}{block.param}"))
        return bool(found)

    def _scalar_subqueries(self, node: exp.Expression) -> list[exp.Select]:
        """Aggregate subqueries used as values, outermost first, outside any FROM source
        that is itself such a value (nested ones belong to their block's analysis)."""
        out: list[exp.Select] = []
        for child in node.iter_expressions():
            if (isinstance(child, exp.Subquery) and scalar_position(child)
                    and isinstance(child.this, exp.Select)
                    and self.query_kind(child.this) == BLOCK):
                out.append(child.this)
                continue
            out.extend(self._scalar_subqueries(child))
        return out

    def make_block(self, select: exp.Select, scalar: bool, *, as_param: bool = False) -> Block:
        """``select`` as a release block (appended to ``self.blocks`` after the scalar blocks
        it uses as constants, which are released before it)."""
        _reject_correlated(select)
        if scalar and (select.args.get("group") is not None or len(select.expressions) != 1):
            raise UnsupportedConstructError(
                f"the scalar subquery {sql_text(select)[:60]} must return one value: one "
                "aggregate and no GROUP BY (join a grouped CTE instead)"
            )
        # thresholds inside the block (or the CTEs it reads): released before it
        for cte in self._needed_ctes(select):
            self.release_scalars(cte.this)
        self.release_scalars(select)
        name = _block_name(select, len(self.blocks))
        standalone = self._standalone(select)
        param = None
        if as_param:
            param = self.n_params + self.n_scalars
            self.n_scalars += 1
        block = Block(name, f"{BLOCK_TABLE}{len(self.blocks)}",
                      analyze_query(standalone, self.metadata), scalar, param)
        self.blocks.append(block)
        return block

    def _lookup_block(self, select: exp.Select, enclosing: exp.Select) -> Block:
        """A correlated subquery of ``enclosing``'s WHERE as a histogram block."""
        ctes = frozenset(c.alias_or_name.lower() for c in self.query.find_all(exp.CTE))
        analysis, lookup = lookup_block(select, enclosing, self.metadata, ctes)
        param = self.n_params + self.n_scalars
        self.n_scalars += 1
        block = Block(_block_name(select, len(self.blocks)), f"{BLOCK_TABLE}{len(self.blocks)}",
                      analysis, False, param, lookup)
        self.blocks.append(block)
        return block

    def _needed_ctes(self, select: exp.Select) -> list[exp.CTE]:
        """The CTEs outside ``select`` it reads (transitively), in the analyst's order."""
        needed: dict[int, exp.CTE] = {}
        pending: list[exp.Expression] = [select]
        while pending:
            node = pending.pop()
            for table in node.find_all(exp.Table):
                cte = self.refs.get(id(table))
                if cte is not None and id(cte) not in needed and not _inside(cte, select):
                    needed[id(cte)] = cte
                    pending.append(cte.this)
        order = {id(c): i for i, c in enumerate(self.query.find_all(exp.CTE))}
        return sorted(needed.values(), key=lambda c: order[id(c)])

    def _standalone(self, select: exp.Select) -> exp.Select:
        """A copy of ``select`` as a query of its own: with the CTEs it reads (transitively),
        in their order in the analyst's query."""
        needed = self._needed_ctes(select)
        copy = copy_tree(select)
        if needed:
            ctes = [copy_tree(c) for c in needed]
            own = copy.args.get("with_")
            if own is not None:
                ctes += list(own.expressions)
            copy.set("with_", exp.With(expressions=ctes))
        return copy


def _inside(node: exp.Expression, ancestor: exp.Expression) -> bool:
    parent = node.parent
    while parent is not None:
        if parent is ancestor:
            return True
        parent = parent.parent
    return False


def _block_name(select: exp.Select, index: int) -> str:
    parent = select.parent
    if isinstance(parent, (exp.CTE, exp.Subquery)) and parent.alias:
        return parent.alias
    return f"subquery{index + 1}"


def _reject_correlated(select: exp.Select) -> None:
    """A block reads only its own sources: a column of the enclosing query (a correlated
    subquery, evaluated once per outer row) has no single release to stand for it (but see
    dpsql.analysis.correlated for the one shape that has)."""
    refs = outer_references(select)
    if refs:
        raise correlation_error(select, refs[0])
