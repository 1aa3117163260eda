"""Exact elastic sensitivities, rule by rule (docs/privacy.md section 2).

Every expected value is worked out by hand in the comment next to it, at k = 0, 1, 2, 5.
mf_k of a private column is mf + k; of a public column mf. S is a relation's stability.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from sqlglot import exp

from dpsql.analysis.elastic import Measurement, analyze
from dpsql.analysis.kexpr import Const, PlusK
from dpsql.budget import Budget
from dpsql.errors import (
    AggregateArithmeticError,
    MissingMetricError,
    UnsupportedConstructError,
)
from dpsql.metadata import Column, Domain, Metadata, Table, load_metadata
from dpsql.noise.plan import plan_noise
from tests.typed_metadata import typed

ROOT = Path(__file__).resolve().parents[2]


# FLEX's schema declares no types (its format has none); a real database would say INTEGER.
FLEX = typed(load_metadata(ROOT / "schemas" / "flex_test.yaml"))
KS = (0, 1, 2, 5)

# FLEX's test schema (the FLEX paper's worked examples) plus bounds, domains and a public table with
# more than one row per value, to reach every rule with round numbers.
MD = typed(Metadata(tables={
    "orders": Table("orders", {
        "order_id": Column("order_id", 1),
        "customer_id": Column("customer_id", 100),
        "product_id": Column("product_id", 500, releasable=True,
                             domain=Domain(table="products", column="product_id")),
        "quantity": Column("quantity", 20, releasable=True,
                           domain=Domain(values=(1, 2, 3, 4, 5))),
        "order_cost": Column("order_cost", None, bounds=(0.0, 1000.0)),
        "discount": Column("discount", None, bounds=(-50.0, 10.0)),
        "weight": Column("weight", None, bounds=(2.0, 7.0)),
        "refund": Column("refund", None, bounds=(-30.0, -5.0)),
        "note": Column("note"),
    }),
    "customers": Table("customers", {
        "customer_id": Column("customer_id", 1),
        "region": Column("region", 300, releasable=True,
                         domain=Domain(values=("n", "s", "e", "w"))),
        "address": Column("address", 5),
        "age": Column("age", None, bounds=(18.0, 90.0)),
    }),
    "recommendations": Table("recommendations", {
        "customer_id": Column("customer_id", 250),
        "product_id": Column("product_id", 2000),
    }),
    "products": Table("products", {
        "product_id": Column("product_id", 1),
        "category": Column("category", 7),
        "price": Column("price", None, bounds=(0.0, 100.0)),
        "supplier": Column("supplier"),
    }, public=True),
}))

JOIN_OR = ("FROM orders o JOIN recommendations r ON o.customer_id = r.customer_id")


def es(sql: str, md: Metadata = MD, index: int = 0) -> list[float]:
    """ES(k) of measurement ``index`` at k = 0, 1, 2, 5."""
    return [analyze(sql, md).measurements[index].sensitivity.at(k) for k in KS]


def only(sql: str, md: Metadata = MD) -> Measurement:
    ms = analyze(sql, md).measurements
    assert len(ms) == 1
    return ms[0]


# ----------------------------------------------------------------------------- base tables


def test_private_table():
    # S(private table) = 1 at every k; COUNT's ES = S; it does not depend on k (pure release)
    m = only("SELECT COUNT(*) FROM orders")
    assert [m.sensitivity.at(k) for k in KS] == [1, 1, 1, 1]
    assert not m.sensitivity.depends_on_k
    assert m.function == "COUNT"


def test_public_table():
    # S(public table) = 0: nothing an analyst cannot already see
    assert es("SELECT COUNT(*) FROM products") == [0, 0, 0, 0]
    # public ⋈ public: max(mf(a)*0, mf(b)*0) = 0
    assert es("SELECT COUNT(*) FROM products p1 JOIN products p2 "
              "ON p1.category = p2.category") == [0, 0, 0, 0]


def test_filters_and_projections_keep_stability():
    # WHERE and a projection leave S = 1 (ORDER BY in a subquery is rejected: test_hygiene.py)
    assert es("SELECT COUNT(*) FROM (SELECT customer_id FROM orders WHERE quantity > 2) t"
              ) == [1, 1, 1, 1]
    # ... and keep mf: t.customer_id still has mf_k = 100+k, so t ⋈ r is the worked example
    assert es("SELECT COUNT(*) FROM (SELECT o.customer_id FROM orders o WHERE o.quantity > 2) t "
              "JOIN recommendations r ON t.customer_id = r.customer_id") == [250, 251, 252, 255]


def test_schema_prefix_names_the_same_table():
    # public.orders / main.orders is orders: the self-join is detected (201 at 0, see below)
    assert es("SELECT COUNT(*) FROM main.orders o1 JOIN orders o2 "
              "ON o1.customer_id = o2.customer_id", FLEX) == [201, 203, 205, 211]


# ----------------------------------------------------------------------------- derived columns


@pytest.mark.parametrize("sql", [
    # a computed column in a derived table has mf = infinity
    "SELECT COUNT(*) FROM (SELECT customer_id + 0 AS c FROM orders) t "
    "JOIN customers cu ON t.c = cu.customer_id",
    # a computed join key in ON
    "SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer_id + 1 = c.customer_id",
    "SELECT COUNT(*) FROM orders o JOIN customers c ON CAST(o.customer_id AS INT) = c.customer_id",
    # a declared column without max_freq
    "SELECT COUNT(*) FROM orders o JOIN customers c ON o.note = c.customer_id",
    # an aggregate output of a subquery used as a join key
    "SELECT COUNT(*) FROM orders o JOIN (SELECT COUNT(*) AS n FROM customers) t "
    "ON t.n = o.customer_id",
    # IN / EXISTS keys too
    "SELECT COUNT(*) FROM orders o WHERE o.customer_id + 1 IN (SELECT customer_id FROM customers)",
    "SELECT COUNT(*) FROM orders o WHERE o.note IN (SELECT customer_id FROM customers)",
    "SELECT COUNT(*) FROM orders o WHERE EXISTS "
    "(SELECT 1 FROM customers c WHERE c.customer_id = o.note)",
])
def test_derived_or_unmetered_keys_are_missing_metrics(sql):
    with pytest.raises(MissingMetricError):
        analyze(sql, MD)


def test_public_side_key_may_lack_mf_when_the_other_side_is_public():
    # o ⋈ p ON o.note = p.product_id: the private key's mf is never needed, because the public
    # side never changes: S = max(mf(o.note)*S(p) = ?*0 -> 0, mf(p.product_id)*S(o) = 1*1) = 1
    assert es("SELECT COUNT(*) FROM orders o JOIN products p "
              "ON o.note = p.product_id") == [1, 1, 1, 1]
    # ... but the public key's mf is: o ⋈ p ON o.product_id = p.supplier (no mf) is rejected
    with pytest.raises(MissingMetricError, match="supplier"):
        analyze("SELECT COUNT(*) FROM orders o JOIN products p ON o.product_id = p.supplier", MD)


# ----------------------------------------------------------------------------- inner equijoins


def test_worked_example_join():
    # FLEX's worked example: max(mf_k(o.cid)*S(r), mf_k(r.cid)*S(o)) = max(100+k, 250+k) = 250+k
    assert es("SELECT COUNT(*) FROM orders JOIN recommendations "
              "ON orders.customer_id = recommendations.customer_id", FLEX) == [250, 251, 252, 255]
    m = only("SELECT COUNT(*) " + JOIN_OR, FLEX)
    assert m.sensitivity.depends_on_k and m.sensitivity.degree == 1


def test_worked_example_self_join():
    # FLEX's worked example: (100+k)*1 + (100+k)*1 + 1*1 = 201+2k
    assert es("SELECT COUNT(*) FROM orders o1 JOIN orders o2 "
              "ON o1.customer_id = o2.customer_id", FLEX) == [201, 203, 205, 211]


def test_comma_join_with_where_equality():
    # FROM a, b WHERE a.x = b.y is the equijoin: max(100+k, 250+k) = 250+k
    assert es("SELECT COUNT(*) FROM orders o, recommendations r "
              "WHERE o.customer_id = r.customer_id AND o.quantity > 1") == [250, 251, 252, 255]
    # the equality may be written the other way round
    assert es("SELECT COUNT(*) FROM orders o, recommendations r "
              "WHERE r.customer_id = o.customer_id") == [250, 251, 252, 255]


def test_min_over_equi_conjuncts():
    # customer_id: max(100+k, 250+k) = 250+k; product_id: max(500+k, 2000+k) = 2000+k;
    # min = 250+k
    assert es("SELECT COUNT(*) FROM orders o JOIN recommendations r "
              "ON o.product_id = r.product_id AND o.customer_id = r.customer_id"
              ) == [250, 251, 252, 255]
    # with customers: customer_id: max(100+k, 1+k) = 100+k; address/order_id: max(1+k, 5+k)
    # = 5+k; min = 5+k
    assert es("SELECT COUNT(*) FROM orders o JOIN customers c "
              "ON o.customer_id = c.customer_id AND o.order_id = c.address") == [5, 6, 7, 10]


def test_nested_and_is_flattened():
    # ((a AND (b AND filter))): both equalities are conjuncts, as above: min(100+k, 5+k) = 5+k
    assert es("SELECT COUNT(*) FROM orders o JOIN customers c ON (o.customer_id = c.customer_id "
              "AND (o.order_id = c.address AND o.quantity > 1))") == [5, 6, 7, 10]
    # the same through WHERE of a comma join
    assert es("SELECT COUNT(*) FROM orders o, customers c WHERE ((o.customer_id = c.customer_id) "
              "AND (o.quantity > 1 AND (o.order_id = c.address)))") == [5, 6, 7, 10]


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM orders o, customers c "
    "WHERE o.customer_id = c.customer_id OR o.order_id = c.address",
    "SELECT COUNT(*) FROM orders o JOIN customers c "
    "ON o.customer_id = c.customer_id OR o.order_id = c.address",
    "SELECT COUNT(*) FROM orders o, customers c WHERE (o.customer_id = c.customer_id OR FALSE)",
])
def test_or_is_not_pushed_into_the_join(sql):
    with pytest.raises(UnsupportedConstructError):
        analyze(sql, MD)


def test_public_table_join_is_a_global_sensitivity():
    # o ⋈ p ON product_id: max(mf(o.pid)*S(p) = 0, mf(p.pid)*S(o) = 1*1) = 1, constant in k
    m = only("SELECT COUNT(*) FROM orders o JOIN products p ON o.product_id = p.product_id")
    assert [m.sensitivity.at(k) for k in KS] == [1, 1, 1, 1]
    assert not m.sensitivity.depends_on_k
    # ON a key with public mf 7: one private row matches <= 7 product rows: 7, pure
    m = only("SELECT COUNT(*) FROM orders o JOIN products p ON o.quantity = p.category")
    assert [m.sensitivity.at(k) for k in KS] == [7, 7, 7, 7]
    assert not m.sensitivity.depends_on_k
    plan = plan_noise(analyze("SELECT COUNT(*) FROM orders o JOIN products p "
                              "ON o.quantity = p.category", MD), Budget(0.5, 1e-6))[0]
    assert plan.pure and plan.delta == 0 and plan.scale == pytest.approx(7 / 0.5, rel=1e-12)


def test_three_way_join():
    # J1 = o ⋈ r: S = max(100+k, 250+k) = 250+k; o.customer_id in J1 has mf (100+k)*(250+k).
    # J1 ⋈ c (disjoint): max(mf(o.cid, J1)*S(c), mf(c.cid)*S(J1))
    #   = max((100+k)(250+k), (1+k)(250+k)) = (100+k)(250+k)
    #   k=0: 100*250 = 25000; k=1: 101*251 = 25351; k=2: 102*252 = 25704; k=5: 105*255 = 26775
    sql = ("SELECT COUNT(*) " + JOIN_OR + " JOIN customers c ON c.customer_id = o.customer_id")
    assert es(sql) == [25000, 25351, 25704, 26775]
    assert only(sql).sensitivity.degree == 2
    # The same as a comma join with the tables listed out of join order: c has no equality
    # with o, so r joins first: J1 = o ⋈ r (250+k; r.customer_id in J1: (250+k)(100+k)), then
    # J1 ⋈ c on r.customer_id = c.customer_id: max((250+k)(100+k)*1, (1+k)(250+k)), as above.
    assert es("SELECT COUNT(*) FROM orders o, customers c, recommendations r "
              "WHERE o.customer_id = r.customer_id AND c.customer_id = r.customer_id"
              ) == [25000, 25351, 25704, 26775]


def test_three_way_join_with_a_self_join():
    # J1 = o1 ⋈ r: S = 250+k; r.customer_id in J1: (250+k)(100+k).
    # J1 ⋈ o2 shares orders: mf(r.cid, J1)*S(o2) + mf(o2.cid)*S(J1) + S(J1)*S(o2)
    #   = (250+k)(100+k) + (100+k)(250+k) + (250+k)
    #   k=0: 25000+25000+250 = 50250; k=1: 2*25351+251 = 50953; k=2: 2*25704+252 = 51660;
    #   k=5: 2*26775+255 = 53805
    assert es("SELECT COUNT(*) FROM orders o1 JOIN recommendations r "
              "ON o1.customer_id = r.customer_id JOIN orders o2 "
              "ON o2.customer_id = r.customer_id") == [50250, 50953, 51660, 53805]


def test_self_join_through_a_cte_used_twice():
    # the CTE's ancestor is orders on both sides: (100+k) + (100+k) + 1*1
    assert es("WITH t AS (SELECT customer_id FROM orders WHERE quantity > 1) "
              "SELECT COUNT(*) FROM t a JOIN t b ON a.customer_id = b.customer_id"
              ) == [201, 203, 205, 211]


def test_self_join_through_a_derived_table():
    # (SELECT ... FROM orders) t ⋈ orders: shared ancestor, same 201+2k
    assert es("SELECT COUNT(*) FROM (SELECT o.customer_id FROM orders o WHERE o.quantity < 3) t "
              "JOIN orders o2 ON t.customer_id = o2.customer_id") == [201, 203, 205, 211]


def test_self_join_through_nested_ctes():
    # u is built from t which is built from orders; u ⋈ orders shares orders: 201+2k
    assert es("WITH t AS (SELECT customer_id FROM orders), u AS (SELECT customer_id FROM t) "
              "SELECT COUNT(*) FROM u JOIN orders o ON u.customer_id = o.customer_id"
              ) == [201, 203, 205, 211]


def test_disjoint_ctes_are_not_a_self_join():
    # t from orders, u from recommendations: the plain join rule, 250+k
    assert es("WITH t AS (SELECT customer_id FROM orders), "
              "u AS (SELECT customer_id FROM recommendations) "
              "SELECT COUNT(*) FROM t JOIN u ON t.customer_id = u.customer_id"
              ) == [250, 251, 252, 255]


# ----------------------------------------------------------------------------- GROUP BY


def test_histogram_doubles_at_the_top():
    # one changed row moves between two bins: 2 * S = 2
    a = analyze("SELECT product_id, COUNT(*) AS n FROM orders GROUP BY product_id", MD)
    assert [a.measurements[0].sensitivity.at(k) for k in KS] == [2, 2, 2, 2]
    assert [k.name for k in a.group_keys] == ["product_id"]
    assert a.group_keys[0].domain == Domain(table="products", column="product_id")
    assert [(c.name, c.kind) for c in a.columns] == [("product_id", "group_key"),
                                                     ("n", "aggregate")]
    # over the worked join: 2 * (250+k)
    assert es("SELECT o.product_id, COUNT(*) " + JOIN_OR + " GROUP BY o.product_id"
              ) == [500, 502, 504, 510]
    # a literal domain; two keys are still one histogram: 2 * 1
    a = analyze("SELECT quantity, product_id, COUNT(*) FROM orders "
                "GROUP BY quantity, product_id", MD)
    assert a.measurements[0].sensitivity.at(0) == 2
    assert a.group_keys[0].domain == Domain(values=(1, 2, 3, 4, 5))


def test_group_by_a_public_column_uses_the_public_table_as_domain():
    # o ⋈ p: S = 1 (see above); histogram over p.category: 2 * 1
    a = analyze("SELECT p.category, COUNT(*) FROM orders o JOIN products p "
                "ON o.product_id = p.product_id GROUP BY p.category", MD)
    assert a.measurements[0].sensitivity.at(0) == 2
    assert a.group_keys[0].domain == Domain(table="products", column="category")


def test_nested_group_by_feeds_a_count():
    # a grouped subquery with an aggregate: S = 2 * S(input) = 2; COUNT over it: 2
    assert es("SELECT COUNT(*) FROM (SELECT customer_id, COUNT(*) AS n FROM orders "
              "GROUP BY customer_id) t") == [2, 2, 2, 2]
    # HAVING with an aggregate: a change can drop two groups (counts 2 -> 1 and 2 -> 3 under
    # HAVING COUNT(*) = 2), so still 2
    assert es("SELECT COUNT(*) FROM (SELECT customer_id FROM orders GROUP BY customer_id "
              "HAVING COUNT(*) > 3) t") == [2, 2, 2, 2]


def test_nested_group_by_without_aggregates_is_a_distinct():
    # no aggregate in SELECT or HAVING: the distinct keys, S = S(input) = 1 (as SELECT DISTINCT)
    assert es("SELECT COUNT(*) FROM (SELECT customer_id FROM orders GROUP BY customer_id) t"
              ) == [1, 1, 1, 1]
    assert es("SELECT COUNT(*) FROM (SELECT DISTINCT customer_id FROM orders) t") == [1, 1, 1, 1]
    # a HAVING without aggregates is a filter on the keys: still 1
    assert es("SELECT COUNT(*) FROM (SELECT customer_id FROM orders GROUP BY customer_id "
              "HAVING customer_id > 3) t") == [1, 1, 1, 1]
    # over a join: S(o ⋈ r) = 250+k, distinct keys keep it
    assert es("SELECT COUNT(*) FROM (SELECT o.product_id FROM orders o JOIN recommendations r "
              "ON o.customer_id = r.customer_id GROUP BY o.product_id) t") == [250, 251, 252, 255]


def test_nested_group_by_key_mf():
    # single key: mf(t.customer_id) = 1 (one row per group), S(t) = 1 (no aggregate).
    # t ⋈ c: max(mf(t.cid)*S(c), mf(c.cid)*S(t)) = max(1*1, (1+k)*1) = 1+k
    assert es("SELECT COUNT(*) FROM (SELECT customer_id FROM orders GROUP BY customer_id) t "
              "JOIN customers c ON t.customer_id = c.customer_id") == [1, 2, 3, 6]
    # with an aggregate kept, S(t) = 2: max(1*1, (1+k)*2) = 2+2k
    assert es("SELECT COUNT(*) FROM (SELECT customer_id, COUNT(*) AS n FROM orders "
              "GROUP BY customer_id) t JOIN customers c ON t.customer_id = c.customer_id"
              ) == [2, 4, 6, 12]
    # two keys: mf(t.customer_id) = input mf = 100+k, S(t) = 1:
    # max((100+k)*1, (1+k)*1) = 100+k
    assert es("SELECT COUNT(*) FROM (SELECT customer_id, product_id FROM orders "
              "GROUP BY customer_id, product_id) t "
              "JOIN customers c ON t.customer_id = c.customer_id") == [100, 101, 102, 105]
    # grouped subquery ⋈ recommendations, the inner count kept: max(1*1, (250+k)*2) = 500+2k
    assert es("SELECT COUNT(*) FROM (SELECT customer_id, COUNT(*) AS n FROM orders "
              "GROUP BY customer_id) t JOIN recommendations r ON t.customer_id = r.customer_id "
              "WHERE t.n > 5") == [500, 502, 504, 510]


def test_nested_group_by_sharing_an_ancestor():
    # g = orders grouped by customer_id: S = 2, mf(g.cid) = 1; g ⋈ orders shares orders:
    # mf(o.cid)*S(g) + mf(g.cid)*S(o) + S(o)*S(g) = (100+k)*2 + 1*1 + 1*2 = 203+2k
    assert es("SELECT COUNT(*) FROM orders o JOIN (SELECT customer_id, COUNT(*) AS n "
              "FROM orders GROUP BY customer_id) g ON g.customer_id = o.customer_id"
              ) == [203, 205, 207, 213]


def test_scalar_aggregate_subquery_is_one_row():
    # SELECT COUNT(*) FROM orders is one row; any change replaces it: S = 1
    assert es("SELECT COUNT(*) FROM (SELECT COUNT(*) AS n FROM orders) t") == [1, 1, 1, 1]
    # over a public table it never changes: 0
    assert es("SELECT COUNT(*) FROM (SELECT COUNT(*) AS n FROM products) t") == [0, 0, 0, 0]


def test_distinct_subquery_has_mf_one():
    # SELECT DISTINCT customer_id: S = 1, mf = 1; ⋈ r: max(1*1, (250+k)*1) = 250+k
    assert es("SELECT COUNT(*) FROM (SELECT DISTINCT customer_id FROM orders) t "
              "JOIN recommendations r ON t.customer_id = r.customer_id") == [250, 251, 252, 255]
    # ⋈ customers: max(1*1, (1+k)*1) = 1+k -- not 100+k as without DISTINCT
    assert es("SELECT COUNT(*) FROM (SELECT DISTINCT customer_id FROM orders) t "
              "JOIN customers c ON t.customer_id = c.customer_id") == [1, 2, 3, 6]


# ----------------------------------------------------------------------------- COUNT


@pytest.mark.parametrize("agg", ["COUNT(*)", "COUNT(o.quantity)", "COUNT(DISTINCT o.quantity)",
                                 "COUNT(DISTINCT r.product_id)"])
def test_the_three_counts_release_the_stability(agg):
    # ES = S(o ⋈ r) = 250+k for all three forms
    m = only(f"SELECT {agg} " + JOIN_OR)
    assert [m.sensitivity.at(k) for k in KS] == [250, 251, 252, 255]
    assert m.function == "COUNT"


# ----------------------------------------------------------------------------- SUM / AVG


@pytest.mark.parametrize(("column", "width"), [
    ("order_cost", 1000),  # [0, 1000]: max(1000,0) - min(0,0) = 1000
    ("discount", 60),  # [-50, 10]: 10 - (-50) = 60
    ("weight", 7),  # [2, 7] (l > 0): max(7,0) - min(2,0) = 7 - 0 = 7 (not 5)
    ("refund", 30),  # [-30, -5] (u < 0): max(-5,0) - min(-30,0) = 0 + 30 = 30 (not 25)
])
def test_sum_width(column, width):
    m = only(f"SELECT SUM({column}) FROM orders")
    assert [m.sensitivity.at(k) for k in KS] == [width] * 4
    assert m.function == "SUM"
    assert not m.sensitivity.depends_on_k
    # over the worked join: (250+k) * width
    m = only(f"SELECT SUM(o.{column}) " + JOIN_OR)
    assert [m.sensitivity.at(k) for k in KS] == [(250 + k) * width for k in KS]


def test_sum_in_a_histogram():
    # 2 * S * width = 2 * 1 * 60 = 120
    assert es("SELECT quantity, SUM(discount) FROM orders GROUP BY quantity") == [120] * 4


def test_sum_bounds_survive_joins_and_subqueries():
    # c.age [18, 90] through a derived table and a join with orders:
    # S = max(mf(c.cid)*S(o), mf(o.cid)*S(c)) = max(1+k, 100+k) = 100+k; width 90
    assert es("SELECT SUM(t.age) FROM (SELECT customer_id, age FROM customers) t "
              "JOIN orders o ON o.customer_id = t.customer_id") == [9000, 9090, 9180, 9450]


@pytest.mark.parametrize("sql", [
    "SELECT SUM(note) FROM orders",  # no bounds declared
    "SELECT SUM(order_cost * note) FROM orders",  # note is unbounded, so the product is
    "SELECT AVG(quantity) FROM orders",
])
def test_sum_without_bounds_is_a_missing_metric(sql):
    with pytest.raises(MissingMetricError):
        analyze(sql, MD)


def test_avg_is_split_into_sum_and_count():
    a = analyze("SELECT AVG(weight) AS w FROM orders", MD)
    sum_m, count_m = a.measurements
    # SUM(weight): 1 * 7; COUNT(weight): 1
    assert (sum_m.function, sum_m.sensitivity.at(0), sum_m.bounds) == ("SUM", 7, (2.0, 7.0))
    assert (count_m.function, count_m.sensitivity.at(0)) == ("COUNT", 1)
    assert isinstance(count_m.node, exp.Count) and count_m.node.this.name == "weight"
    (col,) = a.columns
    assert (col.name, col.kind, col.function, col.measurements) == ("w", "aggregate", "AVG",
                                                                     (0, 1))
    # SUM(x) next to AVG(x) is measured once and shared
    a = analyze("SELECT SUM(weight), AVG(weight) FROM orders", MD)
    assert [m.function for m in a.measurements] == ["SUM", "COUNT"]
    assert [c.measurements for c in a.columns] == [(0,), (0, 1)]
    # over a join, both parts scale with S = 250+k: SUM (250+k)*7, COUNT 250+k
    a = analyze("SELECT AVG(o.weight) " + JOIN_OR, MD)
    assert [m.sensitivity.at(2) for m in a.measurements] == [252 * 7, 252]


# ----------------------------------------------------------------------------- semi/anti-joins


@pytest.mark.parametrize("op", ["IN", "NOT IN"])
def test_in_subquery_disjoint(op):
    # disjoint: max(S(o), mf_k(o.cid)*S(r)) = max(1, 100+k) = 100+k
    assert es(f"SELECT COUNT(*) FROM orders o WHERE o.customer_id {op} "
              "(SELECT r.customer_id FROM recommendations r)") == [100, 101, 102, 105]


@pytest.mark.parametrize("op", ["IN", "NOT IN"])
def test_in_subquery_sharing_an_ancestor(op):
    # shared: S(o) + mf_k(o.cid)*S(sub) = 1 + (100+k) = 101+k
    assert es(f"SELECT COUNT(*) FROM orders o WHERE o.customer_id {op} "
              "(SELECT o2.customer_id FROM orders o2 WHERE o2.quantity > 3)"
              ) == [101, 102, 103, 106]


@pytest.mark.parametrize("op", ["EXISTS", "NOT EXISTS"])
def test_exists_disjoint(op):
    # correlated on o.customer_id: max(1, (100+k)*1) = 100+k
    assert es(f"SELECT COUNT(*) FROM orders o WHERE {op} (SELECT 1 FROM recommendations r "
              "WHERE r.customer_id = o.customer_id AND r.product_id > 3)"
              ) == [100, 101, 102, 105]


@pytest.mark.parametrize("op", ["EXISTS", "NOT EXISTS"])
def test_exists_sharing_an_ancestor(op):
    # 1 + (100+k)*1 = 101+k
    assert es(f"SELECT COUNT(*) FROM orders o WHERE {op} (SELECT 1 FROM orders o2 "
              "WHERE o2.customer_id = o.customer_id AND o2.order_id <> o.order_id)"
              ) == [101, 102, 103, 106]


def test_exists_with_two_keys_takes_the_smaller_mf():
    # keys o.customer_id (100+k) and o.product_id (500+k): flips <= min(...)*S(r) = 100+k
    assert es("SELECT COUNT(*) FROM orders o WHERE EXISTS (SELECT 1 FROM recommendations r "
              "WHERE r.customer_id = o.customer_id AND r.product_id = o.product_id)"
              ) == [100, 101, 102, 105]


def test_semijoin_factor_uses_the_subquery_stability():
    # sub = r ⋈ c: S = max((250+k)*1, (1+k)*1) = 250+k; flips (100+k)(250+k);
    # disjoint from orders: max(1, (100+k)(250+k)) = 25000, 25351, 25704, 26775
    assert es("SELECT COUNT(*) FROM orders o WHERE o.customer_id IN "
              "(SELECT r.customer_id FROM recommendations r JOIN customers c "
              "ON r.customer_id = c.customer_id)") == [25000, 25351, 25704, 26775]


def test_semijoin_on_a_joined_outer_relation():
    # outer o ⋈ c: S = max(100+k, 1+k) = 100+k; o.product_id in it has mf (500+k)*(1+k).
    # IN over recommendations (disjoint): max(100+k, (500+k)(1+k)*1)
    #   k=0: max(100, 500) = 500; k=1: 501*2 = 1002; k=2: 502*3 = 1506; k=5: 505*6 = 3030
    assert es("SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer_id = c.customer_id "
              "WHERE o.product_id IN (SELECT r.product_id FROM recommendations r)"
              ) == [500, 1002, 1506, 3030]


def test_semijoin_with_a_public_subquery_changes_nothing():
    # S(sub) = 0: the filter is a fixed set: S(o) = 1, pure
    m = only("SELECT COUNT(*) FROM orders o WHERE o.product_id IN "
             "(SELECT p.product_id FROM products p WHERE p.category = 3)")
    assert m.sensitivity == Const(1.0)


def test_semijoin_of_a_public_outer_on_a_private_subquery_is_pure():
    # public outer (S 0), private sub: max(0, mf(p.category)*1) = 7 at every k
    m = only("SELECT COUNT(*) FROM products p WHERE p.category IN "
             "(SELECT o.quantity FROM orders o)")
    assert m.sensitivity == Const(7.0)


def test_in_over_a_scalar_aggregate():
    # the scalar aggregate is one row (S = 1): max(1, (100+k)*1) = 100+k
    assert es("SELECT COUNT(*) FROM orders o WHERE o.customer_id IN "
              "(SELECT COUNT(*) FROM recommendations)") == [100, 101, 102, 105]


def test_in_over_a_grouped_subquery():
    # grouped sub: S = 2*1 = 2 (HAVING is a filter); max(1, (100+k)*2) = 200+2k
    assert es("SELECT COUNT(*) FROM orders o WHERE o.customer_id IN "
              "(SELECT r.customer_id FROM recommendations r GROUP BY r.customer_id "
              "HAVING COUNT(*) > 2)") == [200, 202, 204, 210]


# ----------------------------------------------------------------------------- UNION ALL


def test_union_all_disjoint_takes_the_max():
    # orders and recommendations: a change touches one branch: max(1, 1) = 1
    assert es("SELECT COUNT(*) FROM (SELECT customer_id FROM orders UNION ALL "
              "SELECT customer_id FROM recommendations) u") == [1, 1, 1, 1]


def test_union_all_sharing_an_ancestor_adds():
    # both branches read orders: 1 + 1 = 2 (FLEX's max would say 1)
    assert es("SELECT COUNT(*) FROM (SELECT customer_id FROM orders WHERE quantity > 1 "
              "UNION ALL SELECT customer_id FROM orders WHERE quantity < 4) u") == [2, 2, 2, 2]
    # three branches, two of them orders: (max(1, 1) for o, r) + 1 = 2
    assert es("SELECT COUNT(*) FROM (SELECT customer_id FROM orders UNION ALL "
              "SELECT customer_id FROM recommendations UNION ALL "
              "SELECT customer_id FROM orders) u") == [2, 2, 2, 2]


def test_union_all_column_mf_adds():
    # u.customer_id: mf (100+k) + (250+k) = 350+2k; S(u) = 1 (disjoint).
    # u ⋈ c: max((350+2k)*1, (1+k)*1) = 350+2k
    assert es("SELECT COUNT(*) FROM (SELECT o.customer_id FROM orders o UNION ALL "
              "SELECT r.customer_id FROM recommendations r) u "
              "JOIN customers c ON u.customer_id = c.customer_id") == [350, 352, 354, 360]
    # u ⋈ orders shares orders: (350+2k)*1 + (100+k)*1 + 1*1 = 451+3k
    assert es("SELECT COUNT(*) FROM (SELECT o.customer_id FROM orders o UNION ALL "
              "SELECT r.customer_id FROM recommendations r) u "
              "JOIN orders o2 ON u.customer_id = o2.customer_id") == [451, 454, 457, 466]


# ----------------------------------------------------------------------------- post-processing


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) * 100.0 / 7 AS pct " + JOIN_OR,
    "SELECT COUNT(*) = 100 AS hit " + JOIN_OR,
    "SELECT COUNT(*) AS n " + JOIN_OR + " HAVING COUNT(*) > 10",
    "SELECT COUNT(*) AS n " + JOIN_OR + " ORDER BY COUNT(*) DESC LIMIT 1",
    "SELECT CASE WHEN COUNT(*) > 5 THEN 1 ELSE 0 END AS big " + JOIN_OR,
])
def test_post_processing_keeps_the_aggregate_sensitivity(sql):
    # one measurement, COUNT over o ⋈ r: 250+k
    m = only(sql)
    assert m.function == "COUNT"
    assert [m.sensitivity.at(k) for k in KS] == [250, 251, 252, 255]


def test_post_processing_in_a_histogram():
    a = analyze("SELECT product_id, COUNT(*) AS n FROM orders GROUP BY product_id "
                "HAVING COUNT(*) > 10 ORDER BY n DESC LIMIT 3", MD)
    assert [m.sensitivity.at(0) for m in a.measurements] == [2]
    # an aggregate used only in HAVING is measured (and noised) too: COUNT 2, SUM 2*1000
    a = analyze("SELECT product_id, COUNT(*) AS n FROM orders GROUP BY product_id "
                "HAVING SUM(order_cost) > 10", MD)
    assert [(m.function, m.sensitivity.at(0)) for m in a.measurements] == [("COUNT", 2),
                                                                          ("SUM", 2000)]


def test_arithmetic_over_two_aggregates_measures_both():
    a = analyze("SELECT SUM(o.weight) / COUNT(*) AS ratio " + JOIN_OR, MD)
    assert [(m.function, m.sensitivity.at(0)) for m in a.measurements] == [("SUM", 250 * 7),
                                                                          ("COUNT", 250)]
    (col,) = a.columns
    assert (col.kind, col.function, col.measurements) == ("aggregate", None, (0, 1))


@pytest.mark.parametrize("sql", [
    # SUM over a grouped subquery's COUNT: no bounds for the inner count
    "SELECT SUM(t.n) FROM (SELECT customer_id, COUNT(*) AS n FROM orders GROUP BY customer_id) t",
    "SELECT AVG(t.n) FROM (SELECT COUNT(*) AS n FROM orders) t",
    # a scalar aggregate compared in WHERE: its exact value could flip every row
    "SELECT COUNT(*) FROM orders WHERE quantity > (SELECT AVG(quantity) FROM orders)",
    "SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer_id = c.customer_id "
    "AND o.quantity > (SELECT COUNT(*) FROM customers)",
    "SELECT product_id, COUNT(*) FROM orders GROUP BY product_id "
    "HAVING COUNT(*) > (SELECT COUNT(*) FROM customers)",
])
def test_aggregate_arithmetic_inside_subqueries_is_rejected(sql):
    with pytest.raises(AggregateArithmeticError):
        analyze(sql, MD)


# ----------------------------------------------------------------------------- budget split


def test_epsilon_and_delta_split_evenly():
    # three measurements over the join (COUNT, SUM, COUNT(x)), all smoothed:
    # epsilon 0.3 -> 0.1 each, delta 3e-6 -> 1e-6 each
    a = analyze("SELECT COUNT(*), SUM(o.order_cost), COUNT(o.quantity) " + JOIN_OR, MD)
    plans = plan_noise(a, Budget(0.3, 3e-6))
    assert [p.epsilon for p in plans] == pytest.approx([0.1] * 3, rel=1e-12)
    assert [p.delta for p in plans] == pytest.approx([1e-6] * 3, rel=1e-12)
    assert all(not p.pure for p in plans)
    # pure measurements only: epsilon split, delta 0 each
    a = analyze("SELECT COUNT(*), SUM(order_cost) FROM orders", MD)
    plans = plan_noise(a, Budget(1.0, 1e-6))
    assert [(p.epsilon, p.delta) for p in plans] == [(0.5, 0.0), (0.5, 0.0)]


def test_delta_goes_only_to_smoothed_measurements():
    # A query whose measurements differ in k-dependence (built directly: in SQL all of one
    # query's measurements share S(k)). epsilon over all 3; delta over the 2 smoothed ones.
    a = analyze("SELECT COUNT(*) " + JOIN_OR, MD)
    m = a.measurements[0]
    ms = (m, dataclasses.replace(m, index=1, sensitivity=Const(3.0), label="pure"),
          dataclasses.replace(m, index=2, sensitivity=PlusK(10.0), label="smoothed"))
    plans = plan_noise(dataclasses.replace(a, measurements=ms), Budget(0.9, 1e-6))
    assert [p.epsilon for p in plans] == pytest.approx([0.3, 0.3, 0.3], rel=1e-12)
    assert [p.delta for p in plans] == pytest.approx([5e-7, 0.0, 5e-7], rel=1e-12)
    assert [p.pure for p in plans] == [False, True, False]
    assert plans[1].scale == pytest.approx(3.0 / 0.3, rel=1e-12)
    assert sum(p.delta for p in plans) <= 1e-6 * (1 + 1e-12)


@pytest.mark.parametrize("sql", [
    # the innermost EXISTS compares with o, two levels up
    "SELECT COUNT(*) FROM orders o WHERE EXISTS (SELECT 1 FROM recommendations r WHERE "
    "EXISTS (SELECT 1 FROM customers c WHERE c.customer_id = o.customer_id))",
    # even when the middle level is correlated with o as well
    "SELECT COUNT(*) FROM orders o WHERE EXISTS (SELECT 1 FROM recommendations r WHERE "
    "r.customer_id = o.customer_id AND NOT EXISTS "
    "(SELECT 1 FROM customers c WHERE c.customer_id = o.customer_id))",
])
def test_exists_correlated_two_levels_up_names_the_construct(sql):
    # This used to say "the EXISTS key o.customer_id has no max frequency", which it has.
    with pytest.raises(UnsupportedConstructError) as info:
        analyze(sql, MD)
    msg = str(info.value)
    assert "o.customer_id" in msg and "more than one level up" in msg
    assert "max frequency" not in msg and "directly around it" in msg


@pytest.mark.parametrize("outer_with", [
    # An enclosing CTE of the same name over a public table: the EXISTS's own CTE over a
    # private table was resolved to it (S(sub) = 0), so ES was 1 while one changed
    # recommendations row flips every order of one product (mf_k(o.product_id) of them).
    "WITH c AS (SELECT product_id AS pid FROM products) ",
    "",
])
def test_with_inside_exists_is_rejected(outer_with):
    sql = (f"{outer_with}SELECT COUNT(*) FROM orders o WHERE EXISTS (WITH c AS (SELECT "
           "product_id AS pid FROM recommendations) SELECT 1 FROM c WHERE c.pid = o.product_id)")
    with pytest.raises(UnsupportedConstructError, match="WITH inside an EXISTS subquery"):
        analyze(sql, MD)


def test_with_inside_in_subquery_is_its_own_scope():
    # The IN subquery's WITH shadows the enclosing CTE of the same name: the private one counts.
    sql = ("WITH c AS (SELECT product_id AS pid FROM products) SELECT COUNT(*) FROM orders o "
           "WHERE o.product_id IN (WITH c AS (SELECT product_id AS pid FROM recommendations) "
           "SELECT pid FROM c)")
    # max(S(orders) = 1, mf_k(o.product_id) * S(recommendations) = 500 + k): disjoint ancestors
    assert es(sql) == [500.0, 501.0, 502.0, 505.0]
