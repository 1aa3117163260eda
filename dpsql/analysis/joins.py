"""Joins and semi-joins: equi-key extraction, key-type checks, and the join / IN / EXISTS rules.

:class:`JoinBuilder` is the part of the analyzer (dpsql.analysis.relations.Analyzer) that
combines two relations: an inner equijoin (rules.join_stability, min over equi-conjuncts), a
LEFT / RIGHT / FULL equijoin (its OuterJoinBuilder half, dpsql.analysis.outer_joins) or a
semi/anti-join (rules.semijoin_stability). Other join kinds are refused (_check_join_kind).
Every key equality's types are checked with
dpsql.analysis.keytypes: mf(a) bounds the rows matching one value only when ``a = b`` compares
the stored values without a lossy cast.
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from dpsql.analysis import rules
from dpsql.analysis.checks import has_aggregate, in_same_select, mf_str, sql_text
from dpsql.analysis.joined_columns import JoinedColumns
from dpsql.analysis.kexpr import KExpr, is_zero
from dpsql.analysis.keytypes import collation, comparable, mark_comparable, normalise, type_name
from dpsql.analysis.model import ColumnFacts, Derivation, Relation
from dpsql.analysis.outer_joins import OuterJoinBuilder
from dpsql.errors import AggregateArithmeticError, MissingMetricError, UnsupportedConstructError


class JoinBuilder(OuterJoinBuilder):
    """Join and semi-join construction; mixed into the analyzer, whose state it uses:
    ``used_mf`` (max frequencies the bound read), ``unchecked`` (key equalities of unknown
    types) and ``allow_unknown_key_types``."""

    used_mf: list[str]
    unchecked: list[str]
    allow_unknown_key_types: bool
    unmarked: int

    # Provided by the analyzer (dpsql.analysis.relations).
    def query_relation(self, query: exp.Expression) -> Relation:
        raise NotImplementedError

    def from_where(self, select: exp.Select, *, correlated_ok: bool):
        raise NotImplementedError

    def mark_comparable(self, node: exp.Expression, left: str | None,
                        right: str | None) -> None:
        """keytypes.mark_comparable, except in the body of a nested query with a WITH (see
        Analyzer.query_relation)."""
        if not self.unmarked:
            mark_comparable(node, left, right)

    def _links_later(self, pending, where, aliases, used) -> bool:
        for node, _join in pending:
            alias = node.alias_or_name
            pool = [c for c in where if id(c) not in used]
            if self._equi_keys(pool, aliases, {alias})[0]:
                return True
        return False

    @staticmethod
    def _check_join_kind(join: exp.Join | None) -> str:
        """The join's kind: "" (inner, or a comma join), "LEFT", "RIGHT" or "FULL" (outer);
        anything else (NATURAL, SEMI, ANTI, ASOF, POSITIONAL) is rejected."""
        if join is None:
            return ""
        side = (join.side or "").upper()
        kind = (join.kind or "").upper()
        method = (join.args.get("method") or "").upper()
        kinds = ("", "OUTER") if side else ("", "INNER", "CROSS")  # CROSS: no key, refused later
        if side not in ("", "LEFT", "RIGHT", "FULL") or kind not in kinds or method:
            what = " ".join(x for x in (method, side, kind) if x) or "this"
            raise UnsupportedConstructError(
                f"{what} JOIN is not supported: only inner and LEFT / RIGHT / FULL equijoins "
                "have a sensitivity rule; use JOIN ... ON a = b or LEFT JOIN ... ON a = b, or "
                "IN / EXISTS / NOT EXISTS subqueries"
            )
        if join.args.get("using"):
            raise UnsupportedConstructError("JOIN ... USING could not be resolved: write ON a = b")
        return side

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
                f"join key in {sql_text(derived[0])} is a derived expression, which has no max "
                "frequency: join on plain declared columns (a.x = b.y)"
            )
        if join is not None and join.args.get("on") is not None:
            return UnsupportedConstructError(
                f"the join with {alias} has no equality between columns of both sides "
                f"({sql_text(join.args['on'])}): non-equijoins have no sensitivity rule; "
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
            details.append(f"mf_k({a_s}) = {mf_str(mfa)}, mf_k({b_s}) = {mf_str(mfb)}")
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
            # Self-join (shared): one changed row can sit on both sides at once.
            candidates.append(rules.join_stability(mfa, s2, mfb, s1, bool(shared)))
        if not candidates:
            raise MissingMetricError(
                f"join key {missing[0]} has no max frequency (or is derived, or comes from the "
                "null-extended side of an outer join): declare max_freq for it in the "
                "metadata, or join on a column that has one"
            )
        stability = rules.several_equi_conjuncts(candidates)
        left_factor = rules.join_key_factor(left_factors)
        right_factor = rules.join_key_factor(right_factors)
        # each column's mf_k times the other side's key factor (rules.join_column_mf), on
        # first read: most columns of a join are never read again
        cols = JoinedColumns(left.columns, left_factor, right.columns, right_factor)
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
        text = f"{name}: {mf_str(mf)}"
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
                    f"the IN key {sql_text(key)} is derived and has no max frequency: "
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
            label = f"{'NOT IN' if negated else 'IN'} subquery on {sql_text(key)}"
            (_, inner_name), inner_facts = next(iter(rel.columns.items()))
            return [((key.table, key.name), inner_name, inner_facts, node)], rel, label
        if isinstance(node, exp.Exists):
            sub = node.this
            sub = sub.this if isinstance(sub, exp.Subquery) else sub
            if not isinstance(sub, exp.Select):
                raise UnsupportedConstructError("EXISTS must wrap a plain SELECT")
            if sub.args.get("with_") is not None:
                # from_where below reads the subquery's FROM only, not its WITH: a CTE defined
                # there would be resolved as an enclosing query's CTE of the same name (another
                # relation, e.g. a public one with S = 0) or as a table.
                raise UnsupportedConstructError(
                    "a WITH inside an EXISTS subquery is not supported: define the CTE in the "
                    "outer query's WITH"
                )
            if sub.args.get("group") is not None or any(
                has_aggregate(e) for e in sub.expressions
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
                        keys.append(((right.table, right.name), sql_text(left), inner_facts, c))
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
            self.mark_comparable(key_node, outer.facts(key).type, inner_facts.type)
        if is_zero(sub.stability):
            # No mf enters the bound, but the equality still runs on private outer rows: a
            # cast between its sides could fail or merge values, so its types must be proven.
            for key, inner_name, inner_facts, _ in keys:
                self._check_key_types(".".join(key), outer.facts(key), inner_name, inner_facts,
                                      f"{construct} subquery", used=True)
            tree = Derivation(label, outer.stability, ("public subquery: S unchanged",),
                              (outer.tree, sub.tree))
            return replace(outer, tree=tree)
        key_mfs: list[KExpr] = []
        details = []
        for key, inner_name, inner_facts, _ in keys:
            name = ".".join(key)
            mf = outer.facts(key).mf
            details.append(f"mf_k({name}) = {mf_str(mf)}")
            self._note_mf(name, mf)
            self._check_key_types(name, outer.facts(key), inner_name, inner_facts,
                                  f"{construct} subquery", used=mf is not None)
            if mf is not None:
                key_mfs.append(mf)
        if not key_mfs:
            raise MissingMetricError(
                f"the {construct} key {'/'.join('.'.join(k) for k, *_ in keys)} has "
                "no max frequency (or is derived, or comes from the null-extended side of an "
                "outer join): declare max_freq for it in the metadata"
            )
        shared = outer.ancestors & sub.ancestors
        stability = rules.semijoin_stability(outer.stability, key_mfs, sub.stability,
                                             bool(shared))
        rule = ("S(outer) + mf_k(key)*S(sub) (shared ancestors)" if shared
                else "max(S(outer), mf_k(key)*S(sub))")
        tree = Derivation(label, stability, (rule, *details), (outer.tree, sub.tree))
        return Relation(stability, outer.columns, outer.ancestors | sub.ancestors, tree)

    @staticmethod
    def _references_outside(cond: exp.Expression, aliases: set[str]) -> bool:
        return any(c.table and c.table not in aliases for c in cond.find_all(exp.Column)
                   if in_same_select(c, cond))
