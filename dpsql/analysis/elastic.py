"""Elastic stability and mf_k over a query's relational shape; ES(k) per released aggregate.

This implements DESIGN.md section 3 (FLEX, Johnson-Near-Song 2018, with FLEX's bugs fixed).
Terminology: a *relation*'s stability S(k) bounds how many of its rows one changed base row
(at distance k from the real database) can remove, and how many it can add; mf_k(a) bounds how
many of its rows share one value of column a. ``None`` stands for an unknown (infinite) mf and
never enters arithmetic.

Contract of :func:`analyze`: for every measurement it returns ES(k) with
ES(k) >= max over databases y at distance <= k of the local sensitivity of that aggregate at y
(for SUM, of the sum clamped to the declared bounds), provided the metadata's max frequencies
and column types are true for the real database. Every join / IN / EXISTS key equality must
compare its stored values exactly (dpsql.analysis.keytypes). Queries no rule covers are
rejected with the error classes of DESIGN.md section 6, before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sqlglot import exp

from dpsql.analysis.kexpr import ONE, ZERO, Const, KExpr, PlusK, add, is_zero, kmax, kmin, mul
from dpsql.analysis.keytypes import (
    collation,
    comparable,
    mark_comparable,
    normalise,
    numeric_or_unknown,
    same_type,
    type_name,
)
from dpsql.analysis.parse import DIALECT, parse_query
from dpsql.errors import (
    AggregateArithmeticError,
    MissingMetricError,
    ProtectedBinError,
    UnsupportedConstructError,
    UnsupportedQueryError,
)
from dpsql.metadata import Domain, Metadata

_AGGREGATES = (exp.Count, exp.Sum, exp.Avg)
TWO = Const(2.0)


# --------------------------------------------------------------------------- relations


@dataclass(frozen=True)
class ColumnFacts:
    """What the analysis knows about one column of a relation."""

    mf: KExpr | None  # mf_k; None = unknown (no max frequency, or derived)
    bounds: tuple[float, float] | None = None  # declared clamp bounds, kept by plain copies
    origin: tuple[str, str] | None = None  # (table, column) when an unmodified base column
    from_aggregate: bool = False  # computed by an aggregate inside a subquery
    type: str | None = None  # SQL type (declared or from the database); None = unknown

    @staticmethod
    def derived(from_aggregate: bool = False, type: str | None = None) -> ColumnFacts:
        return ColumnFacts(mf=None, from_aggregate=from_aggregate, type=type)


@dataclass(frozen=True)
class Derivation:
    """One node of the owner-facing derivation tree (dpsql explain)."""

    label: str
    stability: KExpr
    details: tuple[str, ...] = ()
    children: tuple[Derivation, ...] = ()


@dataclass(frozen=True)
class Relation:
    """A relation's stability, column facts and private ancestor tables.

    ``columns`` keys are ``(alias, column)`` inside a FROM clause and ``("", column)`` for the
    output of a subquery.
    """

    stability: KExpr
    columns: dict[tuple[str, str], ColumnFacts]
    ancestors: frozenset[str]
    tree: Derivation

    def facts(self, key: tuple[str, str]) -> ColumnFacts:
        return self.columns[key]


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Measurement:
    """One exact aggregate that receives noise: COUNT or SUM (AVG is split into both)."""

    index: int
    function: str  # "COUNT" or "SUM"
    node: exp.Expression  # the qualified aggregate, e.g. COUNT(DISTINCT o.x) or SUM(o.cost)
    sensitivity: KExpr  # ES(k)
    bounds: tuple[float, float] | None = None  # SUM: clamp bounds of the argument
    label: str = ""

    @property
    def integer(self) -> bool:
        return self.function == "COUNT"


@dataclass(frozen=True)
class GroupKey:
    """A GROUP BY key and the declared domain of values its bins are filled from."""

    index: int
    node: exp.Column
    domain: Domain
    name: str
    #: the declared (or database-filled) type of the base column the key comes from
    type: str | None = None


@dataclass(frozen=True)
class OutputColumn:
    """One column of the analyst's result, in SELECT order."""

    name: str
    kind: str  # "group_key" | "aggregate" | "expression"
    function: str | None  # COUNT / SUM / AVG for a single-aggregate column
    measurements: tuple[int, ...] = ()
    node: exp.Expression | None = None

    @property
    def bare_aggregate(self) -> bool:
        """True for a column that is one COUNT or SUM as written (``COUNT(*) AS n``)."""
        inner = self.node.this if isinstance(self.node, exp.Alias) else self.node
        return isinstance(inner, (exp.Count, exp.Sum))


@dataclass(frozen=True)
class QueryAnalysis:
    """The privacy analysis of one query: what to measure, with which ES(k)."""

    query: exp.Select
    columns: tuple[OutputColumn, ...]
    measurements: tuple[Measurement, ...]
    group_keys: tuple[GroupKey, ...]
    tree: Derivation
    max_frequencies_used: tuple[str, ...] = field(default=())
    #: key equalities whose types were unknown (only with allow_unknown_key_types=True)
    unchecked_key_types: tuple[str, ...] = field(default=())


# --------------------------------------------------------------------------- helpers


def _conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    """Flatten nested ANDs (and parentheses around them) into a list of conjuncts."""
    if node is None:
        return []
    node = node.unnest()
    if isinstance(node, exp.And):
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def _has_aggregate(node: exp.Expression) -> bool:
    return any(_in_same_select(a, node) for a in node.find_all(*_AGGREGATES))


def _in_same_select(inner: exp.Expression, outer: exp.Expression) -> bool:
    """True when ``inner`` is not nested in a subquery below ``outer``."""
    if inner is outer:
        return True
    node = inner.parent
    while node is not None and node is not outer:
        if isinstance(node, exp.Query):
            return False
        node = node.parent
    return True


def _sql(node: exp.Expression) -> str:
    return node.sql(dialect=DIALECT)


def _key_of(node: exp.Expression) -> tuple[str, str] | str:
    """What identifies a GROUP BY key or an expression compared with one: a column by its
    (qualified) table and name, without generating SQL; anything else by its SQL text."""
    if isinstance(node, exp.Column):
        return (node.table, node.name)
    return _sql(node)


def _mf_str(mf: KExpr | None) -> str:
    return "unknown" if mf is None else str(mf)


def _check_unique_output(name: str, out: dict[tuple[str, str], ColumnFacts]) -> None:
    """Reject a second output column of the same name in a subquery, CTE or UNION branch.

    DuckDB binds ``t.x`` to the FIRST column named x (it renames the second to x_1), while a
    dict keyed by name would keep the LAST one's facts: ``(SELECT customer_id AS x, order_id AS
    x ...) t JOIN c ON c.id = t.x`` would use order_id's mf 1 for a join on customer_id.
    """
    if any(key.lower() == name.lower() for _, key in out):
        raise UnsupportedConstructError(
            f"a subquery outputs two columns named {name!r}: give each column a distinct alias"
        )


def _reject_outer_references(select: exp.Select) -> None:
    """Reject a derived table, CTE or IN subquery that refers to an enclosing query's columns.

    DuckDB evaluates such a subquery once per outer row (an implicit LATERAL join), so its
    relation is not one fixed relation with one stability: in
    ``EXISTS (SELECT 1 FROM (SELECT COUNT(*) AS n FROM r WHERE r.k = o.k) t WHERE t.n = o.q)``
    one changed row of r changes n for every outer row with that k, which no mf of o.q bounds.
    Correlated EXISTS conditions are analysed by the semi-join rule instead (from_where with
    correlated_ok=True), not here.
    """
    items = [select.args["from_"].this] + [j.this for j in select.args.get("joins") or []]
    aliases = {item.alias_or_name for item in items}
    for col in select.find_all(exp.Column):
        if col.table and col.table not in aliases and _in_same_select(col, select):
            raise UnsupportedConstructError(
                f"a subquery in FROM, a CTE or an IN subquery refers to {_sql(col)} of an "
                "enclosing query (an implicit LATERAL join), which has no sensitivity rule: "
                "join the tables instead, or correlate only through EXISTS (... WHERE "
                "inner.k = outer.k)"
            )


def _derived_type(node: exp.Expression) -> str | None:
    """The type of a computed output column, where it is certain: an explicit CAST, COUNT."""
    if isinstance(node, (exp.Cast, exp.TryCast)) and isinstance(node.args.get("to"), exp.DataType):
        return node.args["to"].sql(dialect=DIALECT)
    if isinstance(node, exp.Count):
        return "BIGINT"  # COUNT is BIGINT in DuckDB and Spark
    return None


def _scale_mf(mf: KExpr | None, factor: KExpr | None) -> KExpr | None:
    if mf is None or factor is None:
        return None
    return mul(mf, factor)


# --------------------------------------------------------------------------- the analyzer


class _Analyzer:
    def __init__(self, metadata: Metadata, allow_unknown_key_types: bool = False) -> None:
        self.metadata = metadata
        self.ctes: list[dict[str, Relation]] = []
        self.used_mf: list[str] = []
        self.allow_unknown_key_types = allow_unknown_key_types
        self.unchecked: list[str] = []

    # -- relations ---------------------------------------------------------------------

    def table(self, table: exp.Table) -> Relation:
        name = table.name.lower()
        for scope in reversed(self.ctes):
            if name in scope and not table.db:
                cte = scope[name]
                return replace(cte, tree=Derivation(f"CTE {name}", cte.stability, (), (cte.tree,)))
        meta = self.metadata.table(name)
        cols: dict[tuple[str, str], ColumnFacts] = {}
        for col in meta.columns.values():
            if col.max_freq is None:
                mf: KExpr | None = None
            elif meta.public:
                mf = Const(float(col.max_freq))
            else:
                mf = PlusK(float(col.max_freq))
            cols[("", col.name)] = ColumnFacts(
                mf=mf, bounds=col.bounds, origin=(name, col.name), type=col.type
            )
        stability = ZERO if meta.public else ONE
        kind = "public" if meta.public else "private"
        return Relation(
            stability, cols, frozenset() if meta.public else frozenset({name}),
            Derivation(f"{kind} table {name}", stability),
        )

    def query_relation(self, query: exp.Expression) -> Relation:
        """A subquery, CTE body or UNION used as a relation; output keys are ("", name)."""
        query = query.unnest() if isinstance(query, exp.Subquery) else query
        if isinstance(query, exp.Subquery):
            return self.query_relation(query.this)
        with_ = query.args.get("with_")
        if with_ is not None:
            self.ctes.append({})
            try:
                for cte in with_.expressions:
                    self.ctes[-1][cte.alias_or_name.lower()] = self.query_relation(cte.this)
                inner = query.copy()
                inner.set("with_", None)
                return self.query_relation(inner)
            finally:
                self.ctes.pop()
        if isinstance(query, exp.Union):
            return self.union(query)
        if isinstance(query, (exp.Intersect, exp.Except)):
            raise UnsupportedConstructError(
                f"{query.key.upper()} is not supported: no sensitivity rule; use IN / NOT IN "
                "subqueries (semi/anti-joins) instead"
            )
        if not isinstance(query, exp.Select):
            raise UnsupportedConstructError(f"{query.key.upper()} is not supported as a relation")
        return self.select_relation(query)

    def union(self, union: exp.Union) -> Relation:
        left = self.query_relation(union.left)
        right = self.query_relation(union.right)
        shared = left.ancestors & right.ancestors
        # UNION ALL: a changed base row changes each branch; branches sharing an ancestor can
        # both change at once (FLEX takes the max there, which is unsound).
        stability = add(left.stability, right.stability) if shared else kmax(
            left.stability, right.stability
        )
        cols: dict[tuple[str, str], ColumnFacts] = {}
        for (lk, lf), rf in zip(left.columns.items(), right.columns.values(), strict=False):
            mf = None if lf.mf is None or rf.mf is None else add(lf.mf, rf.mf)
            bounds = None
            if lf.bounds is not None and rf.bounds is not None:
                bounds = (min(lf.bounds[0], rf.bounds[0]), max(lf.bounds[1], rf.bounds[1]))
            origin = lf.origin if lf.origin == rf.origin else None
            # Branches of different types are cast to a common type, maybe not injectively:
            # the union column's type is known only when both branches have the same one.
            same = same_type(lf.type, rf.type)
            cols[lk] = ColumnFacts(mf, bounds, origin, lf.from_aggregate or rf.from_aggregate,
                                   lf.type if same else None)
        rule = "S1 + S2 (shared ancestors)" if shared else "max(S1, S2)"
        kind = "UNION" if union.args.get("distinct") else "UNION ALL"
        return Relation(
            stability, cols, left.ancestors | right.ancestors,
            Derivation(kind, stability, (rule,), (left.tree, right.tree)),
        )

    def select_relation(self, select: exp.Select) -> Relation:
        """A SELECT used as a relation (in FROM, a CTE, or an IN subquery)."""
        if select.args.get("limit") is not None or select.args.get("offset") is not None:
            raise UnsupportedConstructError(
                "LIMIT/OFFSET inside a subquery is not supported: which rows survive depends on "
                "private data; apply LIMIT only to the final result"
            )
        rel = self.from_where(select, correlated_ok=False)[0]
        _reject_outer_references(select)
        grouped = select.args.get("group") is not None
        aggregated = any(_has_aggregate(e) for e in select.expressions)
        out: dict[tuple[str, str], ColumnFacts] = {}
        if grouped or aggregated:
            keys = select.args["group"].expressions if grouped else []
            key_sql = {_key_of(k) for k in keys}
            self._check_filter(select.args.get("having"), "HAVING")
            for item in select.expressions:
                name = item.alias_or_name
                _check_unique_output(name, out)
                inner = item.this if isinstance(item, exp.Alias) else item
                if isinstance(inner, exp.Column) and _key_of(inner) in key_sql:
                    facts = rel.facts((inner.table, inner.name))
                    # One row per group: a single key is unique, several keys keep input mf.
                    mf = ONE if len(keys) == 1 else facts.mf
                    out[("", name)] = ColumnFacts(mf, facts.bounds, facts.origin, type=facts.type)
                else:
                    self._check_aggregate_args(inner)
                    out[("", name)] = ColumnFacts.derived(
                        from_aggregate=_has_aggregate(inner), type=_derived_type(inner)
                    )
            having = select.args.get("having")
            if grouped and not aggregated and not (having is not None and _has_aggregate(having)):
                # No aggregate anywhere: the output is the set of distinct keys, as SELECT
                # DISTINCT. A group vanishes only when all its rows are removed and appears
                # only when a row is added, so S removed and S added input rows remove at most
                # S groups and add at most S (DESIGN.md section 2's stability): S, not 2 * S.
                stability = rel.stability
                rule = "GROUP BY without aggregates (distinct keys): S(input)"
            elif grouped:
                # Each changed input row moves one group's row: remove it, add the new one.
                stability = mul(TWO, rel.stability)
                rule = "GROUP BY: 2 * S(input)"
            else:
                # A scalar aggregate is one row; any change replaces that row.
                stability = ZERO if is_zero(rel.stability) else ONE
                rule = "scalar aggregate: one row"
            tree = Derivation("aggregate subquery", stability, (rule,), (rel.tree,))
            return Relation(stability, out, rel.ancestors, tree)
        distinct = select.args.get("distinct") is not None
        for item in select.expressions:
            name = item.alias_or_name
            _check_unique_output(name, out)
            inner = item.this if isinstance(item, exp.Alias) else item
            if isinstance(inner, exp.Column) and (inner.table, inner.name) in rel.columns:
                facts = rel.facts((inner.table, inner.name))
                if distinct and len(select.expressions) == 1:
                    facts = replace(facts, mf=ONE)
                out[("", name)] = facts
            else:
                self._check_scalar(inner, "SELECT list")
                from_agg = any(
                    rel.columns.get((c.table, c.name), ColumnFacts(None)).from_aggregate
                    for c in inner.find_all(exp.Column)
                )
                out[("", name)] = ColumnFacts.derived(
                    from_aggregate=from_agg, type=_derived_type(inner)
                )
        label = "SELECT DISTINCT" if distinct else "projection"
        # DISTINCT: removed input rows remove at most as many distinct rows; same for added.
        return Relation(rel.stability, out, rel.ancestors,
                        Derivation(label, rel.stability, (), (rel.tree,)))

    # -- FROM / JOIN / WHERE -----------------------------------------------------------

    def source(self, node: exp.Expression) -> tuple[str, Relation]:
        """One FROM item: a table, CTE reference or derived table, keyed by its alias."""
        if isinstance(node, exp.Table):
            rel = self.table(node)
            alias = node.alias_or_name
        elif isinstance(node, exp.Subquery):
            rel = self.query_relation(node.this)
            alias = node.alias_or_name
        else:
            raise UnsupportedConstructError(f"{node.key.upper()} is not supported in FROM")
        table_alias = node.args.get("alias")
        if table_alias is not None and table_alias.columns:
            # ``orders AS t(a, b)`` renames the table's columns by their physical position in
            # the database, which the metadata does not record: t.b may be any column.
            raise UnsupportedConstructError(
                f"column aliases on {_sql(table_alias)} are not supported: select the columns "
                "with aliases in a subquery instead, (SELECT x AS a, y AS b FROM t) AS t"
            )
        cols = {(alias, name): facts for (_, name), facts in rel.columns.items()}
        return alias, replace(rel, columns=cols)

    def from_where(
        self, select: exp.Select, *, correlated_ok: bool
    ) -> tuple[Relation, list[exp.Expression]]:
        """Join tree of FROM, filtered by WHERE (semi/anti-joins included).

        Returns the relation and, when ``correlated_ok``, the WHERE conjuncts that reference
        columns of an enclosing query (for the caller's semi-join).
        """
        from_ = select.args.get("from_")
        if from_ is None:
            raise UnsupportedQueryError(
                "a query without FROM reads no declared table: aggregate over a declared table"
            )
        where = _conjuncts(select.args["where"].this) if select.args.get("where") else []
        items: list[tuple[exp.Expression, exp.Join | None]] = [(from_.this, None)]
        items += [(j.this, j) for j in select.args.get("joins") or []]

        first_alias, rel = self.source(items[0][0])
        aliases = {first_alias}
        pending = items[1:]
        used: set[int] = set()
        while pending:
            node, join = pending.pop(0)
            self._check_join_kind(join)
            alias, right = self.source(node)
            on = _conjuncts(join.args.get("on")) if join is not None else []
            explicit = join is not None and join.args.get("on") is not None
            pool = on + [c for c in where if id(c) not in used]
            keys, key_nodes, derived = self._equi_keys(pool, aliases, {alias})
            if not keys:
                if not explicit and self._links_later(pending, where, aliases, used):
                    # FROM a, b, c WHERE a.x = c.y AND c.z = b.w: join c before b
                    pending.append((node, join))
                    continue
                raise self._no_equijoin(alias, join, derived)
            used.update(id(c) for c in key_nodes if c not in on)
            for c in on:
                if c not in key_nodes:
                    self._check_filter(c, "JOIN ... ON")
            for (a, b), key_node in zip(keys, key_nodes, strict=True):
                mark_comparable(key_node, rel.facts(a).type, right.facts(b).type)
            rel = self.join(rel, right, keys, alias)
            aliases.add(alias)

        outer_refs: list[exp.Expression] = []
        for cond in where:
            if id(cond) in used:
                continue
            if correlated_ok and self._references_outside(cond, aliases):
                if cond.find(exp.Query) is not None:
                    # Conditions on the outer row are only read for their equi-keys; a
                    # subquery inside one (o.y IN (SELECT ...), o.y < (SELECT COUNT(*) ...))
                    # would escape the analysis altogether.
                    raise UnsupportedConstructError(
                        f"the condition {_sql(cond)[:60]} inside EXISTS mixes the outer "
                        "query's columns with a subquery: move it to the outer WHERE"
                    )
                outer_refs.append(cond)
                continue
            semi = self._semijoin_parts(cond)
            if semi is not None:
                rel = self.semijoin(rel, *semi)
            else:
                self._check_filter(cond, "WHERE")
        return rel, outer_refs

    def _links_later(self, pending, where, aliases, used) -> bool:
        for node, _join in pending:
            alias = node.alias_or_name
            pool = [c for c in where if id(c) not in used]
            if self._equi_keys(pool, aliases, {alias})[0]:
                return True
        return False

    @staticmethod
    def _check_join_kind(join: exp.Join | None) -> None:
        if join is None:
            return
        side = (join.side or "").upper()
        kind = (join.kind or "").upper()
        method = (join.args.get("method") or "").upper()
        if side or kind in ("OUTER", "FULL", "SEMI", "ANTI", "ASOF", "POSITIONAL") or method:
            what = " ".join(x for x in (method, side, kind) if x) or "this"
            raise UnsupportedConstructError(
                f"{what} JOIN is not supported: only inner equijoins have a sensitivity rule; "
                "use an inner JOIN ... ON a = b, or IN / EXISTS / NOT EXISTS subqueries"
            )
        if join.args.get("using"):
            raise UnsupportedConstructError("JOIN ... USING could not be resolved: write ON a = b")

    def _equi_keys(self, conjuncts, left_aliases, right_aliases):
        keys: list[tuple[tuple[str, str], tuple[str, str]]] = []
        nodes: list[exp.Expression] = []
        derived: list[exp.Expression] = []
        for c in conjuncts:
            if not isinstance(c, exp.EQ):
                continue
            sides = []
            for side in (c.left, c.right):
                tables = {col.table for col in side.find_all(exp.Column)}
                sides.append(tables)
            if not (sides[0] and sides[1]):
                continue
            if sides[0] <= left_aliases and sides[1] <= right_aliases:
                lnode, rnode = c.left, c.right
            elif sides[1] <= left_aliases and sides[0] <= right_aliases:
                lnode, rnode = c.right, c.left
            else:
                continue
            lnode, rnode = lnode.unnest(), rnode.unnest()
            if not (isinstance(lnode, exp.Column) and isinstance(rnode, exp.Column)):
                derived.append(c)
                continue
            keys.append(((lnode.table, lnode.name), (rnode.table, rnode.name)))
            nodes.append(c)
        return keys, nodes, derived

    @staticmethod
    def _no_equijoin(alias: str, join: exp.Join | None, derived: list[exp.Expression]):
        if derived:
            return MissingMetricError(
                f"join key in {_sql(derived[0])} is a derived expression, which has no max "
                "frequency: join on plain declared columns (a.x = b.y)"
            )
        if join is not None and join.args.get("on") is not None:
            return UnsupportedConstructError(
                f"the join with {alias} has no equality between columns of both sides "
                f"({_sql(join.args['on'])}): non-equijoins have no sensitivity rule; "
                "join ON a.x = b.y"
            )
        return UnsupportedConstructError(
            f"{alias} is cross-joined (no equality a.x = b.y connects it to the other tables, "
            "and an OR does not count): add an equijoin condition"
        )

    def join(self, left: Relation, right: Relation, keys, alias: str) -> Relation:
        """Inner equijoin of ``left`` and ``right`` on ``keys`` (several conjuncts: min)."""
        shared = left.ancestors & right.ancestors
        s1, s2 = left.stability, right.stability
        candidates: list[KExpr] = []
        left_factors: list[KExpr] = []  # multiplies left columns' mf: mf_k(b, right)
        right_factors: list[KExpr] = []  # multiplies right columns' mf: mf_k(a, left)
        details: list[str] = []
        missing: list[str] = []
        for (a, b) in keys:
            mfa, mfb = left.facts(a).mf, right.facts(b).mf
            a_s, b_s = ".".join(a), ".".join(b)
            self._check_key_types(a_s, left.facts(a), b_s, right.facts(b), "join", used=False)
            details.append(f"mf_k({a_s}) = {_mf_str(mfa)}, mf_k({b_s}) = {_mf_str(mfb)}")
            self._note_mf(a_s, mfa)
            self._note_mf(b_s, mfb)
            if mfb is not None:
                left_factors.append(mfb)
            if mfa is not None:
                right_factors.append(mfa)
            if (mfa is None and not is_zero(s2)) or (mfb is None and not is_zero(s1)):
                missing.append(a_s if mfa is None and not is_zero(s2) else b_s)
                continue
            self._check_key_types(a_s, left.facts(a), b_s, right.facts(b), "join", used=True)
            term1 = ZERO if is_zero(s2) else mul(mfa, s2)  # type: ignore[arg-type]
            term2 = ZERO if is_zero(s1) else mul(mfb, s1)  # type: ignore[arg-type]
            if shared:
                # Self-join: one changed row can sit on both sides at once.
                candidates.append(add(add(term1, term2), mul(s1, s2)))
            else:
                candidates.append(kmax(term1, term2))
        if not candidates:
            raise MissingMetricError(
                f"join key {missing[0]} has no max frequency (or is derived): declare max_freq "
                "for it in the metadata, or join on a column that has one"
            )
        stability = kmin(*candidates)
        left_factor = kmin(*left_factors) if left_factors else None
        right_factor = kmin(*right_factors) if right_factors else None
        cols = {k: replace(f, mf=_scale_mf(f.mf, left_factor)) for k, f in left.columns.items()}
        cols.update(
            {k: replace(f, mf=_scale_mf(f.mf, right_factor)) for k, f in right.columns.items()}
        )
        rule = ("mf(a)*S2 + mf(b)*S1 + S1*S2 (self-join: shared ancestor "
                f"{', '.join(sorted(shared))})") if shared else "max(mf(a)*S2, mf(b)*S1)"
        if len(keys) > 1:
            rule += "; min over the equi-conjuncts"
        tree = Derivation(f"JOIN {alias}", stability, (rule, *details), (left.tree, right.tree))
        return Relation(stability, cols, left.ancestors | right.ancestors, tree)

    def _check_key_types(
        self, a_name: str, a: ColumnFacts, b_name: str, b: ColumnFacts, construct: str,
        *, used: bool,
    ) -> None:
        """Reject a key equality whose sides' types are not injectively comparable.

        mf(a) bounds the rows matching one value only if ``a = b`` compares stored values: a
        cast to a common type that merges distinct values (VARCHAR '01' and '1' both equal
        INTEGER 1) or can fail breaks every join and semi-join rule (see
        dpsql.analysis.keytypes). Known incompatible types are rejected for every key
        equality; unknown types prove nothing, so a key whose mf the bound uses (``used``)
        is rejected too, unless the caller (the owner's explain without a database) asked to
        list such keys instead.
        """
        for name, facts in ((a_name, a), (b_name, b)):
            if collation(facts.type) is not None:
                raise MissingMetricError(
                    f"the {construct} key {name} is stored with the collation "
                    f"{collation(facts.type)}, under which different values compare equal, so "
                    "its max frequency does not bound the matching rows: store the key without "
                    "a collation"
                )
        ok = comparable(a.type, b.type)
        if ok:
            return
        pair = f"{a_name} ({type_name(a.type)}) = {b_name} ({type_name(b.type)})"
        if ok is not None:
            raise MissingMetricError(
                f"the {construct} key {pair} compares columns of different types: the "
                "database casts one side, which can make distinct values equal, so max "
                "frequencies no longer bound the matching rows; store both keys with the "
                "same type (integers of different widths and strings of different lengths "
                "are fine)"
            )
        if not used:
            return
        if self.allow_unknown_key_types:
            if pair not in self.unchecked:
                self.unchecked.append(pair)
            return
        unknown = a_name if normalise(a.type) is None else b_name
        raise MissingMetricError(
            f"the {construct} key {pair}: the type of {unknown} is unknown, so dpsql cannot "
            "check that the equality compares values without a lossy cast; declare type: for "
            "the column in the metadata (dpsql fills types from the database when one is "
            "attached), and CAST a computed key explicitly"
        )

    def _note_mf(self, name: str, mf: KExpr | None) -> None:
        text = f"{name}: {_mf_str(mf)}"
        if text not in self.used_mf:
            self.used_mf.append(text)

    # -- semi/anti-joins ---------------------------------------------------------------

    def _semijoin_parts(self, cond: exp.Expression):
        """(keys, subquery relation, label) for IN / EXISTS conjuncts, else None.

        Each key is (outer column, inner column's name, inner column's facts): the outer column
        is compared with the inner one.
        """
        negated = False
        node = cond.unnest()
        if isinstance(node, exp.Not):
            negated, node = True, node.this.unnest()
        if isinstance(node, exp.In) and node.args.get("query") is not None:
            key = node.this.unnest()
            sub = node.args["query"]
            sub = sub.this if isinstance(sub, exp.Subquery) else sub
            if not isinstance(key, exp.Column):
                raise MissingMetricError(
                    f"the IN key {_sql(key)} is derived and has no max frequency: "
                    "use a plain declared column"
                )
            if self._is_correlated(sub):
                raise UnsupportedConstructError(
                    "a correlated IN subquery is not supported: use EXISTS (... WHERE inner.k = "
                    "outer.k)"
                )
            if len(sub.selects) != 1:
                raise UnsupportedConstructError("an IN subquery must select exactly one column")
            rel = self.query_relation(sub)
            label = f"{'NOT IN' if negated else 'IN'} subquery on {_sql(key)}"
            (_, inner_name), inner_facts = next(iter(rel.columns.items()))
            return [((key.table, key.name), inner_name, inner_facts, node)], rel, label
        if isinstance(node, exp.Exists):
            sub = node.this
            sub = sub.this if isinstance(sub, exp.Subquery) else sub
            if not isinstance(sub, exp.Select):
                raise UnsupportedConstructError("EXISTS must wrap a plain SELECT")
            if sub.args.get("group") is not None or any(
                _has_aggregate(e) for e in sub.expressions
            ):
                raise AggregateArithmeticError(
                    "an aggregate inside a correlated EXISTS subquery has no sensitivity rule: "
                    "move the aggregation into an IN subquery with GROUP BY"
                )
            inner, outer_conds = self.from_where(sub, correlated_ok=True)
            inner_aliases = {a for a, _ in inner.columns}
            keys = []
            for c in outer_conds:
                c = c.unnest()
                if isinstance(c, exp.EQ) and all(
                    isinstance(s.unnest(), exp.Column) for s in (c.left, c.right)
                ):
                    left, right = c.left.unnest(), c.right.unnest()
                    if right.table in inner_aliases and left.table not in inner_aliases:
                        left, right = right, left
                    if left.table in inner_aliases and right.table not in inner_aliases:
                        inner_facts = inner.facts((left.table, left.name))
                        keys.append(((right.table, right.name), _sql(left), inner_facts, c))
            if not keys:
                raise UnsupportedConstructError(
                    "an EXISTS subquery needs an equality inner.k = outer.k between a column of "
                    "the subquery and a column of the outer query (AND-ed in its WHERE)"
                )
            label = f"{'NOT EXISTS' if negated else 'EXISTS'} subquery"
            return keys, inner, label
        return None

    @staticmethod
    def _is_correlated(sub: exp.Expression) -> bool:
        inner_aliases = {t.alias_or_name for t in sub.find_all(exp.Table)}
        inner_aliases |= {s.alias_or_name for s in sub.find_all(exp.Subquery)}
        return any(c.table and c.table not in inner_aliases for c in sub.find_all(exp.Column))

    def semijoin(self, outer: Relation, keys, sub: Relation, label: str) -> Relation:
        """Semi/anti-join: one changed subquery row flips at most mf_k(key, outer) outer rows.

        The flip bound needs the outer key's rows that match one inner value to share one
        value of the key, so the key types are checked (see _check_key_types).
        """
        construct = label.split(" subquery")[0]
        for key, *_ in keys:
            if key not in outer.columns:
                raise UnsupportedConstructError(
                    f"the {construct} subquery compares with {'.'.join(key)}, a column of a query "
                    "more than one level up (a nested subquery correlated past the query directly "
                    "around it), which has no sensitivity rule: correlate each EXISTS only with "
                    "the query directly around it, e.g. move the innermost EXISTS up into the "
                    "outer WHERE, or join its table inside the middle subquery"
                )
        for key, _, inner_facts, key_node in keys:
            mark_comparable(key_node, outer.facts(key).type, inner_facts.type)
        if is_zero(sub.stability):
            # No mf enters the bound, but the equality still runs on private outer rows: a
            # cast between its sides could fail or merge values, so its types must be proven.
            for key, inner_name, inner_facts, _ in keys:
                self._check_key_types(".".join(key), outer.facts(key), inner_name, inner_facts,
                                      f"{construct} subquery", used=True)
            tree = Derivation(label, outer.stability, ("public subquery: S unchanged",),
                              (outer.tree, sub.tree))
            return replace(outer, tree=tree)
        terms = []
        details = []
        for key, inner_name, inner_facts, _ in keys:
            name = ".".join(key)
            mf = outer.facts(key).mf
            details.append(f"mf_k({name}) = {_mf_str(mf)}")
            self._note_mf(name, mf)
            self._check_key_types(name, outer.facts(key), inner_name, inner_facts,
                                  f"{construct} subquery", used=mf is not None)
            if mf is not None:
                terms.append(mul(mf, sub.stability))
        if not terms:
            raise MissingMetricError(
                f"the {construct} key {'/'.join('.'.join(k) for k, *_ in keys)} has "
                "no max frequency (or is derived): declare max_freq for it in the metadata"
            )
        flip = kmin(*terms)
        shared = outer.ancestors & sub.ancestors
        stability = add(outer.stability, flip) if shared else kmax(outer.stability, flip)
        rule = ("S(outer) + mf_k(key)*S(sub) (shared ancestors)" if shared
                else "max(S(outer), mf_k(key)*S(sub))")
        tree = Derivation(label, stability, (rule, *details), (outer.tree, sub.tree))
        return Relation(stability, outer.columns, outer.ancestors | sub.ancestors, tree)

    @staticmethod
    def _references_outside(cond: exp.Expression, aliases: set[str]) -> bool:
        return any(c.table and c.table not in aliases for c in cond.find_all(exp.Column)
                   if _in_same_select(c, cond))

    # -- checks ------------------------------------------------------------------------

    def _check_filter(self, cond: exp.Expression | None, where: str) -> None:
        """A filter keeps stability and mf, unless it hides a subquery no rule covers."""
        if cond is None:
            return
        cond = cond.this if isinstance(cond, exp.Having) else cond
        for sub in cond.find_all(exp.Subquery, exp.Exists, exp.Select):
            query = sub.this if isinstance(sub, (exp.Subquery, exp.Exists)) else sub
            if isinstance(query, exp.Select) and any(_has_aggregate(e) for e in query.expressions):
                raise AggregateArithmeticError(
                    f"the aggregate subquery in {where} ({_sql(sub)[:60]}) feeds a comparison; "
                    "its exact value could flip every row, and no rule bounds that: "
                    "run it as its own query and pass the noisy value as a parameter"
                )
            raise UnsupportedConstructError(
                f"a subquery inside {where} must be a whole AND-ed condition of the form "
                "x IN (SELECT ...), EXISTS (...), NOT IN or NOT EXISTS"
            )
        if _has_aggregate(cond) and where != "HAVING":
            raise AggregateArithmeticError(f"an aggregate cannot appear in {where}")

    def _check_scalar(self, node: exp.Expression, where: str) -> None:
        if node.find(exp.Subquery, exp.Select) is not None:
            raise UnsupportedConstructError(
                f"a scalar subquery in the {where} is not supported: join instead"
            )

    def _check_aggregate_args(self, node: exp.Expression) -> None:
        self._check_scalar(node, "SELECT list")
        for agg in node.find_all(*_AGGREGATES):
            if any(inner is not agg for inner in agg.find_all(*_AGGREGATES)):
                raise AggregateArithmeticError(f"nested aggregate {_sql(agg)} is not supported")


# --------------------------------------------------------------------------- top level


def analyze(
    sql: str, metadata: Metadata, *, allow_unknown_key_types: bool = False
) -> QueryAnalysis:
    """Analyse ``sql``: the measurements to noise, with ES(k) each, and the output columns.

    Precondition: ``metadata`` max frequencies and column types are true for the database
    queried (the Engine fills missing types from the database, see dpsql.backends.types).
    Guarantee: see the module docstring; raises a ``NotSupportedError`` subclass or
    ``ProgrammingError`` for anything without a sound rule, including a join / IN / EXISTS key
    whose type is unknown. ``allow_unknown_key_types=True`` (owner-only explain without a
    database, never a release) lists such keys in ``unchecked_key_types`` instead.
    """
    query = parse_query(sql, metadata)
    return analyze_query(query, metadata, allow_unknown_key_types=allow_unknown_key_types)


def analyze_query(
    query: exp.Query, metadata: Metadata, *, allow_unknown_key_types: bool = False
) -> QueryAnalysis:
    """Analyse an already parsed and qualified query (see :func:`analyze`)."""
    analyzer = _Analyzer(metadata, allow_unknown_key_types)
    with_ = query.args.get("with_")
    if with_ is not None:
        analyzer.ctes.append({})
        for cte in with_.expressions:
            analyzer.ctes[-1][cte.alias_or_name.lower()] = analyzer.query_relation(cte.this)
    if not isinstance(query, exp.Select):
        raise UnsupportedConstructError(
            f"{query.key.upper()} at the top level is not supported: send each branch as its "
            "own aggregate query"
        )
    rel, _ = analyzer.from_where(query, correlated_ok=False)
    keys = list(query.args["group"].expressions) if query.args.get("group") else []
    group_keys = _group_keys(keys, rel, metadata)
    grouped = bool(keys)
    analyzer._check_filter(query.args.get("having"), "HAVING")

    base = mul(TWO, rel.stability) if grouped else rel.stability
    measurements: list[Measurement] = []
    by_sql: dict[str, int] = {}

    def measure(function: str, node: exp.Expression, bounds=None) -> int:
        key = _sql(node)
        if key in by_sql:
            return by_sql[key]
        if function == "COUNT":
            es = base
        else:
            assert bounds is not None
            lo, hi = bounds
            es = mul(base, Const(max(hi, 0.0) - min(lo, 0.0)))
        m = Measurement(len(measurements), function, node, es, bounds, key)
        measurements.append(m)
        by_sql[key] = m.index
        return m.index

    def aggregate_measurements(agg: exp.Expression) -> tuple[int, ...]:
        if isinstance(agg, exp.Count):
            analyzer._check_scalar(agg, "COUNT argument")
            return (measure("COUNT", agg),)
        if agg.args.get("distinct") or isinstance(agg.this, exp.Distinct):
            raise UnsupportedConstructError(
                f"{_sql(agg)}: DISTINCT is supported only in COUNT(DISTINCT x)"
            )
        arg = agg.this.unnest()
        bounds = _sum_bounds(agg, arg, rel)
        sum_node = exp.Sum(this=arg.copy())
        if isinstance(agg, exp.Sum):
            return (measure("SUM", sum_node, bounds),)
        count_node = exp.Count(this=arg.copy())
        return (measure("SUM", sum_node, bounds), measure("COUNT", count_node))

    columns: list[OutputColumn] = []
    key_sql = {_key_of(k): i for i, k in enumerate(keys)}
    for item in query.expressions:
        inner = item.this if isinstance(item, exp.Alias) else item
        name = item.alias_or_name
        aggs = [a for a in inner.find_all(*_AGGREGATES) if _in_same_select(a, inner)]
        if not aggs:
            _check_over_keys(inner, key_sql, name)
            kind = "group_key" if _key_of(inner) in key_sql else "expression"
            columns.append(OutputColumn(name, kind, None, (), item))
            continue
        analyzer._check_aggregate_args(inner)
        ids: list[int] = []
        for agg in aggs:
            ids.extend(i for i in aggregate_measurements(agg) if i not in ids)
        function = type(inner).__name__.upper() if isinstance(inner, _AGGREGATES) else None
        columns.append(OutputColumn(name, "aggregate", function, tuple(ids), item))
    # Aggregates used only by HAVING / ORDER BY are measured (and noised) too.
    for clause in ("having", "order"):
        node = query.args.get(clause)
        if node is None:
            continue
        for agg in node.find_all(*_AGGREGATES):
            if _in_same_select(agg, node):
                aggregate_measurements(agg)
        _check_over_keys_or_aggs(node, key_sql, clause.upper(), {c.name for c in columns})
    if not measurements:
        raise UnsupportedQueryError(
            "the query releases no aggregate: dpsql answers COUNT / SUM / AVG queries, never "
            "raw rows; wrap the columns in an aggregate or GROUP BY them and COUNT(*)"
        )
    details = (f"ES(k) = {'2 * ' if grouped else ''}S(k) per COUNT"
               + (" (histogram: one row moves between two bins)" if grouped else ""),)
    tree = Derivation("aggregate", base, details, (rel.tree,))
    return QueryAnalysis(
        query=query, columns=tuple(columns), measurements=tuple(measurements),
        group_keys=tuple(group_keys), tree=tree,
        max_frequencies_used=tuple(analyzer.used_mf),
        unchecked_key_types=tuple(analyzer.unchecked),
    )


def _check_over_keys(node: exp.Expression, key_sql: dict[tuple[str, str] | str, int],
                     name: str) -> None:
    """A non-aggregate output must be built from group keys only (else it is a raw row)."""
    if _key_of(node) in key_sql:
        return
    if isinstance(node, exp.Column):
        raise UnsupportedQueryError(
            f"column {name!r} is neither aggregated nor a GROUP BY key, so it would release "
            "raw values: aggregate it (COUNT/SUM/AVG) or add it to GROUP BY"
        )
    if node.find(exp.Subquery, exp.Select) is not None:
        raise UnsupportedConstructError("a scalar subquery in the SELECT list is not supported")
    for child in node.iter_expressions():
        _check_over_keys(child, key_sql, name)


def _check_over_keys_or_aggs(node, key_sql, clause: str, aliases: set[str]) -> None:
    for col in node.find_all(exp.Column):
        if any(isinstance(a, _AGGREGATES) for a in _ancestors(col, node)):
            continue
        if _key_of(col) in key_sql or (not col.table and col.name in aliases):
            continue
        raise UnsupportedQueryError(
            f"{clause} uses {_sql(col)}, which is neither a GROUP BY key nor an aggregate: "
            "use a key or an aggregate of it"
        )


def _ancestors(node: exp.Expression, stop: exp.Expression):
    node = node.parent
    while node is not None and node is not stop:
        yield node
        node = node.parent


def _sum_bounds(agg: exp.Expression, arg: exp.Expression, rel: Relation) -> tuple[float, float]:
    fn = type(agg).__name__.upper()
    if not isinstance(arg, exp.Column):
        cols = [rel.columns.get((c.table, c.name)) for c in arg.find_all(exp.Column)]
        if any(f is not None and f.from_aggregate for f in cols):
            raise AggregateArithmeticError(
                f"{fn}({_sql(arg)}) sums a value computed by an aggregate in a subquery, which "
                "has no bounds: release the inner aggregate directly instead"
            )
        raise MissingMetricError(
            f"{fn}({_sql(arg)}) needs bounds, and a computed expression has none: "
            f"{fn} a declared column that has bounds: [lower, upper]"
        )
    facts = rel.columns.get((arg.table, arg.name))
    if facts is not None and facts.from_aggregate:
        raise AggregateArithmeticError(
            f"{fn}({_sql(arg)}) sums a value computed by an aggregate in a subquery, which has "
            "no bounds: release the inner aggregate directly instead"
        )
    if facts is None or facts.bounds is None:
        raise MissingMetricError(
            f"{fn}({_sql(arg)}) needs bounds: declare bounds: [lower, upper] for column "
            f"{arg.name!r} in the metadata"
        )
    if not numeric_or_unknown(facts.type):
        # DuckDB would cast each stored value to a number: one unparsable row would make the
        # whole query fail, an error that depends on the data (the rewrite also uses TRY_CAST
        # for columns of unknown type).
        raise UnsupportedConstructError(
            f"{fn}({_sql(arg)}) needs a numeric column, and {arg.name!r} is "
            f"{facts.type}: sum a numeric column, or store this one as a number"
        )
    return facts.bounds


def _group_keys(keys: list[exp.Expression], rel: Relation, metadata: Metadata) -> list[GroupKey]:
    out: list[GroupKey] = []
    for i, key in enumerate(keys):
        if not isinstance(key, exp.Column):
            raise ProtectedBinError(
                f"GROUP BY {_sql(key)} groups by a computed expression, whose bins are not "
                "declared: group by a releasable column with a declared domain"
            )
        facts = rel.columns.get((key.table, key.name))
        origin = facts.origin if facts is not None else None
        if origin is None:
            raise ProtectedBinError(
                f"GROUP BY {_sql(key)}: the column is computed in a subquery, so its values are "
                "not releasable: group by a declared releasable column"
            )
        table = metadata.table(origin[0])
        column = table.column(origin[1])
        if not (table.public or column.releasable):
            raise ProtectedBinError(
                f"GROUP BY {origin[0]}.{origin[1]}: the column is not releasable; the owner must "
                "declare it releasable with a domain (or group by a public table's column)"
            )
        if collation(column.type) is not None:
            raise ProtectedBinError(
                f"GROUP BY {origin[0]}.{origin[1]}: the column is stored with the collation "
                f"{collation(column.type)}, under which different values compare equal, so one "
                "row could fall in several bins: store it without a collation"
            )
        domain = column.domain
        if domain is None and table.public:
            domain = Domain(table=table.name, column=column.name)
        if domain is None:
            raise ProtectedBinError(
                f"GROUP BY {origin[0]}.{origin[1]}: no domain is declared, so which bins exist "
                "would depend on private data; the owner must declare domain: {values: [...]} "
                "or domain: {table: <public table>, column: <column>}"
            )
        out.append(GroupKey(i, key, domain, key.name, column.type))
    return out
