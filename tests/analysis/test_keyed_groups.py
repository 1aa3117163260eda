"""dpsql.analysis.keyed_groups: a grouped subquery keyed by every private table's join key has
stability 2 (rules.keyed_group_stability), and a subquery's per-group COUNT is a
partition-selected key outside (TPC-H Q13). Exact values at k = 0, 1, 2, 5, and the near misses
that keep the general rule (2·S(input), with the max frequencies) or today's refusal.

The bound is checked on every neighbour of tiny databases in
tests/bruteforce/test_keyed_derived.py (which also shows the near misses break it).
"""

from __future__ import annotations

import pytest

from dpsql.analysis.blocks import BlockQuery, analyze_request
from dpsql.analysis.elastic import analyze
from dpsql.analysis.explain import explain_text
from dpsql.analysis.kexpr import ONE, ZERO, PlusK
from dpsql.analysis.rules import keyed_group_stability
from dpsql.errors import Error, ProtectedBinError, UnsupportedConstructError
from dpsql.metadata import loads_metadata
from tests.units import tiny

KS = (0, 1, 2, 5)

MD = loads_metadata("""
tables:
  customers:
    columns:
      customer_id: {max_freq: 1, type: INTEGER}
      region: {max_freq: 300, type: VARCHAR, releasable: true, domain: {values: [n, s]}}
      score: {max_freq: 10, type: DOUBLE}
      untyped: {max_freq: 1}
  orders:
    columns:
      order_id: {max_freq: 1, type: INTEGER}
      customer_id: {max_freq: 100, type: INTEGER}
      comment: {max_freq: 100, type: VARCHAR}
      cost: {bounds: [0, 50], type: DOUBLE}
      big_customer: {max_freq: 100, type: BIGINT}
      weight: {max_freq: 5, type: DOUBLE}
  products:
    public: true
    columns:
      product_id: {max_freq: 1, type: INTEGER}
      category: {max_freq: 7, type: VARCHAR}
""")

Q13 = ("SELECT c.customer_id, COUNT(o.order_id) AS n FROM customers c LEFT JOIN orders o "
       "ON c.customer_id = o.customer_id AND o.comment NOT LIKE '%special%requests%' "
       "GROUP BY c.customer_id")


def stability(sub: str) -> list[float]:
    """S(k) of the subquery ``sub``: the ES of a scalar COUNT(*) over it."""
    (m,) = analyze(f"SELECT COUNT(*) FROM ({sub}) AS t", MD).measurements
    return [m.sensitivity.at(k) for k in KS]


def test_the_rule_is_a_constant():
    assert keyed_group_stability(ONE).at(0) == 2
    assert keyed_group_stability(PlusK(41.0)).at(7) == 2  # whatever the input's S(k)
    assert keyed_group_stability(ZERO).at(3) == 0  # public rows only


@pytest.mark.parametrize("sub", [
    Q13,
    # inner join, key from either side; a comma join with its key in WHERE
    "SELECT c.customer_id, COUNT(*) FROM customers c JOIN orders o "
    "ON c.customer_id = o.customer_id GROUP BY c.customer_id",
    "SELECT o.customer_id, SUM(o.cost) FROM customers c JOIN orders o "
    "ON c.customer_id = o.customer_id GROUP BY o.customer_id",
    "SELECT o.customer_id, COUNT(*) FROM customers c, orders o "
    "WHERE o.customer_id = c.customer_id AND o.cost > 3 GROUP BY o.customer_id",
    # a self-join on the key; integers of different widths compare stored values
    "SELECT o1.customer_id, COUNT(*) FROM orders o1 JOIN orders o2 "
    "ON o1.customer_id = o2.customer_id GROUP BY o1.customer_id",
    "SELECT c.customer_id, COUNT(o.order_id) FROM customers c LEFT JOIN orders o "
    "ON c.customer_id = o.big_customer GROUP BY c.customer_id",
    # a public table joined on anything; a WHERE on the null-extended side; HAVING
    "SELECT c.customer_id, COUNT(o.order_id) FROM customers c LEFT JOIN orders o "
    "ON c.customer_id = o.customer_id JOIN products p ON o.order_id = p.product_id "
    "GROUP BY c.customer_id",
    "SELECT c.customer_id, COUNT(*) FROM customers c LEFT JOIN orders o "
    "ON c.customer_id = o.customer_id WHERE o.cost IS NULL OR o.cost < 3 "
    "GROUP BY c.customer_id HAVING COUNT(*) > 1",
    # two LEFT JOINs, the second on the key through the first
    "SELECT c.customer_id, COUNT(o2.order_id) FROM customers c LEFT JOIN orders o1 "
    "ON c.customer_id = o1.customer_id LEFT JOIN orders o2 "
    "ON c.customer_id = o2.customer_id AND o2.cost > o1.cost GROUP BY c.customer_id",
])
def test_the_keyed_shape_has_stability_two(sub):
    assert stability(sub) == [2, 2, 2, 2]


def test_q13_is_a_partition_selected_histogram_at_s_two():
    analysis = analyze(f"SELECT t.n, COUNT(*) AS custdist FROM ({Q13}) AS t GROUP BY t.n "
                       "ORDER BY custdist DESC, t.n DESC", MD)
    assert analysis.selection_stability == 2
    (key,) = analysis.group_keys
    assert key.partition and key.type == "BIGINT"
    (m,) = analysis.measurements
    assert [m.sensitivity.at(k) for k in KS] == [4, 4, 4, 4]
    text = explain_text(f"SELECT t.n, COUNT(*) FROM ({Q13}) AS t GROUP BY t.n", MD,
                        epsilon=1.0, delta=1e-6)
    assert "GROUP BY the join key: 2" in text and "stability S = 2" in text


def test_a_count_of_one_private_table_is_selected_without_the_shape():
    # one private table: the general rule's 2·S is already the constant 2
    analysis = analyze("SELECT t.n, COUNT(*) FROM (SELECT customer_id, COUNT(*) AS n "
                       "FROM orders GROUP BY customer_id) t GROUP BY t.n", MD)
    assert analysis.selection_stability == 2


GENERAL_LEFT = [200, 202, 204, 210]  # 2·S of the LEFT JOIN: 2·max(2·(1+k), 100+k)


@pytest.mark.parametrize(("sub", "expected"), [
    # grouped by the key and another column
    ("SELECT c.customer_id, c.region, COUNT(o.order_id) FROM customers c LEFT JOIN orders o "
     "ON c.customer_id = o.customer_id GROUP BY c.customer_id, c.region", GENERAL_LEFT),
    # a private table joined on a different key: 2·max(1·1, (1+k)·1)
    ("SELECT o.customer_id, COUNT(*) FROM orders o JOIN customers c "
     "ON o.order_id = c.customer_id GROUP BY o.customer_id", [2, 4, 6, 12]),
    # the key from the null-extended side (its NULL group takes the unmatched rows)
    ("SELECT o.customer_id, COUNT(*) FROM customers c LEFT JOIN orders o "
     "ON c.customer_id = o.customer_id GROUP BY o.customer_id", GENERAL_LEFT),
    # RIGHT JOIN (not in the shape), a subquery in WHERE (not row-local)
    ("SELECT c.customer_id, COUNT(*) FROM orders o RIGHT JOIN customers c "
     "ON c.customer_id = o.customer_id GROUP BY c.customer_id", GENERAL_LEFT),
    ("SELECT c.customer_id, COUNT(*) FROM customers c JOIN orders o "
     "ON c.customer_id = o.customer_id WHERE o.order_id IN (SELECT product_id FROM products) "
     "GROUP BY c.customer_id", [200, 202, 204, 210]),
    # a key of a type whose equality is not the stored value's (-0.0 = 0.0): 2·max(5, 10+k)
    ("SELECT c.score, COUNT(*) FROM customers c JOIN orders o ON c.score = o.weight "
     "GROUP BY c.score", [20, 22, 24, 30]),
])
def test_near_misses_keep_the_general_rule(sub, expected):
    assert stability(sub) == expected


@pytest.mark.parametrize("sub", [
    # the key equality only inside an OR; a key of unknown type: refused before the shape
    "SELECT c.customer_id, COUNT(*) FROM customers c JOIN orders o "
    "ON c.customer_id = o.customer_id OR c.customer_id = o.order_id GROUP BY c.customer_id",
    "SELECT c.untyped, COUNT(*) FROM customers c JOIN orders o ON c.untyped = o.order_id "
    "GROUP BY c.untyped",
    # correlated with the enclosing query
    "SELECT c.customer_id, COUNT(*) FROM customers c JOIN orders o "
    "ON c.customer_id = o.customer_id WHERE o.cost > t2.cost GROUP BY c.customer_id",
])
def test_near_misses_refused_as_before(sub):
    with pytest.raises(Error):
        stability(sub)


@pytest.mark.parametrize("sub", [
    "SELECT c.customer_id, c.region, COUNT(o.order_id) AS n FROM customers c LEFT JOIN "
    "orders o ON c.customer_id = o.customer_id GROUP BY c.customer_id, c.region",
    "SELECT o.customer_id, COUNT(*) AS n FROM orders o JOIN customers c "
    "ON o.order_id = c.customer_id GROUP BY o.customer_id",
])
def test_a_count_outside_the_shape_is_refused_as_a_key(sub):
    with pytest.raises(ProtectedBinError, match=r"COUNT computed in a subquery.*one key"):
        analyze(f"SELECT t.n, COUNT(*) FROM ({sub}) t GROUP BY t.n", MD)


@pytest.mark.parametrize(("sql", "words"), [
    # a SUM (or any other value) of a subquery is not a count: no domain, refused as before
    ("SELECT t.s, COUNT(*) FROM (SELECT c.customer_id, SUM(o.cost) AS s FROM customers c "
     "JOIN orders o ON c.customer_id = o.customer_id GROUP BY c.customer_id) t GROUP BY t.s",
     "no declared or derivable domain"),
    # a count key computed on outside is not the count itself
    (f"SELECT t.n + 1, COUNT(*) FROM ({Q13}) t GROUP BY 1", "derivable"),
])
def test_other_subquery_values_stay_refused(sql, words):
    with pytest.raises(ProtectedBinError, match=words):
        analyze(sql, MD)


def test_the_outer_sum_of_a_count_needs_bounds():
    with pytest.raises(Exception, match="no bounds") as err:
        analyze(f"SELECT SUM(t.n) FROM ({Q13}) t", MD)
    # what has bounds there: a clamped count
    assert "only as a clamped count, LEAST(COUNT(..), n): [0, n]" in str(err.value)


def test_under_a_privacy_unit_the_unit_rule_answers_not_this_one():
    # grouped by the unit id: one row per unit (dpsql.units.derived, tests/units/test_derived.py)
    md = tiny.metadata()
    analysis = analyze_request("SELECT t.n, COUNT(*) FROM (SELECT c.c_id, COUNT(o.o_id) AS n "
                               "FROM customer c LEFT JOIN orders o ON c.c_id = o.o_cust GROUP BY "
                               "c.c_id) t GROUP BY t.n", md)
    assert analysis.unit is not None and analysis.unit.derived is not None
    assert [m.sensitivity.at(0) for m in analysis.measurements] == [1.0]
    # this rule's shape grouped by another key than the unit's is refused under the unit
    with pytest.raises(UnsupportedConstructError, match="under a privacy unit"):
        analyze_request("SELECT t.n, COUNT(*) FROM (SELECT o.o_id, COUNT(*) AS n FROM "
                        "orders o GROUP BY o.o_id) t GROUP BY t.n", md)


CLAMPED = Q13.replace("COUNT(o.order_id) AS n", "LEAST(COUNT(o.order_id), 5) AS n")


def test_a_clamped_count_has_the_bins_and_bounds_zero_to_n():
    analysis = analyze(f"SELECT t.n, COUNT(*) FROM ({CLAMPED}) t GROUP BY t.n", MD)
    assert not analysis.partition_selection  # a declared-domain histogram: no delta
    (key,) = analysis.group_keys
    assert key.derived_domain is not None
    assert key.derived_domain.values.values == (0, 1, 2, 3, 4, 5)
    assert [m.sensitivity.at(k) for m in analysis.measurements for k in KS] == [4] * 4
    summed = analyze(f"SELECT SUM(t.n), AVG(t.n) FROM ({CLAMPED}) t", MD)
    assert [(m.function, m.sensitivity.at(3), m.bounds) for m in summed.measurements] == [
        ("SUM", 10, (0, 5)), ("COUNT", 2, None)]


@pytest.mark.parametrize("value", [
    "LEAST(COUNT(o.order_id), -1)", "LEAST(COUNT(o.order_id), 1000001)",
    "LEAST(COUNT(o.order_id), 2.5)", "LEAST(SUM(o.cost), 5)",
    "LEAST(COUNT(o.order_id), 5, 6)", "LEAST(COUNT(o.order_id), ?)",
])
def test_other_clamps_give_no_bins(value):
    sub = Q13.replace("COUNT(o.order_id) AS n", f"{value} AS n")
    with pytest.raises(Error):
        analyze(f"SELECT t.n, COUNT(*) FROM ({sub}) t GROUP BY t.n", MD)


def test_a_histogram_over_a_block_count_stays_post_processing_when_the_block_can_answer():
    """The count key would cover this as one release by partition selection (it would need
    delta); the block's key has a declared domain, so the block answers it (pure epsilon,
    empty bins kept) and the outer histogram is post-processing of its noisy counts, as before
    the count key (dpsql.analysis.blocks: declared domains have priority, issue #16)."""
    request = analyze_request("SELECT t.n, COUNT(*) FROM (SELECT c.region, COUNT(*) AS n "
                              "FROM customers c GROUP BY c.region) t GROUP BY t.n", MD)
    assert isinstance(request, BlockQuery)
    assert len(request.blocks) == 1
