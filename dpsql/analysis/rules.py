"""The elastic-sensitivity rules, one pure function per row of docs/privacy.md section 2.

Each function takes stabilities S(k) and max frequencies mf_k as :class:`KExpr` (``None`` for
an unknown mf, which never enters arithmetic) and returns the rule's bound. Its docstring is the
rule's contract: the precondition under which it is called, what it guarantees, and why it holds
(the "why it holds" column of the rules table). The analyzer (dpsql.analysis.relations, .joins,
.measure) decides which rule applies and checks the preconditions; these functions only compute.

Terminology: a relation's stability S(k) bounds how many of its rows one changed base row can
remove, and how many it can add, at any database within distance k of the real one; mf_k(a)
bounds how many of its rows share one value of column a; ES(k) of an aggregate bounds its local
sensitivity at every database within distance k.

The exact KExpr built (not only its values) is part of the behaviour: ``dpsql explain`` prints
it, so the order of operands here must not change.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpsql.analysis.kexpr import ONE, ZERO, Const, KExpr, PlusK, add, is_zero, kmax, kmin, mul

TWO = Const(2.0)


# --------------------------------------------------------------------------- base tables


def private_table(max_freq: float | None) -> tuple[KExpr, KExpr | None]:
    """Private table: S = 1, mf_k(a) = mf(a) + k.

    Precondition: ``max_freq`` is the declared max frequency of a column of a private table
    (true for the real database), or None when none is declared.
    Guarantee: returns (S, mf_k of that column); mf_k is None when no max frequency is declared.
    Why: one change replaces one row; k changes raise any value's frequency by at most k.
    """
    return ONE, None if max_freq is None else PlusK(float(max_freq))


def public_table(max_freq: float | None) -> tuple[KExpr, KExpr | None]:
    """Public table: S = 0, mf constant.

    Precondition: the table is declared public (its rows are not protected and never change).
    Guarantee: returns (S = 0, mf = the declared max frequency, or None when none is declared).
    Why: public rows never change.
    """
    return ZERO, None if max_freq is None else Const(float(max_freq))


# --------------------------------------------------------------------------- filters


def filter_projection(stability: KExpr) -> KExpr:
    """Filter / projection: S unchanged; derived columns lose mf.

    Precondition: the relation is a WHERE / ON filter (without subqueries) or a projection of
    the input relation, whose stability is ``stability``. A plain column copy keeps its facts;
    a computed output column gets mf None (ColumnFacts.derived).
    Guarantee: S of the output.
    Why: a filter keeps a subset of the changed rows; a computed value's frequency is unknown.
    """
    return stability


def distinct_single_column_mf() -> KExpr:
    """SELECT DISTINCT of one column: that column's mf is 1 (S unchanged, as a projection).

    Precondition: the SELECT is DISTINCT and outputs exactly one column.
    Why: every value occurs once; removed input rows remove at most as many distinct rows, and
    likewise for added rows, so S carries over.
    """
    return ONE


# --------------------------------------------------------------------------- joins


def join_terms(mf_a: KExpr | None, s_right: KExpr, mf_b: KExpr | None,
               s_left: KExpr) -> tuple[KExpr, KExpr]:
    """The two products of the join rules: (mf_k(a, r1)·S(r2), mf_k(b, r2)·S(r1)).

    A term whose stability is 0 is 0 without reading its mf (which may then be None: a public
    side's key needs no max frequency on the other side). Precondition: ``mf_a`` is not None
    unless ``s_right`` is 0, and ``mf_b`` is not None unless ``s_left`` is 0.
    """
    term1 = ZERO if is_zero(s_right) else mul(mf_a, s_right)  # type: ignore[arg-type]
    term2 = ZERO if is_zero(s_left) else mul(mf_b, s_left)  # type: ignore[arg-type]
    return term1, term2


def join_disjoint(mf_a: KExpr | None, s_right: KExpr, mf_b: KExpr | None,
                  s_left: KExpr) -> KExpr:
    """r1 ⋈ r2 on a = b, disjoint ancestors: max(mf_k(a,r1)·S(r2), mf_k(b,r2)·S(r1)).

    Precondition: r1 and r2 have no private ancestor table in common; ``a = b`` compares
    stored values without a lossy cast (dpsql.analysis.keytypes); mf_a / mf_b as in
    :func:`join_terms`.
    Guarantee: the stability of the join.
    Why: a change touches one side only; each changed row of one side matches at most mf rows
    of the other.
    """
    return kmax(*join_terms(mf_a, s_right, mf_b, s_left))


def join_shared(mf_a: KExpr | None, s_right: KExpr, mf_b: KExpr | None,
                s_left: KExpr) -> KExpr:
    """Same, shared ancestor (self-join, CTE used twice): mf(a)·S2 + mf(b)·S1 + S1·S2.

    Precondition: as :func:`join_disjoint`, but r1 and r2 may share private ancestors.
    Guarantee: the stability of the join.
    Why: one change can sit on both sides at once; new rows can match each other.
    """
    term1, term2 = join_terms(mf_a, s_right, mf_b, s_left)
    return add(add(term1, term2), mul(s_left, s_right))


def join_stability(mf_a: KExpr | None, s_right: KExpr, mf_b: KExpr | None, s_left: KExpr,
                   shared: bool) -> KExpr:
    """One equi-conjunct's join stability: :func:`join_shared` if ``shared`` (the sides have a
    private ancestor in common), else :func:`join_disjoint`."""
    if shared:
        return join_shared(mf_a, s_right, mf_b, s_left)
    return join_disjoint(mf_a, s_right, mf_b, s_left)


def several_equi_conjuncts(candidates: Sequence[KExpr]) -> KExpr:
    """Several equi-conjuncts: min over conjuncts.

    Precondition: ``candidates`` holds the stability of the join on each usable conjunct alone
    (at least one).
    Guarantee: the stability of the join on all of them.
    Why: the join on a ∧ b is a filter of the join on either.
    """
    return kmin(*candidates)


def join_key_factor(other_key_mfs: Sequence[KExpr]) -> KExpr | None:
    """The factor a joined column's mf is multiplied by: the smallest known mf_k of the other
    side's join keys (None, unknown, if none is known). See :func:`join_column_mf`."""
    return kmin(*other_key_mfs) if other_key_mfs else None


def join_column_mf(mf: KExpr | None, factor: KExpr | None) -> KExpr | None:
    """mf_k of a column after a join: mf_k(c) · min over conjuncts of the other side's key mf.

    Precondition: ``factor`` is :func:`join_key_factor` of the other side's key mfs.
    Guarantee: None (unknown) if ``mf`` or ``factor`` is unknown.
    Why: each row of this side matches at most mf_k(key) rows of the other, so a value shared
    by mf_k(c) rows here is shared by at most mf_k(c)·mf_k(key) joined rows.
    """
    if mf is None or factor is None:
        return None
    return mul(mf, factor)


def at_least_one(mf: KExpr) -> KExpr:
    """max(1, mf): ``mf`` itself when it is provably >= 1 at every k (a constant >= 1, or
    mf + k with mf >= 1), so that explain shows the plain mf."""
    if isinstance(mf, Const) and mf.value >= 1:
        return mf
    if isinstance(mf, PlusK) and mf.base >= 1:
        return mf
    return kmax(ONE, mf)


def outer_join_stability(mf_p: KExpr | None, s_nullable: KExpr, mf_n: KExpr | None,
                         s_preserved: KExpr, shared: bool) -> KExpr:
    """r1 LEFT JOIN r2 ON r1.a = r2.b (r1 preserved, r2 null-extended; RIGHT JOIN mirrored).

    Disjoint ancestors: max(2·mf_k(a, r1)·S(r2), max(1, mf_k(b, r2))·S(r1)).
    Shared ancestor: 2·mf_k(a)·S(r2) + max(1, mf_k(b))·S(r1) + S(r1)·S(r2).

    Precondition: ``mf_p`` bounds how many preserved-side rows share one value of their key
    and ``mf_n`` how many null-extended-side rows share one value of theirs (with several
    equi-conjuncts, the smallest known mf over them on each side); ``mf_p`` is not None unless
    ``s_nullable`` is 0, ``mf_n`` not None unless ``s_preserved`` is 0; every key equality
    compares stored values without a lossy cast (dpsql.analysis.keytypes), and every column
    of the ON condition belongs to one of the two sides (extra ON conjuncts only shrink each
    preserved row's match set M(t) = {u : u.b = t.a and the rest of ON holds}).
    Guarantee: the stability of the outer join: at any database within distance k, one
    changed base row removes at most that many output rows and adds at most that many.
    Why: each preserved row t yields its |M(t)| matched rows, or one null-extended row when
    M(t) is empty. A removed or added preserved row removes or adds max(1, |M(t)|) <=
    max(1, mf(b)) rows. A removed null-extended-side row u removes (t, u) for the <= mf(a)
    rows t with t.a = u.b, and adds (t, NULL) for those it was the last match of; an added
    row u' adds (t, u') and removes (t, NULL) for the <= mf(a) rows it is the first match
    of: <= mf(a) removed rows per removed u plus mf(a) per added u', 2·mf(a)·S(r2) in all
    (attained: u moves from a key matched only by it to an unmatched key). With a shared
    ancestor both sides change at once; new preserved rows can also match new rows of the
    other side, at most S(r1)·S(r2) (as for inner joins).
    """
    # a term whose stability is 0 reads no mf (which may then be None)
    term_p: KExpr = ZERO
    term_n: KExpr = ZERO
    if not is_zero(s_preserved):
        term_p = mul(at_least_one(mf_n), s_preserved)  # type: ignore[arg-type]
    if not is_zero(s_nullable):
        term_n = mul(mul(TWO, mf_p), s_nullable)  # type: ignore[arg-type]
    if shared:
        return add(add(term_n, term_p), mul(s_preserved, s_nullable))
    return kmax(term_n, term_p)


def full_join_stability(mf_a: KExpr | None, s_right: KExpr, mf_b: KExpr | None,
                        s_left: KExpr, shared: bool) -> KExpr:
    """r1 FULL OUTER JOIN r2 ON r1.a = r2.b (both sides kept, both null-extended).

    Disjoint ancestors: max((max(1, mf_k(a)) + mf_k(a))·S(r2), (max(1, mf_k(b)) + mf_k(b))·S(r1)).
    Shared ancestor: the sum of both terms + S(r1)·S(r2).

    Precondition: as :func:`outer_join_stability`, with ``mf_a`` the mf of r1's key (not None
    unless ``s_right`` is 0) and ``mf_b`` of r2's (not None unless ``s_left`` is 0).
    Guarantee: the stability of the full outer join.
    Why: the output is the matched rows (t, u), (t, NULL) for each r1 row without a match and
    (NULL, u) for each r2 row without one. A removed r2 row u removes its max(1, |M(u)|) <=
    max(1, mf(a)) rows (its matches, or its own null-extended row) and adds (t, NULL) for
    the <= mf(a) rows t it was the last match of; an added u' adds max(1, mf(a)) rows and
    removes the (t, NULL) of the <= mf(a) rows it is the first match of. So one r2 change
    removes and adds at most (max(1, mf(a)) + mf(a))·S(r2) rows; r1 changes are the mirror
    image. With a shared ancestor both sides change at once, and new rows of both sides can
    also match each other (S(r1)·S(r2)). Attained (tests/analysis/test_rules.py).
    """
    term_l: KExpr = ZERO
    term_r: KExpr = ZERO
    if not is_zero(s_left):
        term_l = mul(add(at_least_one(mf_b), mf_b), s_left)  # type: ignore[arg-type]
    if not is_zero(s_right):
        term_r = mul(add(at_least_one(mf_a), mf_a), s_right)  # type: ignore[arg-type]
    if shared:
        return add(add(term_r, term_l), mul(s_left, s_right))
    return kmax(term_r, term_l)


def outer_join_preserved_mf(mf: KExpr | None, factor: KExpr | None) -> KExpr | None:
    """mf_k of a preserved-side column after an outer join: mf_k(c)·max(1, factor), where
    ``factor`` is :func:`join_key_factor` of the null-extended side's key mfs.

    Guarantee: None (unknown) if ``mf`` or ``factor`` is unknown.
    Why: each preserved row yields max(1, |M(t)|) <= max(1, mf_k(key)) output rows.
    """
    if mf is None or factor is None:
        return None
    return mul(mf, at_least_one(factor))


def outer_join_nullable_mf() -> KExpr | None:
    """mf of a null-extended-side column after an outer join: unknown (None).

    Why: every preserved row without a match carries NULL there, and how many rows do is
    bounded by no max frequency. (Matched rows alone would keep the inner join's
    mf_k(c)·factor for the non-NULL values, and NULL never matches an equality; dpsql does not
    use that bound, so a later join, IN or EXISTS on such a column needs the other side
    public.)
    """
    return None


# --------------------------------------------------------------------------- grouping


def group_by_stability(stability: KExpr) -> KExpr:
    """GROUP BY feeding another operator: 2·S.

    Precondition: a grouped SELECT with an aggregate (in SELECT or HAVING) used as a relation.
    Guarantee: the stability of its output.
    Why: each changed input row replaces one group row (remove old, add new).
    """
    return mul(TWO, stability)


def keyed_group_stability(stability: KExpr) -> KExpr:
    """GROUP BY the join key of every private table (dpsql.analysis.keyed_groups): S = 2.

    Precondition: a grouped SELECT with an aggregate, used as a relation, whose shape
    :func:`dpsql.analysis.keyed_groups.keyed_group` accepted: one GROUP BY column k of a table
    never null-extended, every private table (each occurrence) linked to k by key equalities
    (inner ON / WHERE, or its own LEFT JOIN ON) whose types compare stored values, row-local
    ON / WHERE / HAVING, no subquery; ``stability`` is S of its FROM / WHERE relation.
    Guarantee: the stability of its output under change-one-row neighbours, at every distance:
    0 over public rows only, else 2.
    Why: every joined row holding a private row r has k equal to r's key, and whether a
    kept row is null-extended is decided by rows of its own key, so the group of each key v is
    a function of the private rows with key v (and public rows). Changing r (key x) into r'
    (key y) changes the groups x and y only: at most 2 output rows are removed (their old
    versions) and 2 added, whatever the max frequencies.
    """
    return ZERO if is_zero(stability) else TWO


def group_by_without_aggregate_stability(stability: KExpr) -> KExpr:
    """GROUP BY without any aggregate (in SELECT or HAVING) feeding another operator: S.

    Precondition: a grouped SELECT with no aggregate anywhere, used as a relation.
    Guarantee: the stability of its output.
    Why: the output is the set of distinct keys, as SELECT DISTINCT: a group vanishes only
    when all its rows are removed and appears only when a row is added, so S removed and S
    added input rows remove <= S and add <= S groups.
    """
    return stability


def group_key_mf(mf: KExpr | None, n_keys: int) -> KExpr | None:
    """mf of a GROUP BY key in a grouped subquery's output: 1 for a single key, else the
    input mf (one row per group: a single key is unique, several keys keep the input mf)."""
    return ONE if n_keys == 1 else mf


def scalar_aggregate_stability(stability: KExpr) -> KExpr:
    """A scalar aggregate (no GROUP BY) used as a relation: one row; 0 if its input is public.

    Why: a scalar aggregate is one row; any change replaces that row.
    """
    return ZERO if is_zero(stability) else ONE


# --------------------------------------------------------------------------- aggregates


def count_sensitivity(stability: KExpr, grouped: bool) -> KExpr:
    """COUNT / COUNT(x) / COUNT(DISTINCT x): ES = S; histograms: 2·S per bin.

    Precondition: ``stability`` is S of the relation the aggregate is computed over;
    ``grouped`` when the query has GROUP BY (a histogram).
    Guarantee: ES(k) of each COUNT.
    Why: S rows removed and S added change any count by <= S; a row can move between two bins.
    """
    return mul(TWO, stability) if grouped else stability


def sum_sensitivity(stability: KExpr, grouped: bool, bounds: tuple[float, float]) -> KExpr:
    """SUM / AVG over bounds [l, u]: ES = S·(max(u,0) − min(l,0)) (times 2 in a histogram).

    Precondition: the executed query clamps every summed value into ``bounds`` = (l, u)
    (dpsql/rewrite); ``stability`` and ``grouped`` as in :func:`count_sensitivity`.
    Guarantee: ES(k) of the SUM (AVG is released as SUM and COUNT).
    Why: each changed row moves the sum by at most max(u,0) − min(l,0).
    """
    lo, hi = bounds
    return mul(count_sensitivity(stability, grouped), Const(max(hi, 0.0) - min(lo, 0.0)))


# --------------------------------------------------------------------------- semi-joins, union


def semijoin_stability(s_outer: KExpr, key_mfs: Sequence[KExpr], s_sub: KExpr,
                       shared: bool) -> KExpr:
    """IN / EXISTS / NOT IN / NOT EXISTS: S_outer ⊕ mf_k(key, outer)·S(sub).

    ⊕ is max if the outer relation and the subquery have disjoint ancestors, + if they share
    one; with several keys, the smallest product counts.
    Precondition: ``key_mfs`` are the known mf_k of the outer keys (at least one), each key
    equality compares stored values without a lossy cast.
    Guarantee: the stability of the filtered outer relation.
    Why: a changed subquery row adds or removes one key value, flipping at most mf_k(key) outer
    rows; FLEX ignored this factor (TPC-H Q4, Q16).
    """
    flip = kmin(*(mul(mf, s_sub) for mf in key_mfs))
    return add(s_outer, flip) if shared else kmax(s_outer, flip)


def union_all_stability(s_left: KExpr, s_right: KExpr, shared: bool) -> KExpr:
    """UNION ALL: S1 + S2 when branches share an ancestor, else max.

    Guarantee: the stability of the union.
    Why: one change can alter both branches; FLEX's max is unsound here.
    """
    return add(s_left, s_right) if shared else kmax(s_left, s_right)


def union_column_mf(mf_left: KExpr | None, mf_right: KExpr | None) -> KExpr | None:
    """mf of a UNION ALL column: the sum of both branches' (unknown if either is unknown).

    Why: a value's rows in the union are its rows in either branch.
    """
    return None if mf_left is None or mf_right is None else add(mf_left, mf_right)
