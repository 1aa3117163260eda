"""LEFT / RIGHT / FULL JOIN in the analyzer (dpsql.analysis.outer_joins): exact ES,
which side keeps its max frequencies, key-type checks, and the refusals around outer joins.

The rule itself is tested in tests/analysis/test_rules.py (exact and attained) and by brute
force in tests/bruteforce/test_outer_joins.py. Values are worked out by hand at k = 0, 1, 2, 5:
mf_k of a private column is mf + k, of a public one mf.
"""

from __future__ import annotations

import pytest

from dpsql.analysis.elastic import analyze
from dpsql.analysis.explain import explain_text
from dpsql.errors import MissingMetricError, ProtectedBinError, UnsupportedConstructError
from dpsql.metadata import loads_metadata

KS = (0, 1, 2, 5)

MD = loads_metadata("""
tables:
  customers:
    columns:
      customer_id: {max_freq: 1, type: INTEGER}
      region: {max_freq: 300, type: VARCHAR, releasable: true,
               domain: {values: [n, s]}}
      code: {max_freq: 1, type: VARCHAR}
  orders:
    columns:
      order_id: {max_freq: 1, type: INTEGER}
      customer_id: {max_freq: 100, type: INTEGER}
      status: {max_freq: 5000, type: VARCHAR, releasable: true,
               domain: {values: [new, shipped]}}
      cost: {bounds: [0, 50], type: DOUBLE}
  products:
    public: true
    columns:
      product_id: {max_freq: 1, type: INTEGER}
      category: {max_freq: 7, type: VARCHAR}
""")


def es(sql: str) -> list[float]:
    (m,) = analyze(sql, MD).measurements
    return [m.sensitivity.at(k) for k in KS]


def test_left_join_exact():
    # customers kept: max(2 * mf(c.customer_id) * S(orders), max(1, mf(o.customer_id)) * S(c))
    # = max(2 * (1+k), 100+k)
    assert es("SELECT COUNT(*) FROM customers c LEFT JOIN orders o "
              "ON c.customer_id = o.customer_id") == [100, 101, 102, 105]
    # orders kept: max(2 * (100+k), max(1, 1+k)) = 2 * (100+k)
    assert es("SELECT COUNT(*) FROM orders o LEFT JOIN customers c "
              "ON o.customer_id = c.customer_id") == [200, 202, 204, 210]


def test_right_join_is_the_mirror_image():
    left = es("SELECT COUNT(*) FROM orders o LEFT JOIN customers c "
              "ON o.customer_id = c.customer_id")
    assert es("SELECT COUNT(*) FROM customers c RIGHT JOIN orders o "
              "ON o.customer_id = c.customer_id") == left


def test_full_join_exact():
    # max((max(1, 1+k) + 1+k) * S(orders), (max(1, 100+k) + 100+k) * S(customers))
    want = [200, 202, 204, 210]
    assert es("SELECT COUNT(*) FROM customers c FULL OUTER JOIN orders o "
              "ON c.customer_id = o.customer_id") == want
    assert es("SELECT COUNT(*) FROM orders o FULL JOIN customers c "
              "ON c.customer_id = o.customer_id") == want
    # shared ancestor: (1+k + 1+k) + (100+k + 100+k) + 1
    assert es("SELECT COUNT(*) FROM orders o1 FULL JOIN orders o2 "
              "ON o1.order_id = o2.customer_id") == [203, 207, 211, 223]


def test_full_join_columns_of_both_sides_lose_their_max_frequency():
    for col in ("c.customer_id", "o.customer_id"):
        with pytest.raises(MissingMetricError, match="null-extended side of an outer join"):
            analyze("SELECT COUNT(*) FROM customers c FULL JOIN orders o "
                    f"ON c.customer_id = o.customer_id JOIN customers c2 "
                    f"ON {col} = c2.customer_id", MD)
    # against a public table no mf of theirs is read: S = 2 * (100+k) times mf(p) = 1
    assert es("SELECT COUNT(*) FROM customers c FULL JOIN orders o "
              "ON c.customer_id = o.customer_id JOIN products p "
              "ON o.customer_id = p.product_id") == [200, 202, 204, 210]


def test_self_left_join_exact():
    # shared ancestor: 2 * mf(o1.customer_id) * 1 + max(1, mf(o2.order_id)) * 1 + 1 * 1
    # = 2 * (100+k) + (1+k) + 1
    assert es("SELECT COUNT(*) FROM orders o1 LEFT JOIN orders o2 "
              "ON o1.customer_id = o2.order_id") == [202, 205, 208, 217]


def test_public_kept_side_is_a_pure_release():
    # products kept (S = 0): 2 * mf(p.product_id) * S(orders) = 2, whatever k
    (m,) = analyze("SELECT COUNT(o.order_id) FROM products p LEFT JOIN orders o "
                   "ON p.product_id = o.order_id", MD).measurements
    assert [m.sensitivity.at(k) for k in KS] == [2, 2, 2, 2]
    assert not m.sensitivity.depends_on_k


def test_several_conjuncts_take_the_smallest_mf_on_each_side():
    # kept keys o.customer_id (100+k), o.order_id (1+k): 1+k; other side c.customer_id (1+k),
    # c.customer_id again: 1+k -> max(2 * (1+k), 1+k)
    assert es("SELECT COUNT(*) FROM orders o LEFT JOIN customers c "
              "ON o.customer_id = c.customer_id AND o.order_id = c.customer_id") == [2, 4, 6, 12]


def test_kept_side_columns_keep_mf_times_the_other_key():
    # t.cid = o.customer_id after the LEFT JOIN: mf (100+k) * max(1, mf(c.customer_id) = 1+k)
    analysis = analyze("SELECT COUNT(*) FROM (SELECT o.customer_id AS cid FROM orders o "
                       "LEFT JOIN customers c ON o.customer_id = c.customer_id) t "
                       "JOIN products p ON t.cid = p.product_id", MD)
    assert "t.cid: ((100+k) * (1+k))" in analysis.max_frequencies_used
    # S(t) = max(2 * (100+k), 1+k); the public join multiplies it by mf(p.product_id) = 1
    (m,) = analysis.measurements
    assert [m.sensitivity.at(k) for k in KS] == [200, 202, 204, 210]


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM (SELECT c.customer_id AS cid FROM orders o LEFT JOIN customers c "
    "ON o.customer_id = c.customer_id) t JOIN customers c2 ON t.cid = c2.customer_id",
    "SELECT COUNT(*) FROM customers c RIGHT JOIN orders o ON o.customer_id = c.customer_id "
    "JOIN customers c2 ON c.customer_id = c2.customer_id",
    "SELECT COUNT(*) FROM orders o LEFT JOIN customers c ON o.customer_id = c.customer_id "
    "WHERE c.customer_id IN (SELECT o2.customer_id FROM orders o2)",
])
def test_null_extended_columns_lose_their_max_frequency(sql: str):
    with pytest.raises(MissingMetricError, match="null-extended side of an outer join"):
        analyze(sql, MD)


def test_a_left_join_chained_through_the_null_extended_side_is_refused():
    # the second LEFT JOIN's kept key o.customer_id is NULL in unmatched customers' rows
    with pytest.raises(MissingMetricError, match="earlier outer join"):
        analyze("SELECT COUNT(*) FROM customers c LEFT JOIN orders o "
                "ON c.customer_id = o.customer_id LEFT JOIN customers c2 "
                "ON o.customer_id = c2.customer_id", MD)


def test_null_extended_key_may_join_a_public_table():
    # no mf of the null-extended key is needed when the other side never changes:
    # S(o LEFT JOIN c) = 2 * (100+k); then mf(p.product_id) * that
    assert es("SELECT COUNT(*) FROM orders o LEFT JOIN customers c "
              "ON o.customer_id = c.customer_id JOIN products p "
              "ON c.customer_id = p.product_id") == [200, 202, 204, 210]


def test_key_types_are_checked():
    with pytest.raises(MissingMetricError, match="different types"):
        analyze("SELECT COUNT(*) FROM customers c LEFT JOIN orders o ON c.code = o.customer_id",
                MD)
    # also when the kept side is public: the equality still decides which rows match
    with pytest.raises(MissingMetricError, match="different types"):
        analyze("SELECT COUNT(*) FROM products p LEFT JOIN orders o ON p.category = o.order_id",
                MD)


def test_keys_come_from_on_not_where():
    with pytest.raises(UnsupportedConstructError, match="no equality between columns"):
        analyze("SELECT COUNT(*) FROM customers c LEFT JOIN orders o ON o.cost > 1 "
                "WHERE c.customer_id = o.customer_id", MD)


def test_on_may_not_read_a_later_table():
    with pytest.raises(UnsupportedConstructError, match="join order"):
        # p links to nothing yet, so it is joined after c, whose ON reads it
        analyze("SELECT COUNT(*) FROM orders o, products p LEFT JOIN customers c "
                "ON c.customer_id = p.product_id WHERE o.customer_id = c.customer_id", MD)


@pytest.mark.parametrize(("sql", "words"), [
    ("SELECT COUNT(*) FROM customers c ASOF LEFT JOIN orders o "
     "ON c.customer_id >= o.customer_id", "ASOF LEFT JOIN is not supported"),
    ("SELECT COUNT(*) FROM customers c LEFT SEMI JOIN orders o "
     "ON c.customer_id = o.customer_id", "LEFT SEMI JOIN is not supported"),
    ("SELECT COUNT(*) FROM customers c LEFT JOIN orders o ON c.customer_id < o.customer_id",
     "non-equijoins have no sensitivity rule"),
])
def test_refusals_name_the_construct(sql: str, words: str):
    with pytest.raises(UnsupportedConstructError, match=words):
        analyze(sql, MD)


def test_group_by_a_derived_count_is_partition_selected():
    # TPC-H Q13's shape: grouped by the key both tables are joined on, the per-customer count
    # (zeros included) has the keyed rule's constant S = 2 (tests/analysis/test_keyed_groups.py)
    # instead of 2 * max(2 * (1+k), 100+k); WHERE keeps it
    inner = ("SELECT c.customer_id, COUNT(o.order_id) AS n FROM customers c LEFT JOIN orders o "
             "ON c.customer_id = o.customer_id GROUP BY c.customer_id")
    assert es(f"SELECT COUNT(*) FROM ({inner}) t WHERE t.n = 0") == [2, 2, 2, 2]
    # grouping by the count takes its groups by partition selection at S = 2
    analysis = analyze(f"SELECT t.n, COUNT(*) FROM ({inner}) t GROUP BY t.n", MD)
    assert analysis.selection_stability == 2
    # grouped by the key and another column: the general rule, and the count is refused
    two = inner.replace("GROUP BY c.customer_id", "GROUP BY c.customer_id, c.region")
    assert es(f"SELECT COUNT(*) FROM ({two}) t WHERE t.n = 0") == [
        2 * max(2 * (1 + k), 100 + k) for k in KS]
    with pytest.raises(ProtectedBinError, match=r"GROUP BY t\.n"):
        analyze(f"SELECT t.n, COUNT(*) FROM ({two}) t GROUP BY t.n", MD)


def test_explain_names_the_rule():
    text = explain_text("SELECT COUNT(*) FROM customers c LEFT JOIN orders o "
                        "ON c.customer_id = o.customer_id", MD, epsilon=1.0, delta=1e-6)
    assert "LEFT JOIN o" in text
    assert "max(2*mf(kept key)*S(other), max(1, mf(other key))*S(kept))" in text
