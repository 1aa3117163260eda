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
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dpsql.analysis.checks import AGGREGATES, has_aggregate, sql_text
from dpsql.analysis.elastic import QueryAnalysis, analyze_query
from dpsql.analysis.model import OutputColumn
from dpsql.analysis.parse import DIALECT, parse_query, star_error
from dpsql.analysis.sources import cte_references
from dpsql.analysis.trees import copy_tree
from dpsql.errors import Error, UnsupportedConstructError, UnsupportedQueryError
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
    if sql.upper().count("SELECT") < 2:
        return False
    for agg in query.find_all(*AGGREGATES):
        node = agg.parent
        while node is not None and node is not query:
            if isinstance(node, exp.Select):
                return True
            node = node.parent
    return False


def _own_aggregate(select: exp.Select) -> bool:
    return (select.args.get("group") is not None
            or any(has_aggregate(e) for e in select.expressions)
            or (select.args.get("having") is not None and has_aggregate(select.args["having"])))


def _scalar_position(sub: exp.Expression) -> bool:
    """Whether a Subquery is used as a value (not a FROM source, IN list or EXISTS body)."""
    parent = sub.parent
    if isinstance(parent, (exp.From, exp.Join, exp.Exists, exp.CTE, exp.Union)):
        return False
    return not (isinstance(parent, exp.In) and parent.args.get("query") is sub)


class _Splitter:
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
        if _own_aggregate(select) and (PRIVATE in kinds or kinds == {PUBLIC}):
            return BLOCK  # an aggregate over declared tables (public ones: released exactly)
        if PRIVATE in kinds:
            return PRIVATE
        return POST if POST in kinds else PUBLIC

    # -- the split ------------------------------------------------------------------------

    def split(self) -> BlockQuery | QueryAnalysis | None:
        """The request (None: one release, to analyse as usual)."""
        query = self.query
        if not isinstance(query, exp.Select):
            return None
        kind = self.query_kind(query)
        if kind == POST and not _own_aggregate(query):
            return self._post_query(query)
        if kind == POST:
            # An aggregate over blocks: where a single-release rule covers it (COUNT(*) over a
            # grouped subquery counts its groups, 2 S), that meaning stays; where none does
            # (SUM of a block's value, a key computed in a block), the aggregate is
            # post-processing of the blocks' noisy rows. Both refusals depend on the SQL and
            # metadata alone; the first one is shown if neither applies.
            try:
                return analyze_query(self.original, self.metadata)
            except Error as first:
                try:
                    return self._post_query(query)
                except Error:
                    raise first from None
        if kind == BLOCK:
            return self._two_phase(query)
        if kind == PRIVATE and not _own_aggregate(query):
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
            scalar = isinstance(select.parent, exp.Subquery) and _scalar_position(select.parent)
            blocks.append(self._block(select, scalar))
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
        if not self._release_scalars(query):
            return None
        final = analyze_query(query, self.metadata)
        return BlockQuery(self.sql, self.tables, tuple(self.blocks), self.n_params,
                          self.n_scalars, final=final,
                          output_names=tuple(c.name for c in final.columns))

    def _release_scalars(self, node: exp.Expression) -> bool:
        """Make each scalar aggregate subquery below ``node`` a block released first, replaced
        by the parameter its noisy value binds; whether there was any."""
        found = self._scalar_subqueries(node)
        for select in found:
            block = self._block(select, True, as_param=True)
            assert select.parent is not None and block.param is not None
            select.parent.replace(exp.Placeholder(this=f"{PARAM_PREFIX}{block.param}"))
        return bool(found)

    def _scalar_subqueries(self, node: exp.Expression) -> list[exp.Select]:
        """Aggregate subqueries used as values, outermost first, outside any FROM source
        that is itself such a value (nested ones belong to their block's analysis)."""
        out: list[exp.Select] = []
        for child in node.iter_expressions():
            if (isinstance(child, exp.Subquery) and _scalar_position(child)
                    and isinstance(child.this, exp.Select)
                    and self.query_kind(child.this) == BLOCK):
                out.append(child.this)
                continue
            out.extend(self._scalar_subqueries(child))
        return out

    def _block(self, select: exp.Select, scalar: bool, *, as_param: bool = False) -> Block:
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
            self._release_scalars(cte.this)
        self._release_scalars(select)
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
    subquery, evaluated once per outer row) has no single release to stand for it."""
    defined = {t.alias_or_name for t in select.find_all(exp.Table)}
    defined |= {s.alias for s in select.find_all(exp.Subquery) if s.alias}
    defined |= {c.alias_or_name for c in select.find_all(exp.CTE)}
    for col in select.find_all(exp.Column):
        if col.table and col.table not in defined:
            raise UnsupportedConstructError(
                f"the aggregate subquery ({sql_text(select)[:40]}...) refers to {sql_text(col)} "
                "of the enclosing query "
                "(a correlated subquery), which dpsql cannot release once for every row: "
                "make it uncorrelated, or join and GROUP BY instead"
            )
