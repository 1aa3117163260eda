"""Outer joins: LEFT / RIGHT / FULL equijoins (docs/privacy.md section 2, "Outer joins").

:class:`OuterJoinBuilder` is the half of dpsql.analysis.joins.JoinBuilder (and so of the
analyzer) that builds ``r1 LEFT | RIGHT | FULL JOIN r2 ON ...``: rules.outer_join_stability
(LEFT; RIGHT mirrored) or rules.full_join_stability (FULL), with the smallest known mf over the
equi-conjuncts on each side. The keys come from the ON alone, and the ON may read only the
tables joined before it and the joined one (:meth:`OuterJoinBuilder._check_outer_on`, called by
Analyzer.from_where). A kept side's columns keep mf·max(1, mf of the other key); a
null-extended side's columns lose mf.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analysis import rules
from dpsql.analysis.checks import mf_str, sql_text
from dpsql.analysis.kexpr import KExpr, is_zero
from dpsql.analysis.model import ColumnFacts, Derivation, Relation
from dpsql.errors import MissingMetricError, UnsupportedConstructError


class OuterJoinBuilder:
    """Outer-join construction; mixed into the analyzer through JoinBuilder, which provides
    the key-type check and the record of max frequencies read."""

    # Provided by dpsql.analysis.joins.JoinBuilder.
    def _check_key_types(
        self, a_name: str, a: ColumnFacts, b_name: str, b: ColumnFacts, construct: str,
        *, used: bool,
    ) -> None:
        raise NotImplementedError

    def _note_mf(self, name: str, mf: KExpr | None) -> None:
        raise NotImplementedError

    @staticmethod
    def _check_outer_on(join: exp.Join, left_aliases: set[str], alias: str) -> None:
        """An outer join's ON may read only the tables joined before it and the joined one.

        The outer-join rule bounds each kept row's matches by the other side's key mf; a
        column of a table joined later (a comma join dpsql reorders, or a correlated outer
        query) would make the matches depend on rows the rule does not see.
        """
        on = join.args.get("on")
        side = (join.side or "").upper()
        if on is None:
            raise UnsupportedConstructError(
                f"{side} JOIN {alias} has no ON condition: write {side} JOIN ... ON a.x = b.y"
            )
        allowed = left_aliases | {alias}
        for col in on.find_all(exp.Column):
            if col.table not in allowed:
                raise UnsupportedConstructError(
                    f"the ON condition of {side} JOIN {alias} reads {sql_text(col)}, which is "
                    "not a column of the tables joined before it or of the joined one: list "
                    "the tables in join order (FROM a JOIN b ON ... LEFT JOIN c ON ...)"
                )

    def outer_join(self, left: Relation, right: Relation, keys, alias: str,
                   side: str) -> Relation:
        """``left LEFT | RIGHT | FULL JOIN right`` on ``keys`` (``side``): rules.
        outer_join_stability (LEFT; RIGHT mirrored) or rules.full_join_stability (FULL); with
        several conjuncts, the smallest known mf on each side.

        A kept side's columns keep mf·max(1, mf of the other side's key); a null-extended
        side's columns lose mf (rules.outer_join_nullable_mf; FULL: both sides). Every key
        equality decides which rows are null-extended, so every key's types are checked
        whenever a private row is involved.
        """
        shared = bool(left.ancestors & right.ancestors)
        s1, s2 = left.stability, right.stability
        private = not (is_zero(s1) and is_zero(s2))
        a_mfs: list[KExpr] = []  # mf_k of the left side's keys
        b_mfs: list[KExpr] = []  # mf_k of the right side's keys
        details: list[str] = []
        for (a, b) in keys:
            mfa, mfb = left.facts(a).mf, right.facts(b).mf
            a_s, b_s = ".".join(a), ".".join(b)
            self._check_key_types(a_s, left.facts(a), b_s, right.facts(b), "join", used=private)
            details.append(f"mf_k({a_s}) = {mf_str(mfa)}, mf_k({b_s}) = {mf_str(mfb)}")
            self._note_mf(a_s, mfa)
            self._note_mf(b_s, mfb)
            if mfa is not None:
                a_mfs.append(mfa)
            if mfb is not None:
                b_mfs.append(mfb)
        # the left key's mf multiplies S(right), the right key's S(left) (as for inner joins)
        for mfs, s_other, keyed in ((a_mfs, s2, 0), (b_mfs, s1, 1)):
            if not mfs and not is_zero(s_other):
                name = "/".join(".".join(k[keyed]) for k in keys)
                raise MissingMetricError(
                    f"{side} JOIN key {name} has no max frequency (or is derived, or comes "
                    "from the null-extended side of an earlier outer join): declare "
                    "max_freq for it in the metadata, or join on a column that has one"
                )
        mf_a = rules.join_key_factor(a_mfs)
        mf_b = rules.join_key_factor(b_mfs)
        if side == "FULL":
            stability = rules.full_join_stability(mf_a, s2, mf_b, s1, shared)
            kept_left = kept_right = False
            rule = ("FULL JOIN: (max(1, mf(a)) + mf(a))*S2 + (max(1, mf(b)) + mf(b))*S1 + S1*S2"
                    if shared else
                    "FULL JOIN: max((max(1, mf(a)) + mf(a))*S2, (max(1, mf(b)) + mf(b))*S1)")
        else:
            kept_left, kept_right = side == "LEFT", side == "RIGHT"
            if kept_left:
                stability = rules.outer_join_stability(mf_a, s2, mf_b, s1, shared)
            else:
                stability = rules.outer_join_stability(mf_b, s1, mf_a, s2, shared)
            kept = "left" if kept_left else "right"
            rule = (f"{side} JOIN ({kept} side kept): 2*mf(kept key)*S(other) + "
                    "max(1, mf(other key))*S(kept) + S(kept)*S(other)") if shared else (
                    f"{side} JOIN ({kept} side kept): max(2*mf(kept key)*S(other), "
                    "max(1, mf(other key))*S(kept))")
        if shared:
            rule += f" (shared ancestor {', '.join(sorted(left.ancestors & right.ancestors))})"
        if len(keys) > 1:
            rule += "; smallest mf over the equi-conjuncts"
        cols: dict[tuple[str, str], ColumnFacts] = {}
        for rel, kept_side, factor in ((left, kept_left, mf_b), (right, kept_right, mf_a)):
            for k, f in rel.columns.items():
                mf = (rules.outer_join_preserved_mf(f.mf, factor) if kept_side
                      else rules.outer_join_nullable_mf())
                cols[k] = f.with_mf(mf)
        tree = Derivation(f"{side} JOIN {alias}", stability, (rule, *details),
                          (left.tree, right.tree))
        return Relation(stability, cols, left.ancestors | right.ancestors, tree)
