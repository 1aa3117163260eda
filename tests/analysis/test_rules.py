"""Each rule of dpsql.analysis.rules, exactly (docs/privacy.md section 2, one test group per row).

Two kinds of test per rule:

* ``test_<rule>_exact``: the KExpr the rule returns, at several k, against the formula worked out
  by hand (mf_k of a private column is mf + k, of a public one mf).
* ``test_<rule>_is_attained``: a tiny database and one neighbour (plain Python multisets) on
  which the rule's bound at k = 0 is reached exactly, so a smaller bound would be unsound. The
  end-to-end brute force over all neighbours of small databases, through DuckDB, is in
  tests/bruteforce/test_soundness.py (joins, self-joins, grouped subqueries, semi/anti-joins,
  UNION ALL, SUM), tests/bruteforce/test_outer_joins.py (LEFT / RIGHT / FULL joins) and
  tests/fuzz/test_grammar_bruteforce.py.
"""

from __future__ import annotations

from collections import Counter

import pytest

from dpsql.analysis import rules
from dpsql.analysis.kexpr import ONE, ZERO, Const, PlusK

KS = (0, 1, 2, 5)


def at(e, ks=KS) -> list[float]:
    return [e.at(k) for k in ks]


def changed(before: list, after: list) -> int:
    """Stability observed on one neighbour: max(rows removed, rows added), as multisets."""
    b, a = Counter(before), Counter(after)
    return max(sum((b - a).values()), sum((a - b).values()))


def mf(rows: list, col=lambda r: r) -> int:
    return max(Counter(col(r) for r in rows).values())


# ----------------------------------------------------------------------------- base tables


def test_private_table_exact():
    s, m = rules.private_table(3)
    assert s == ONE and m == PlusK(3.0)
    assert at(m) == [3, 4, 5, 8]
    assert rules.private_table(None) == (ONE, None)


def test_private_table_is_attained():
    x, y = [1, 2, 2], [1, 2, 3]  # one row replaced
    assert changed(x, y) == rules.private_table(2)[0].at(0) == 1
    # k = 2 changes raise the frequency of 2 from mf = 2 to 4 = mf + k
    assert mf([2, 2, 2, 2]) == rules.private_table(mf(x))[1].at(2) == 4


def test_public_table_exact():
    assert rules.public_table(7) == (ZERO, Const(7.0))
    assert at(rules.public_table(7)[1]) == [7, 7, 7, 7]
    assert rules.public_table(None) == (ZERO, None)


# ----------------------------------------------------------------------------- filters


def test_filter_projection_exact():
    for s in (ONE, PlusK(2), ZERO):
        assert rules.filter_projection(s) is s


def test_filter_projection_is_attained():
    keep = lambda rows: [r for r in rows if r > 0]  # noqa: E731
    assert changed(keep([1, 2]), keep([3, 2])) == rules.filter_projection(ONE).at(0) == 1


def test_distinct_single_column_mf():
    assert rules.distinct_single_column_mf() == ONE


# ----------------------------------------------------------------------------- joins


def join(r1, r2, on=lambda a, b: a == b):
    return [(a, b) for a in r1 for b in r2 if on(a, b)]


def test_join_disjoint_exact():
    e = rules.join_disjoint(PlusK(3), ONE, PlusK(1), ONE)  # max((3+k)*1, (1+k)*1)
    assert at(e) == [3, 4, 5, 8]
    e = rules.join_disjoint(PlusK(3), PlusK(0), PlusK(1), ONE)  # max((3+k)*k, (1+k)*1)
    assert at(e) == [1, 4, 10, 40]
    # a public side (S = 0) needs no mf of the other side's key
    assert rules.join_disjoint(None, ZERO, Const(4), ONE) == Const(4.0)
    assert rules.join_disjoint(Const(4), ONE, None, ZERO) == Const(4.0)
    assert rules.join_stability(PlusK(3), ONE, PlusK(1), ONE, False) == rules.join_disjoint(
        PlusK(3), ONE, PlusK(1), ONE)


def test_join_disjoint_is_attained():
    r1, r2 = [1, 1, 1], [2]  # mf(a, r1) = 3; the change is on r2 only
    bound = rules.join_disjoint(Const(mf(r1)), ONE, Const(mf(r2)), ONE).at(0)
    assert changed(join(r1, r2), join(r1, [1])) == bound == 3


def test_join_shared_exact():
    # mf(a)*S2 + mf(b)*S1 + S1*S2 = 2(2+k) + 1
    e = rules.join_shared(PlusK(2), ONE, PlusK(2), ONE)
    assert at(e) == [5, 7, 9, 15]
    assert rules.join_stability(PlusK(2), ONE, PlusK(2), ONE, True) == e
    # worked example (docs): self-join of orders on customer_id, mf 100: 201 at k = 0
    assert rules.join_shared(PlusK(100), ONE, PlusK(100), ONE).at(0) == 201


def test_join_shared_is_attained():
    r = [1, 1, 2]  # one table on both sides: a change sits on both at once
    after = [1, 1, 1]
    bound = rules.join_shared(Const(mf(r)), ONE, Const(mf(r)), ONE).at(0)
    assert changed(join(r, r), join(after, after)) == bound == 5
    # the disjoint rule's max(2, 2) = 2 would be too small here
    assert rules.join_disjoint(Const(2), ONE, Const(2), ONE).at(0) < 5


def test_several_equi_conjuncts_exact():
    e = rules.several_equi_conjuncts([PlusK(100), PlusK(250), Const(300)])
    assert at(e) == [100, 101, 102, 105]
    assert rules.several_equi_conjuncts([Const(4)]) == Const(4.0)


def test_several_equi_conjuncts_is_attained():
    # The join on a AND b: a row matches only rows equal on both; the smaller candidate
    # (on b, mf 1) is reached, so min is the bound, not a looser one.
    r1 = [(1, 1), (1, 2), (1, 3)]  # mf(a) = 3, mf(b) = 1
    r2 = [(9, 9)]
    on = lambda x, y: x == y  # noqa: E731  (a = a' AND b = b')
    bound = rules.several_equi_conjuncts([
        rules.join_disjoint(Const(mf(r1, lambda r: r[0])), ONE, Const(1), ONE),
        rules.join_disjoint(Const(mf(r1, lambda r: r[1])), ONE, Const(1), ONE),
    ]).at(0)
    assert changed(join(r1, r2, on), join(r1, [(1, 2)], on)) == bound == 1


def test_join_column_mf_exact():
    factor = rules.join_key_factor([PlusK(5), Const(3)])
    assert at(factor) == [3, 3, 3, 3] and rules.join_key_factor([]) is None
    assert at(rules.join_column_mf(PlusK(2), factor)) == [6, 9, 12, 21]
    assert rules.join_column_mf(None, factor) is None
    assert rules.join_column_mf(PlusK(2), None) is None


def test_join_column_mf_is_attained():
    r1 = [(1, "c"), (1, "c")]  # column c: value "c" twice; key 1
    r2 = [1, 1, 1]  # key mf 3
    out = [a[1] for a, _ in join(r1, r2, lambda a, b: a[0] == b)]
    bound = rules.join_column_mf(Const(2), rules.join_key_factor([Const(3)])).at(0)
    assert mf(out) == bound == 6


# ----------------------------------------------------------------------------- outer joins


def left_join(r1, r2, on=lambda a, b: a == b):
    """r1 LEFT JOIN r2: each r1 row with its matches, or with None when it has none."""
    out = []
    for a in r1:
        matches = [b for b in r2 if on(a, b)]
        out += [(a, b) for b in matches] if matches else [(a, None)]
    return out


def test_at_least_one():
    assert rules.at_least_one(Const(3)) == Const(3.0)
    assert rules.at_least_one(PlusK(1)) == PlusK(1.0)
    assert at(rules.at_least_one(PlusK(0))) == [1, 1, 2, 5]
    assert rules.at_least_one(Const(0.5)) == ONE


def test_outer_join_disjoint_exact():
    # max(2 * (3+k) * 1, max(1, 1+k) * 1)
    e = rules.outer_join_stability(PlusK(3), ONE, PlusK(1), ONE, False)
    assert at(e) == [6, 8, 10, 16]
    # the kept side's key has mf 1, the other side's mf 5: max(2 * 1, 5) = 5
    assert at(rules.outer_join_stability(Const(1), ONE, Const(5), ONE, False)) == [5] * 4
    # public kept side (S = 0): only the other side changes; it needs no mf of its own key
    assert rules.outer_join_stability(Const(1), ONE, None, ZERO, False) == Const(2.0)
    # public null-extended side: each kept row yields max(1, mf) rows
    assert rules.outer_join_stability(None, ZERO, Const(4), ONE, False) == Const(4.0)
    assert rules.outer_join_stability(None, ZERO, Const(0), ONE, False) == ONE
    assert rules.outer_join_stability(None, ZERO, None, ZERO, False) == ZERO


def test_outer_join_disjoint_is_attained():
    # A change on the null-extended side: u moves from the key it alone matched (1) to an
    # unmatched key (2): (1, u) and (2, None) removed, (1, None) and (2, u') added, per kept
    # row: 2 * mf(a) * S(r2) with mf(a, r1) = 2.
    r1, r2 = [1, 1, 2, 2], [1]
    bound = rules.outer_join_stability(Const(mf(r1)), ONE, Const(mf(r2)), ONE, False).at(0)
    assert changed(left_join(r1, r2), left_join(r1, [2])) == bound == 4
    # the inner join's mf(a) * S(r2) = 2 would be too small
    assert rules.join_disjoint(Const(mf(r1)), ONE, Const(mf(r2)), ONE).at(0) < 4
    # A change on the kept side: an unmatched row becomes one with mf(b, r2) = 3 matches.
    r1, r2 = [1, 2], [2, 2, 2]
    bound = rules.outer_join_stability(Const(mf(r1)), ZERO, Const(mf(r2)), ONE, False).at(0)
    assert changed(left_join(r1, r2), left_join([1, 1], r2)) == bound == 3
    # and an unmatched kept row still removes one row (max(1, mf)): mf(b) = 0 of an empty r2
    assert changed(left_join([1], []), left_join([2], [])) == 1
    assert rules.outer_join_stability(None, ZERO, Const(0), ONE, False).at(0) == 1


def test_outer_join_shared_exact():
    # 2 * (1+k) * 1 + max(1, 2+k) * 1 + 1 * 1
    e = rules.outer_join_stability(PlusK(1), ONE, PlusK(2), ONE, True)
    assert at(e) == [5, 8, 11, 20]
    assert rules.outer_join_stability(PlusK(0), ONE, PlusK(0), ONE, True).at(0) == 2


def test_outer_join_shared_is_attained():
    # one table r(x, y) on both sides, r LEFT JOIN r ON r1.x = r2.y: mf(x) = 1, mf(y) = 2
    r = [(1, 1), (2, 1), (3, 2)]
    after = [(1, 1), (2, 1), (1, 1)]
    on = lambda t, u: t[0] == u[1]  # noqa: E731
    bound = rules.outer_join_stability(Const(mf(r, lambda t: t[0])), ONE,
                                       Const(mf(r, lambda t: t[1])), ONE, True).at(0)
    assert changed(left_join(r, r, on), left_join(after, after, on)) == bound == 5
    # the disjoint form max(2 * 1, 2) = 2 would be too small
    assert rules.outer_join_stability(Const(1), ONE, Const(2), ONE, False).at(0) < 5


def test_outer_join_column_mfs():
    # kept side: mf(c) * max(1, mf of the other key); unknown if either is unknown
    assert at(rules.outer_join_preserved_mf(PlusK(2), Const(3))) == [6, 9, 12, 21]
    assert rules.outer_join_preserved_mf(Const(2), Const(0)) == Const(2.0)
    assert rules.outer_join_preserved_mf(None, Const(3)) is None
    assert rules.outer_join_preserved_mf(Const(2), None) is None
    # the null-extended side: unknown (every unmatched kept row adds a NULL)
    assert rules.outer_join_nullable_mf() is None
    r1, r2 = [1, 2, 3], [(9, 1)]
    rows = left_join(r1, r2, lambda a, b: a == b[1])
    assert Counter(b for _, b in rows)[None] == 2  # more than mf = 1 of r2's columns


def full_join(r1, r2, on=lambda a, b: a == b):
    """r1 FULL JOIN r2: the matched pairs, (a, None) and (None, b) for the unmatched rows."""
    out = left_join(r1, r2, on)
    return out + [(None, b) for b in r2 if not any(on(a, b) for a in r1)]


def test_full_join_disjoint_exact():
    # max((max(1, 3+k) + 3+k) * 1, (max(1, 1+k) + 1+k) * 1) = 2 * (3+k)
    e = rules.full_join_stability(PlusK(3), ONE, PlusK(1), ONE, False)
    assert at(e) == [6, 8, 10, 16]
    # a key whose mf is 0 (an empty side) still yields its one null-extended row per change
    assert rules.full_join_stability(Const(0), ONE, None, ZERO, False) == ONE
    assert rules.full_join_stability(None, ZERO, Const(4), ONE, False) == Const(8.0)
    assert rules.full_join_stability(None, ZERO, None, ZERO, False) == ZERO


def test_full_join_disjoint_is_attained():
    # the r2 row moves from key 1 (matched by two r1 rows) to key 2 (two unmatched r1 rows)
    r1, r2 = [1, 1, 2, 2], [1]
    bound = rules.full_join_stability(Const(mf(r1)), ONE, Const(mf(r2)), ONE, False).at(0)
    assert changed(full_join(r1, r2), full_join(r1, [2])) == bound == 4
    # an unmatched row still counts: mf 1 on both sides, one row moved to an unmatched key
    assert changed(full_join([1], [1]), full_join([2], [1])) == 2
    assert rules.full_join_stability(Const(1), ONE, Const(1), ONE, False).at(0) == 2


def test_full_join_shared_exact():
    # (1+k + 1+k) * 1 + (2+k + 2+k) * 1 + 1
    e = rules.full_join_stability(PlusK(1), ONE, PlusK(2), ONE, True)
    assert at(e) == [7, 11, 15, 27]


def test_full_join_shared_is_attained():
    r = [(1, 1), (2, 3), (3, 2)]  # one table on both sides, ON r1.x = r2.y: mf(x) = mf(y) = 1
    after = [(1, 1), (1, 1), (3, 2)]
    on = lambda t, u: t[0] == u[1]  # noqa: E731
    bound = rules.full_join_stability(Const(1), ONE, Const(1), ONE, True).at(0)
    assert changed(full_join(r, r, on), full_join(after, after, on)) == bound == 5


# ----------------------------------------------------------------------------- grouping


def group_counts(rows):
    return sorted(Counter(rows).items())


def test_group_by_exact():
    assert at(rules.group_by_stability(PlusK(1))) == [2, 4, 6, 12]
    assert rules.group_by_stability(ZERO) == ZERO


def test_group_by_is_attained():
    x, y = [1, 1, 2], [1, 2, 2]  # one row moves from group 1 to group 2
    assert changed(group_counts(x), group_counts(y)) == rules.group_by_stability(ONE).at(0) == 2


def test_group_by_without_aggregate_exact():
    assert rules.group_by_without_aggregate_stability(PlusK(1)) == PlusK(1)


def test_group_by_without_aggregate_is_attained():
    x, y = [1, 2], [3, 2]
    assert changed(sorted(set(x)), sorted(set(y))) == 1
    assert rules.group_by_without_aggregate_stability(ONE).at(0) == 1


def test_group_key_mf_and_scalar_aggregate():
    assert rules.group_key_mf(PlusK(3), 1) == ONE
    assert rules.group_key_mf(PlusK(3), 2) == PlusK(3)
    assert rules.group_key_mf(None, 2) is None
    assert rules.scalar_aggregate_stability(PlusK(3)) == ONE
    assert rules.scalar_aggregate_stability(ZERO) == ZERO


# ----------------------------------------------------------------------------- aggregates


def test_count_exact():
    assert at(rules.count_sensitivity(PlusK(1), False)) == [1, 2, 3, 6]
    assert at(rules.count_sensitivity(PlusK(1), True)) == [2, 4, 6, 12]


def test_count_is_attained():
    assert abs(len([1, 2]) - len([1, 2, 3])) == rules.count_sensitivity(ONE, False).at(0)
    # histogram: one row moves between two bins, L1 change 2
    x, y = Counter([1, 1, 2]), Counter([1, 2, 2])
    l1 = sum(abs(x[b] - y[b]) for b in (1, 2))
    assert l1 == rules.count_sensitivity(ONE, True).at(0) == 2


@pytest.mark.parametrize("bounds, width", [
    ((0.0, 1000.0), 1000), ((-50.0, 10.0), 60), ((2.0, 7.0), 7), ((-30.0, -5.0), 30),
])
def test_sum_exact(bounds, width):
    assert at(rules.sum_sensitivity(PlusK(1), False, bounds)) == [width * (1 + k) for k in KS]
    assert at(rules.sum_sensitivity(PlusK(1), True, bounds)) == [2 * width * (1 + k) for k in KS]


@pytest.mark.parametrize("bounds, before, after", [
    ((-50.0, 10.0), [(-50, True)], [(10, True)]),  # moves from l to u: u - l
    ((2.0, 7.0), [(7, True)], [(7, False)]),  # filtered out: removed, nothing added
    ((-30.0, -5.0), [(-30, True)], [(-30, False)]),
])
def test_sum_is_attained(bounds, before, after):
    total = lambda rows: sum(v for v, keep in rows if keep)  # noqa: E731
    bound = rules.sum_sensitivity(ONE, False, bounds).at(0)
    assert abs(total(before) - total(after)) == bound


# ----------------------------------------------------------------------------- semi-joins


def test_semijoin_exact():
    # disjoint: max(S_outer, min over keys of mf_k * S(sub))
    e = rules.semijoin_stability(ONE, [PlusK(100), PlusK(3)], ONE, False)
    assert at(e) == [3, 4, 5, 8]
    # shared: S_outer + mf_k * S(sub)
    e = rules.semijoin_stability(ONE, [PlusK(3)], ONE, True)
    assert at(e) == [4, 5, 6, 9]
    # a public subquery changes nothing
    assert rules.semijoin_stability(PlusK(1), [PlusK(3)], ZERO, False) == PlusK(1)
    assert rules.semijoin_stability(PlusK(1), [PlusK(3)], ZERO, True) == PlusK(1)


def semi(outer, keys):
    return [r for r in outer if r[0] in set(keys)]


def test_semijoin_disjoint_is_attained():
    outer, sub = [(1, "o")] * 3, [2]  # one changed subquery row flips mf = 3 outer rows
    bound = rules.semijoin_stability(ONE, [Const(3)], ONE, False).at(0)
    assert changed(semi(outer, sub), semi(outer, [1])) == bound == 3


def test_semijoin_shared_is_attained():
    # t(x, y); outer = t WHERE x IN (SELECT y FROM t): one change adds an outer row AND flips
    # mf(x) = 2 others, so S + mf*S = 3, and max(S, mf*S) = 2 would be too small.
    t, u = [(1, 9), (1, 9), (5, 5)], [(1, 9), (1, 9), (1, 1)]
    run = lambda r: semi(r, [y for _, y in r])  # noqa: E731
    bound = rules.semijoin_stability(ONE, [Const(mf(t, lambda r: r[0]))], ONE, True).at(0)
    assert changed(run(t), run(u)) == bound == 3
    assert rules.semijoin_stability(ONE, [Const(2)], ONE, False).at(0) < 3


# ----------------------------------------------------------------------------- UNION ALL


def test_union_all_exact():
    assert at(rules.union_all_stability(ONE, PlusK(1), False)) == [1, 2, 3, 6]
    assert at(rules.union_all_stability(ONE, PlusK(1), True)) == [2, 3, 4, 7]
    assert rules.union_column_mf(PlusK(2), Const(3)) is not None
    assert at(rules.union_column_mf(PlusK(2), Const(3))) == [5, 6, 7, 10]
    assert rules.union_column_mf(None, Const(3)) is None


def test_union_all_is_attained():
    t, u = [1], [2]  # t UNION ALL t: the change hits both branches
    bound = rules.union_all_stability(ONE, ONE, True).at(0)
    assert changed(t + t, u + u) == bound == 2
    assert rules.union_all_stability(ONE, ONE, False).at(0) < 2  # FLEX's max: unsound here
    # disjoint branches: one change alters one branch
    assert changed([*t, 7], [*u, 7]) == rules.union_all_stability(ONE, ONE, False).at(0) == 1
