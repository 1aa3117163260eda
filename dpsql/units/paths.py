"""Which privacy unit each aggregated row belongs to, proved from the SQL and the metadata.

Under a privacy unit (issue #17; docs/privacy.md, "Privacy units") neighbouring databases differ
in one unit and every row linked to it through the tables' unit paths (FK cascade). R2T's
truncation and the two-stage GROUP BY bound what one unit changes only if every row the query
aggregates -- and every row that decides whether it is aggregated (the rows of an EXISTS, IN,
NOT EXISTS or NOT IN subquery that match it) -- belongs to ONE unit, the same for all of them:

* *column classes*: columns equated by a positive conjunct (an inner join's ON, a WHERE, the
  correlation conditions of a subquery's WHERE, ``x = y`` of a top-level ``x [NOT] IN (SELECT
  y ..)``) hold equal values in every row that matters (SQL equality never holds on NULL); only
  equalities DuckDB evaluates exactly (dpsql.analysis.keytypes) join classes;
* *where an equality holds*: a WHERE / inner ON conjunct of the top level, or of an EXISTS / IN
  body that is itself an AND-ed conjunct there (a *positive* body, recursively), holds for
  every counted row (a counted row has a witness satisfying its positive bodies); the
  conjuncts of a NOT EXISTS / NOT IN body (or of a body in any other position) hold only for
  the body's *matching* rows -- the ones deciding the outer row -- and never for the counted
  row itself (NOT EXISTS counts exactly the rows where they fail). So each such body starts a
  *cluster* whose equalities only prove that ITS rows share the unit of the rows around it,
  while the counted rows' unit is proved from the top-level cluster alone (otherwise ``NOT
  EXISTS (SELECT 1 FROM regions r WHERE r.r = a.o_cust AND r.r = b.o_cust)`` would make the
  pairs (a, b) of two different customers it counts look single-unit);
* a private table reference has *unit tokens*: ``("unit", class)`` for its direct path column
  (the unit id itself), ``("key", T, k, class)`` for its via path (the unit of the T-row whose
  key k equals it) and for each key k of its own table some path points to (it IS the T-row
  with that key);
* references whose token sets meet belong to the same unit: a token names one unit id, or one
  row of a keyed table, which belongs to one unit (keys are unique: ``dpsql metadata check``);
* unit ids and the keys paths point to have types whose equality is the stored value's
  (:mod:`dpsql.units.identity`): the executed query groups by the unit id and looks it up by
  key equality, which must not merge two units ('A' = 'a' under NOCASE, -0.0 = 0.0) --
  otherwise refused, whatever the query.

Contract of :func:`unit_source`: returns how the executed query computes the unit of each
aggregated row (a column of a top-level table, followed along the paths to the unit id) when
every private reference of the query provably shares the top level's unit; otherwise raises
:class:`~dpsql.errors.UnsupportedConstructError` naming the reference and the fix
(:mod:`dpsql.units.refusals` words it). Depends on the SQL and the metadata alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, build_scope

from dpsql.analysis.checks import conjuncts
from dpsql.analysis.keytypes import comparable
from dpsql.metadata import Metadata, Table
from dpsql.units.identity import check_path_types
from dpsql.units.refusals import NoCountedUnitError, Refusals, path_joins

Token = tuple[str, ...]  # ("unit", class) | ("key", table, column, class); class as str(int)


@dataclass(frozen=True)
class Hop:
    """One step along a unit path: the row of ``table`` whose ``key`` equals the current value;
    its ``column`` is the next value."""

    table: str
    key: str
    column: str


@dataclass(frozen=True)
class UnitSource:
    """The unit of an aggregated row: ``alias.column`` of a top-level table, then ``hops``
    (none when that column holds the unit id itself)."""

    alias: str
    column: str
    hops: tuple[Hop, ...]
    description: str  # for explain and errors, e.g. "orders.o_custkey"


@dataclass
class _Ref:
    scope: Scope
    alias: str
    table: Table
    top: bool


def _inner(join: exp.Join) -> bool:
    """An inner join (no side; the row-level analysis refuses SEMI / ANTI / ASOF ..)."""
    return not (join.side or "") and (join.kind or "").upper() in ("", "INNER")


class _Classes:
    """Union-find over columns ``(scope id, alias, column)``."""

    def __init__(self) -> None:
        self.parent: dict[tuple[int, str, str], tuple[int, str, str]] = {}

    def find(self, key: tuple[int, str, str]) -> tuple[int, str, str]:
        self.parent.setdefault(key, key)
        while self.parent[key] != key:
            self.parent[key] = self.parent[self.parent[key]]
            key = self.parent[key]
        return key

    def union(self, a: tuple[int, str, str], b: tuple[int, str, str]) -> None:
        self.parent[self.find(a)] = self.find(b)


class _Prover:
    def __init__(self, query: exp.Select, metadata: Metadata, among: tuple[str, ...]) -> None:
        assert metadata.privacy_unit is not None
        self.md = metadata
        self.unit = metadata.privacy_unit
        # refusals name the unit only among several (on its view: dpsql.units.multi)
        self.refuse = Refusals(f"{self.unit.table}.{self.unit.column}" if among else None,
                               among, path_joins(metadata))
        #: (id of the cluster head the equality belongs to, column, column)
        self.pairs: list[tuple[int, tuple[int, str, str], tuple[int, str, str]]] = []
        self.refs: list[_Ref] = []
        self.root = build_scope(query)
        if self.root is None:  # pragma: no cover - parse_query gives a SELECT
            raise self.refuse("the query has no FROM clause")
        #: key columns some path points to, per table
        self.keys: dict[str, set[str]] = {}
        for t in metadata.tables.values():
            if t.unit is not None and t.unit.to_table is not None:
                assert t.unit.to_column is not None
                self.keys.setdefault(t.unit.to_table, set()).add(t.unit.to_column)
        self.keys.setdefault(self.unit.table, set()).add(self.unit.column)
        check_path_types(metadata)

    # -- scopes ---------------------------------------------------------------------------

    def collect(self) -> None:
        for scope in self.root.traverse():
            allowed = scope is self.root or self._semi_join_body(scope)
            private = [(alias, src) for alias, src in scope.sources.items()
                       if isinstance(src, exp.Table) and not self._table(src).public]
            if not private:
                continue
            if not allowed:
                kind = ("a CTE or derived table" if scope.is_cte or scope.is_derived_table
                        else "a UNION" if scope.is_set_operation else "a scalar subquery")
                raise self.refuse(f"{kind} reads a private table "
                                   "(read private tables in the top-level FROM, or in EXISTS / IN "
                                   "subqueries)")
            for alias, src in private:
                self.refs.append(_Ref(scope, alias, self._table(src), scope is self.root))
            self._check_outer_joins(scope)
        for scope in self.root.traverse():
            if isinstance(scope.expression, exp.Select):
                self._equalities(scope)

    # -- clusters (module docstring: where an equality holds) -------------------------------

    def _positive(self, scope: Scope) -> bool:
        """Whether ``scope`` (an EXISTS / IN body) is an AND-ed conjunct of its parent's WHERE
        or of an inner join's ON: then its conjuncts hold for every row its parent keeps."""
        node = scope.expression.parent
        if isinstance(node, exp.Subquery):
            node = node.parent
        if not isinstance(node, (exp.Exists, exp.In)) or scope.parent is None:
            return False
        child, up = node, node.parent
        while isinstance(up, (exp.And, exp.Paren)):
            child, up = up, up.parent
        if isinstance(up, exp.Where):
            return up.parent is scope.parent.expression
        if isinstance(up, exp.Join):
            return (_inner(up) and child is up.args.get("on")
                    and up.parent is scope.parent.expression)
        return False

    def head(self, scope: Scope) -> Scope:
        """The scope starting ``scope``'s cluster: the root, or the nearest body (itself
        included) that is not a positive EXISTS / IN body."""
        while scope is not self.root and scope.parent is not None and self._semi_join_body(
                scope) and self._positive(scope):
            scope = scope.parent
        return scope

    def context(self, head: Scope) -> list[Scope]:
        """``head``'s cluster and every enclosing one: whose equalities hold for the rows
        ``head``'s rows decide (its own for its matching rows, the enclosing ones for the
        rows around them)."""
        out = [head]
        while head is not self.root and head.parent is not None:
            head = self.head(head.parent)
            out.append(head)
        return out

    def classes_for(self, heads: list[Scope]) -> _Classes:
        classes = _Classes()
        wanted = {id(h) for h in heads}
        for owner, a, b in self.pairs:
            if owner in wanted:
                classes.union(a, b)
        return classes

    def _table(self, node: exp.Table) -> Table:
        return self.md.table(node.name)

    def _semi_join_body(self, scope: Scope) -> bool:
        """Whether ``scope`` is the body of an EXISTS or IN subquery of an allowed scope."""
        node = scope.expression.parent
        if isinstance(node, exp.Subquery):
            node = node.parent
        if not isinstance(node, (exp.Exists, exp.In)):
            return False
        parent = scope.parent
        return parent is not None and (parent is self.root or self._semi_join_body(parent))

    def _check_outer_joins(self, scope: Scope) -> None:
        select = scope.expression
        if not isinstance(select, exp.Select):
            return
        for i, join in enumerate(select.args.get("joins") or []):
            side = (join.side or "").upper()
            if not side:
                continue
            extended: list[exp.Expression] = []
            if side in ("LEFT", "FULL"):
                extended.append(join.this)
            if side in ("RIGHT", "FULL"):
                from_ = select.args.get("from_")
                extended += [from_.this] if from_ is not None else []
                extended += [j.this for j in select.args["joins"][:i]]
            for node in extended:
                for table in node.find_all(exp.Table):
                    if not self._table(table).public:
                        raise self.refuse.outer_join(side, self._table(table).name,
                                                     _as_inner(join))

    # -- classes --------------------------------------------------------------------------

    def _resolve(self, scope: Scope, column: exp.Column) -> tuple[int, str, str] | None:
        alias = column.table
        s: Scope | None = scope
        while s is not None:
            if alias in s.sources:
                return (id(s), alias, column.name)
            s = s.parent
        return None

    def _type(self, scope: Scope, column: exp.Column) -> str | None:
        s: Scope | None = scope
        while s is not None:
            src = s.sources.get(column.table)
            if isinstance(src, exp.Table):
                t = self._table(src)
                col = t.columns.get(column.name.lower())
                return col.type if col is not None else None
            if src is not None:
                return None
            s = s.parent
        return None

    def _equate(self, scope: Scope, a: exp.Expression, b: exp.Expression) -> None:
        if not (isinstance(a, exp.Column) and isinstance(b, exp.Column)):
            return
        if comparable(self._type(scope, a), self._type(scope, b)) is not True:
            return
        ka, kb = self._resolve(scope, a), self._resolve(scope, b)
        if ka is not None and kb is not None:
            self.pairs.append((id(self.head(scope)), ka, kb))

    def _equalities(self, scope: Scope) -> None:
        select = scope.expression
        assert isinstance(select, exp.Select)
        positive = conjuncts(select.args["where"].this) if select.args.get("where") else []
        for join in select.args.get("joins") or []:
            if _inner(join) and join.args.get("on") is not None:
                positive += conjuncts(join.args["on"])
        for cond in positive:
            if isinstance(cond, exp.EQ):
                self._equate(scope, cond.this, cond.expression)
                continue
            node = cond.this if isinstance(cond, exp.Not) else cond
            if isinstance(node, exp.In) and node.args.get("query") is not None:
                body = node.args["query"]
                body = body.this if isinstance(body, exp.Subquery) else body
                if isinstance(body, exp.Select) and len(body.expressions) == 1:
                    inner = body.expressions[0].unalias()
                    sub = next((s for s in scope.subquery_scopes if s.expression is body), None)
                    if sub is not None and isinstance(inner, exp.Column) and isinstance(
                            node.this, exp.Column):
                        ka, kb = self._resolve(scope, node.this), self._resolve(sub, inner)
                        types = (self._type(scope, node.this), self._type(sub, inner))
                        if ka and kb and comparable(*types) is True:
                            # x = y holds for the body's matching rows: its cluster's
                            self.pairs.append((id(self.head(sub)), ka, kb))

    # -- tokens ---------------------------------------------------------------------------

    def tokens(self, ref: _Ref, classes: _Classes) -> dict[Token, tuple[str, tuple[Hop, ...]]]:
        """Each token of ``ref`` under ``classes`` with (the ref's column it comes from, the
        hops from that column to the unit id)."""
        out: dict[Token, tuple[str, tuple[Hop, ...]]] = {}
        t = ref.table
        sid = id(ref.scope)

        def cls(column: str) -> str:
            return str(classes.find((sid, ref.alias, column)))

        if t.name == self.unit.table:
            out[("unit", cls(self.unit.column))] = (self.unit.column, ())
        elif t.unit is None:
            raise self.refuse(f"table {t.name} declares no path to the privacy unit")
        elif t.unit.direct:
            out[("unit", cls(t.unit.column))] = (t.unit.column, ())
        else:
            assert t.unit.to_table is not None and t.unit.to_column is not None
            out[("key", t.unit.to_table, t.unit.to_column, cls(t.unit.column))] = (
                t.unit.column, self.hops(t.unit.to_table, t.unit.to_column))
        for key in sorted(self.keys.get(t.name, ())):
            out.setdefault(("key", t.name, key, cls(key)), (key, self.hops(t.name, key)))
        return out

    def hops(self, table: str, key: str, depth: int = 0) -> tuple[Hop, ...]:
        """From a value of ``table.key`` to the unit id."""
        if depth > len(self.md.tables):
            raise self.refuse(f"the unit paths through {table} form a cycle")
        t = self.md.table(table)
        if t.name == self.unit.table:
            return () if key == self.unit.column else (Hop(t.name, key, self.unit.column),)
        if t.unit is None:
            raise self.refuse(f"table {t.name} declares no path to the privacy unit")
        if t.unit.direct:
            return () if key == t.unit.column else (Hop(t.name, key, t.unit.column),)
        assert t.unit.to_table is not None and t.unit.to_column is not None
        return (Hop(t.name, key, t.unit.column),
                *self.hops(t.unit.to_table, t.unit.to_column, depth + 1))

    def _one_group(self, refs: list[_Ref], classes: _Classes
                   ) -> list[dict[Token, tuple[str, tuple[Hop, ...]]]]:
        """The tokens of ``refs`` under ``classes``, after checking that the references
        whose tokens meet, starting from the top level's, take in all of them."""
        tokens = [self.tokens(r, classes) for r in refs]
        group = {next(i for i, r in enumerate(refs) if r.top)}
        seen = set().union(*(tokens[i] for i in group))
        changed = True
        while changed:
            changed = False
            for i, toks in enumerate(tokens):
                if i not in group and seen & toks.keys():
                    group.add(i)
                    seen |= toks.keys()
                    changed = True
        outside = [r for i, r in enumerate(refs) if i not in group]
        if outside:
            r = outside[0]
            raise self.refuse(f"a row of {r.table.name} ({r.alias}) may belong to another unit "
                               "than the rows counted (a result row would belong to two units)",
                               table=r.table.name, example=_same_unit_example(
                                   [refs[i] for i in sorted(group)], r))
        return tokens

    def source(self) -> UnitSource:
        top = [r for r in self.refs if r.top]
        if not top:
            raise self.refuse("the rows counted come from public tables only, and the private "
                               "tables in its subqueries decide which: such a row belongs to no "
                               "single unit", NoCountedUnitError)
        # every cluster's rows share the unit of the rows around them, proved with the
        # equalities that hold for those rows (its own and its enclosing clusters'); the
        # top level's first: the counted rows' unit
        heads: dict[int, Scope] = {}
        for r in self.refs:
            h = self.head(r.scope)
            heads.setdefault(id(h), h)
        root_refs: list[_Ref] = []
        root_tokens: list[dict[Token, tuple[str, tuple[Hop, ...]]]] = []
        for h in [self.root, *(h for h in heads.values() if h is not self.root)]:
            context = self.context(h)
            inside = {id(c) for c in context}
            refs = [r for r in self.refs if id(self.head(r.scope)) in inside]
            tokens = self._one_group(refs, self.classes_for(context))
            if h is self.root:
                root_refs, root_tokens = refs, tokens
        best: UnitSource | None = None
        for r, toks in zip(root_refs, root_tokens, strict=True):
            if not r.top:
                continue
            for column, hops in toks.values():
                candidate = UnitSource(r.alias, column, hops, f"{r.table.name}.{column}")
                if best is None or len(hops) < len(best.hops):
                    best = candidate
        assert best is not None
        return best


def unit_source(query: exp.Select, metadata: Metadata, among: tuple[str, ...] = ()
                ) -> UnitSource:
    """How to compute the unit of each row ``query`` aggregates (module contract). ``among``:
    the declared unit tables when there are several (``metadata`` is then one unit's view,
    dpsql.units.multi), which the refusals name the view's unit among."""
    prover = _Prover(query, metadata, among)
    prover.collect()
    if not prover.refs:
        raise prover.refuse("the query reads no private table")  # public queries never get here
    return prover.source()


def _as_inner(join: exp.Join) -> str | None:
    """The analyst's outer ``join`` written as an inner JOIN (its own table and ON), or None
    without an ON (the refusal then shows a path instead)."""
    on = join.args.get("on")
    if on is None:
        return None
    return f"JOIN {join.this.sql(dialect='duckdb')} ON {on.sql(dialect='duckdb')}"


def _same_unit_example(counted: list[_Ref], other: _Ref) -> str | None:
    """``a.x = b.y`` tying ``other``'s rows to a counted table's unit when both hold the unit's
    id directly (a direct path, or the unit table's own id: QA round 6, ``orders o JOIN
    recommendations r ON o.product_id = r.product_id`` is fixed by ``o.customer_id =
    r.customer_id``, not by a path to a table it does not read); None otherwise. The query's
    aliases and the public metadata alone."""
    path = other.table.unit
    if path is None or not path.direct:
        return None
    for ref in counted:
        mine = ref.table.unit
        if mine is not None and mine.direct and not ref.table.public:
            return f"{ref.alias}.{mine.column} = {other.alias}.{path.column}"
    return None

