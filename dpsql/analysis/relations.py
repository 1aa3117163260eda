"""Relations: tables, CTEs, subqueries, UNION and FROM / WHERE sources, with their stability.

:class:`Analyzer` turns each relational part of a query into a :class:`Relation` (stability,
column facts, private ancestors), applying dpsql.analysis.rules; joins and semi-joins are built
by its :class:`~dpsql.analysis.joins.JoinBuilder` half.
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from dpsql.analysis import rules
from dpsql.analysis.aggregate_totality import check_total_over_aggregates
from dpsql.analysis.checks import (
    check_aggregate_args,
    check_filter,
    check_scalar,
    check_unique_output,
    conjuncts,
    derived_type,
    has_aggregate,
    key_of,
    reject_outer_references,
    sql_text,
)
from dpsql.analysis.derived_keys import DerivedDomain, derive_key, listed_domain, may_derive
from dpsql.analysis.joins import JoinBuilder
from dpsql.analysis.keyed_groups import clamped_count, keyed_group
from dpsql.analysis.keytypes import same_type
from dpsql.analysis.model import ColumnFacts, Derivation, Relation
from dpsql.analysis.sources import base_table, cte_references, derived_bounds, keyed
from dpsql.errors import ProtectedBinError, UnsupportedConstructError, UnsupportedQueryError
from dpsql.metadata import Metadata


class Analyzer(JoinBuilder):
    def __init__(self, metadata: Metadata, allow_unknown_key_types: bool = False) -> None:
        self.metadata = metadata
        #: id(Table) -> the CTE it reads (cte_references); id(CTE) -> its analysed relation
        self.cte_refs: dict[int, exp.CTE] = {}
        self.root: exp.Query | None = None  # the top-level query (outer_relation)
        self.ctes_resolved = False
        self.cte_relations: dict[int, Relation] = {}
        #: > 0 while analysing the body of a nested query with a WITH (see query_relation)
        self.unmarked = 0
        self.used_mf: list[str] = []
        self.allow_unknown_key_types = allow_unknown_key_types
        self.unchecked: list[str] = []

    # -- relations ---------------------------------------------------------------------

    def table(self, table: exp.Table) -> Relation:
        name = table.name.lower()
        ref = self.cte_refs.get(id(table))
        if ref is not None:
            cte = self.cte_relations.get(id(ref))
            if cte is None:  # a WITH no analysis step read (EXISTS rejects its WITH)
                raise UnsupportedConstructError(
                    f"the CTE {name} is defined where dpsql does not analyse it: define it in "
                    "the outer query's WITH"
                )
            return replace(cte, tree=Derivation(f"CTE {name}", cte.stability, (), (cte.tree,)))
        return base_table(self.metadata, name)

    def outer_relation(self, query: exp.Query) -> Relation:
        """The relation the top-level SELECT aggregates over: its FROM / WHERE, with the
        query's CTEs in scope (each analysed once, in order, even if unused)."""
        self.root = query
        self._analyse_ctes(query)
        if not isinstance(query, exp.Select):
            raise UnsupportedConstructError(
                f"{query.key.upper()} at the top level is not supported: send each branch as "
                "its own aggregate query"
            )
        return self.from_where(query, correlated_ok=False)[0]

    def query_relation(self, query: exp.Expression) -> Relation:
        """A subquery, CTE body or UNION used as a relation; output keys are ("", name)."""
        query = query.unnest() if isinstance(query, exp.Subquery) else query
        if isinstance(query, exp.Subquery):
            return self.query_relation(query.this)
        if query.args.get("with_") is not None:
            self._analyse_ctes(query)
            # The body (everything but the WITH) used to be analysed on a copy, so the key
            # equalities in it were never marked comparable in the query the rewrite reads
            # (it then treats them as possibly failing): keep that until it is decided.
            self.unmarked += 1
            try:
                return self._query_body(query)
            finally:
                self.unmarked -= 1
        return self._query_body(query)

    def _analyse_ctes(self, query: exp.Expression) -> None:
        """Analyse each CTE of ``query``'s WITH once, in order (even if unused); references
        to it (cte_references) share the relation, so a CTE used twice is a self-join."""
        with_ = query.args.get("with_")
        if with_ is not None:
            if not self.ctes_resolved and self.root is not None:
                self.ctes_resolved = True
                # Resolved on the first WITH read (a reference needs one around it): a
                # query without any pays no scope traversal.
                self.cte_refs = cte_references(self.root)
            for cte in with_.expressions:
                self.cte_relations[id(cte)] = self.query_relation(cte.this)

    def _query_body(self, query: exp.Expression) -> Relation:
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
        stability = rules.union_all_stability(left.stability, right.stability, bool(shared))
        cols: dict[tuple[str, str], ColumnFacts] = {}
        for (lk, lf), rf in zip(left.columns.items(), right.columns.values(), strict=False):
            mf = rules.union_column_mf(lf.mf, rf.mf)
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
        reject_outer_references(select)
        grouped = select.args.get("group") is not None
        aggregated = any(has_aggregate(e) for e in select.expressions)
        out: dict[tuple[str, str], ColumnFacts] = {}
        if grouped or aggregated:
            keys = select.args["group"].expressions if grouped else []
            key_sql = {key_of(k) for k in keys}
            check_filter(select.args.get("having"), "HAVING")
            # the subquery's rows run exactly, where TRY cannot wrap an aggregate
            check_total_over_aggregates(select, lambda c: (
                facts.type if (facts := rel.columns.get((c.table, c.name))) else None))
            for item in select.expressions:
                name = item.alias_or_name
                check_unique_output(name, out)
                inner = item.this if isinstance(item, exp.Alias) else item
                if isinstance(inner, exp.Column) and key_of(inner) in key_sql:
                    facts = rel.facts((inner.table, inner.name))
                    # One row per group: a single key is unique, several keys keep input mf.
                    mf = rules.group_key_mf(facts.mf, len(keys))
                    out[("", name)] = ColumnFacts(mf, facts.bounds, facts.origin, type=facts.type,
                                                  derived_domain=facts.derived_domain)
                else:
                    check_aggregate_args(inner)
                    from_agg = has_aggregate(inner)
                    out[("", name)] = ColumnFacts.derived(
                        from_aggregate=from_agg, type=derived_type(inner),
                        count=isinstance(inner, exp.Count),
                    )
                    found = None if from_agg else self._derived_domain(inner, rel, key_sql,
                                                                       select)
                    if found is not None:  # a computed GROUP BY key of the subquery
                        out[("", name)] = replace(out[("", name)], derived_domain=found)
                    clamped = clamped_count(inner) if from_agg else None
                    if clamped is not None:  # LEAST(COUNT(...), n): bins and bounds 0..n
                        out[("", name)] = replace(out[("", name)], derived_domain=clamped[0],
                                                  bounds=(0.0, float(clamped[1])), type="BIGINT")
            having = select.args.get("having")
            if grouped and not aggregated and not (having is not None and has_aggregate(having)):
                # No aggregate anywhere: the output is the set of distinct keys, as SELECT
                # DISTINCT. A group vanishes only when all its rows are removed and appears
                # only when a row is added, so S removed and S added input rows remove at most
                # S groups and add at most S (docs/privacy.md section 2's stability): S, not 2 * S.
                stability = rules.group_by_without_aggregate_stability(rel.stability)
                rule = "GROUP BY without aggregates (distinct keys): S(input)"
            elif grouped and (rel.stability.depends_on_k or rel.stability.at(0) > 1) and (
                    keyed := keyed_group(select, rel.columns, self.metadata,
                                         self.cte_refs)) is not None:
                # Every private table joined on the one key: a change touches two groups.
                stability = rules.keyed_group_stability(rel.stability)
                rule = f"GROUP BY the join key: 2 ({keyed})"
            elif grouped:
                # Each changed input row moves one group's row: remove it, add the new one.
                stability = rules.group_by_stability(rel.stability)
                rule = "GROUP BY: 2 * S(input)"
            else:
                # A scalar aggregate is one row; any change replaces that row.
                stability = rules.scalar_aggregate_stability(rel.stability)
                rule = "scalar aggregate: one row"
            tree = Derivation("aggregate subquery", stability, (rule,), (rel.tree,))
            return Relation(stability, out, rel.ancestors, tree)
        distinct = select.args.get("distinct") is not None
        for item in select.expressions:
            name = item.alias_or_name
            check_unique_output(name, out)
            inner = item.this if isinstance(item, exp.Alias) else item
            if isinstance(inner, exp.Column) and (inner.table, inner.name) in rel.columns:
                facts = rel.facts((inner.table, inner.name))
                if distinct and len(select.expressions) == 1:
                    facts = replace(facts, mf=rules.distinct_single_column_mf())
                out[("", name)] = facts
            else:
                check_scalar(inner, "SELECT list")
                from_agg = any(
                    rel.columns.get((c.table, c.name), ColumnFacts(None)).from_aggregate
                    for c in inner.find_all(exp.Column)
                )
                out[("", name)] = ColumnFacts.derived(
                    from_aggregate=from_agg, type=derived_type(inner)
                )
                if not from_agg:
                    found = self._derived_domain(inner, rel, None, select)
                    if found is not None:
                        out[("", name)] = replace(out[("", name)], derived_domain=found)
                    derived = derived_bounds(inner, rel)
                    if derived is not None:  # e.g. TPC-H Q7's volume, summed outside
                        out[("", name)] = replace(out[("", name)], bounds=derived)
        label = "SELECT DISTINCT" if distinct else "projection"
        # DISTINCT: removed input rows remove at most as many distinct rows; same for added.
        stability = rules.filter_projection(rel.stability)
        return Relation(stability, out, rel.ancestors,
                        Derivation(label, stability, (), (rel.tree,)))

    def _derived_domain(self, node: exp.Expression, rel: Relation, keys: set | None,
                        select: exp.Select) -> DerivedDomain | None:
        """The derivable bins of a computed output column (dpsql.analysis.derived_keys), so a
        GROUP BY outside can use it; None when there are none. In an aggregate subquery only a
        GROUP BY key (``keys``: their key_of) qualifies. Failing the metadata, a conjunct of
        ``select``'s WHERE listing the column's constants gives them (``listed_domain``)."""
        if keys is not None and key_of(node) not in keys:
            return None
        if may_derive(node, rel.columns, self.metadata):
            try:
                return derive_key(node, rel.columns, self.metadata)
            except ProtectedBinError:
                pass
        if node.find(exp.Placeholder, exp.AggFunc, exp.Window, exp.Query) is not None:
            return None
        return listed_domain(node, select.args.get("where"))

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
                f"column aliases on {sql_text(table_alias)} are not supported: select the columns "
                "with aliases in a subquery instead, (SELECT x AS a, y AS b FROM t) AS t"
            )
        if isinstance(node, exp.Table) and id(node) not in self.cte_refs:
            return alias, base_table(self.metadata, node.name.lower(), alias)
        return alias, keyed(rel, alias)

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
        where = conjuncts(select.args["where"].this) if select.args.get("where") else []
        items: list[tuple[exp.Expression, exp.Join | None]] = [(from_.this, None)]
        items += [(j.this, j) for j in select.args.get("joins") or []]

        first_alias, rel = self.source(items[0][0])
        aliases = {first_alias}
        pending = items[1:]
        used: set[int] = set()
        while pending:
            node, join = pending.pop(0)
            side = self._check_join_kind(join)
            alias, right = self.source(node)
            on = conjuncts(join.args.get("on")) if join is not None else []
            explicit = join is not None and join.args.get("on") is not None
            if side:
                # An outer join's keys come from its ON alone: a WHERE equality filters the
                # joined rows (dropping null-extended ones), it does not decide the matches.
                self._check_outer_on(join, aliases, alias)
                pool = list(on)
            else:
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
                    check_filter(c, "JOIN ... ON")
            for (a, b), key_node in zip(keys, key_nodes, strict=True):
                self.mark_comparable(key_node, rel.facts(a).type, right.facts(b).type)
            if side:
                rel = self.outer_join(rel, right, keys, alias, side)
            else:
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
                        f"the condition {sql_text(cond)[:60]} inside EXISTS mixes the outer "
                        "query's columns with a subquery: move it to the outer WHERE"
                    )
                outer_refs.append(cond)
                continue
            semi = self._semijoin_parts(cond)
            if semi is not None:
                rel = self.semijoin(rel, *semi)
            else:
                check_filter(cond, "WHERE")
        return rel, outer_refs
