"""The owner-facing explain report (docs/design.md, "Interfaces")."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import dpsql
from dpsql.analysis.explain import explain_text
from dpsql.errors import MissingMetricError, NotSupportedError, ProtectedBinError
from dpsql.metadata import Column, Domain, Metadata, Table, load_metadata

ROOT = Path(__file__).resolve().parents[2]
FLEX_PATH = ROOT / "schemas" / "flex_test.yaml"
FLEX = load_metadata(FLEX_PATH)
JOIN = ("SELECT COUNT(*) AS n FROM orders JOIN recommendations "
        "ON orders.customer_id = recommendations.customer_id")
COLUMN_KEYS = {"name", "kind", "function", "elastic_sensitivity", "smooth_sensitivity", "k_max",
               "mechanism", "noise_scale", "epsilon", "delta"}


def test_worked_join_report_is_exactly_the_design_example():
    report = dpsql.explain(JOIN, FLEX, epsilon=0.1, delta=1e-8)
    (col,) = report["columns"]
    assert set(col) == COLUMN_KEYS
    expected = {"name": "n", "kind": "aggregate", "function": "COUNT",
                "elastic_sensitivity": 250.0, "smooth_sensitivity": 270.58156788296145,
                "k_max": 133, "mechanism": "laplace", "noise_scale": 5411.631357659228,
                "epsilon": 0.1, "delta": 1e-08}
    for key in ("name", "kind", "function", "k_max", "mechanism", "epsilon", "delta"):
        assert col[key] == expected[key], key
    for key in ("elastic_sensitivity", "smooth_sensitivity", "noise_scale"):
        assert col[key] == pytest.approx(expected[key], rel=1e-9), key
        assert isinstance(col[key], float)
    assert isinstance(col["k_max"], int)
    # it is JSON, and printing it round-trips
    assert json.loads(json.dumps(report)) == report


def test_metadata_may_be_a_path():
    by_path = dpsql.explain(JOIN, FLEX_PATH, epsilon=0.1, delta=1e-8)
    by_str = dpsql.explain(JOIN, str(FLEX_PATH), epsilon=0.1, delta=1e-8)
    assert by_path["columns"] == by_str["columns"] == dpsql.explain(
        JOIN, FLEX, epsilon=0.1, delta=1e-8)["columns"]


def test_group_keys_are_listed_in_select_order():
    report = dpsql.explain("SELECT product_id, COUNT(*) AS n FROM orders GROUP BY product_id",
                           FLEX, epsilon=1.0, delta=1e-8)
    key, n = report["columns"]
    assert key == {"name": "product_id", "kind": "group_key"}
    assert (n["name"], n["kind"], n["function"]) == ("n", "aggregate", "COUNT")
    assert n["elastic_sensitivity"] == 2.0  # histogram: 2 * S
    # the key after the aggregate stays after it
    report = dpsql.explain("SELECT COUNT(*) AS n, o.product_id FROM orders o "
                           "GROUP BY o.product_id", FLEX, epsilon=1.0, delta=1e-8)
    assert [(c["name"], c["kind"]) for c in report["columns"]] == [
        ("n", "aggregate"), ("product_id", "group_key")]


def test_two_group_keys_around_an_aggregate():
    md = Metadata(tables={"t": Table("t", {
        "a": Column("a", 3, releasable=True, domain=Domain(values=(1, 2))),
        "b": Column("b", 4, releasable=True, domain=Domain(values=("x", "y"))),
    })})
    report = dpsql.explain("SELECT b, COUNT(*) AS n, a FROM t GROUP BY a, b", md,
                           epsilon=1.0, delta=0.0)
    assert [(c["name"], c["kind"]) for c in report["columns"]] == [
        ("b", "group_key"), ("n", "aggregate"), ("a", "group_key")]


def test_pure_release():
    report = dpsql.explain("SELECT COUNT(*) AS n FROM orders WHERE quantity > 2", FLEX,
                           epsilon=0.5, delta=1e-8)
    (col,) = report["columns"]
    assert set(col) == COLUMN_KEYS
    assert col["smooth_sensitivity"] is None
    assert col["k_max"] is None
    assert col["delta"] == 0
    assert col["elastic_sensitivity"] == 1.0
    assert col["noise_scale"] == pytest.approx(1 / 0.5, rel=1e-15)  # ES / epsilon
    assert col["epsilon"] == 0.5
    assert json.loads(json.dumps(report))["columns"][0]["smooth_sensitivity"] is None


def test_pure_release_with_delta_zero():
    report = dpsql.explain("SELECT COUNT(*) AS n FROM orders o JOIN products p "
                           "ON o.product_id = p.product_id", FLEX, epsilon=1.0, delta=0.0)
    (col,) = report["columns"]
    # ES = mf(products.product_id) = 300, a global sensitivity
    assert (col["elastic_sensitivity"], col["smooth_sensitivity"], col["delta"]) == (300.0, None,
                                                                                  0)
    assert col["noise_scale"] == pytest.approx(300.0, rel=1e-15)


@pytest.mark.parametrize(("k", "es"), [(0, 250.0), (1, 251.0), (2, 252.0), (10, 260.0)])
def test_distance_changes_only_the_elastic_sensitivity(k, es):
    # elastic_sensitivity is ES at --distance; S, k_max and the noise do not depend on it
    report = dpsql.explain(JOIN, FLEX, epsilon=0.1, delta=1e-8, distance=k)
    (col,) = report["columns"]
    assert col["elastic_sensitivity"] == es
    assert col["smooth_sensitivity"] == pytest.approx(270.581567882961, rel=1e-9)
    assert col["k_max"] == 133
    assert col["noise_scale"] == pytest.approx(5411.63135765923, rel=1e-9)


def test_distance_on_a_self_join_and_a_pure_release():
    sql = "SELECT COUNT(*) AS n FROM orders o1 JOIN orders o2 ON o1.customer_id = o2.customer_id"
    # 201 + 2k
    assert [dpsql.explain(sql, FLEX, epsilon=0.1, delta=1e-8, distance=k)["columns"][0][
        "elastic_sensitivity"] for k in (0, 2, 5)] == [201.0, 205.0, 211.0]
    # a global sensitivity is the same at every distance
    pure = "SELECT COUNT(*) AS n FROM orders"
    assert {dpsql.explain(pure, FLEX, epsilon=0.1, delta=0.0, distance=k)["columns"][0][
        "elastic_sensitivity"] for k in (0, 3, 100)} == {1.0}


SUM_MD = Metadata(tables={
    "t": Table("t", {"x": Column("x", None, bounds=(0.0, 10.0)), "k": Column("k", 2),
                     "g": Column("g", 5, releasable=True, domain=Domain(values=(1, 2, 3)))}),
})


def test_avg_column_lists_its_two_measurements():
    report = dpsql.explain("SELECT g, AVG(x) AS mean FROM t GROUP BY g", SUM_MD,
                           epsilon=1.0, delta=0.0)
    key, mean = report["columns"]
    assert key == {"name": "g", "kind": "group_key"}
    assert (mean["name"], mean["kind"], mean["function"]) == ("mean", "aggregate", "AVG")
    # epsilon split evenly over SUM(x) and COUNT(x); the column's total is the query's
    assert mean["epsilon"] == pytest.approx(1.0, rel=1e-12)
    assert mean["delta"] == 0
    parts = mean["components"]
    assert [p["function"] for p in parts] == ["SUM", "COUNT"]
    assert [p["epsilon"] for p in parts] == [0.5, 0.5]
    # histogram: 2 * S; SUM 2 * 1 * 10 = 20, COUNT 2
    assert [p["elastic_sensitivity"] for p in parts] == [20.0, 2.0]
    assert parts[1]["noise_scale"] == pytest.approx(2.0 / 0.5, rel=1e-15)
    assert parts[0]["noise_scale"] >= 20.0 / 0.5


def test_several_aggregates_share_the_budget():
    report = dpsql.explain("SELECT COUNT(*) AS n, SUM(t.x) AS s FROM t JOIN t t2 ON t.k = t2.k",
                           SUM_MD, epsilon=0.2, delta=2e-8)
    n, s = report["columns"]
    assert (n["epsilon"], s["epsilon"]) == pytest.approx((0.1, 0.1), rel=1e-12)
    assert (n["delta"], s["delta"]) == pytest.approx((1e-8, 1e-8), rel=1e-12)
    # self-join: (2+k) + (2+k) + 1 = 5 at k = 0; SUM: 5 * 10
    assert (n["elastic_sensitivity"], s["elastic_sensitivity"]) == (5.0, 50.0)
    assert all(math.isfinite(c["noise_scale"]) for c in report["columns"])


@pytest.mark.parametrize(("sql", "cls"), [
    ("SELECT COUNT(*) FROM orders o JOIN customers c ON o.quantity = c.customer_id",
     MissingMetricError),
    ("SELECT customer_id, COUNT(*) FROM orders GROUP BY customer_id", ProtectedBinError),
])
def test_errors_raise_dpsql_classes_with_the_json_shape(sql, cls):
    with pytest.raises(cls) as info:
        dpsql.explain(sql, FLEX, epsilon=0.1, delta=1e-8)
    payload = info.value.to_json()
    assert set(payload) == {"error"}
    assert payload["error"]["type"] == cls.__name__
    assert payload["error"]["message"] == str(info.value)


def test_private_join_without_delta_is_an_error():
    with pytest.raises(NotSupportedError, match="delta"):
        dpsql.explain(JOIN, FLEX, epsilon=0.1, delta=0.0)


def test_a_query_of_several_releases_is_explained_release_by_release():
    """Release blocks: one report per release with its share of the budget (basic
    composition sums them to the request's), and the post-processing query."""
    sql = ("WITH a AS (SELECT COUNT(*) AS n FROM orders WHERE quantity > 2) "
           "SELECT n * 2 AS twice FROM a")
    report = dpsql.explain(sql, FLEX, epsilon=0.5, delta=1e-8)
    (release,) = report["releases"]
    assert release["release"] == "a" and release["columns"][0]["noise_scale"] == 2.0
    assert report["epsilon"] == pytest.approx(0.5) and report["delta"] == 0.0
    assert "__b0" in report["post_processing"]
    text = explain_text(sql, FLEX, epsilon=0.5, delta=1e-8)
    assert "a query of 1 release" in text and "== release a" in text
    assert "post-processing over the releases' noisy rows" in text


def test_two_phases_are_explained_with_the_final_query():
    sql = ("SELECT COUNT(*) AS n FROM orders WHERE quantity > "
           "(SELECT COUNT(*) FROM orders) / 1000")
    report = dpsql.explain(sql, FLEX, epsilon=1.0, delta=1e-8)
    assert [r["release"] for r in report["releases"]] == ["subquery1", "final query"]
    assert report["epsilon"] == pytest.approx(1.0) and report["post_processing"] is None
    # a query no rule covers is refused with the single-release analysis's own message
    with pytest.raises(Exception, match="neither aggregated nor a GROUP BY key"):
        dpsql.explain("SELECT order_id FROM orders", FLEX, epsilon=1.0, delta=1e-8)


def test_a_refused_query_of_public_tables_is_explained_as_run_as_written():
    # dpsql.execute.public runs it; explain said the private rule's refusal (needs bounds)
    from dpsql.analysis.explain import PUBLIC_NOTE, explain
    from dpsql.metadata import loads_metadata

    md = loads_metadata("tables:\n  p:\n    public: true\n    columns:\n"
                        "      price: {type: DOUBLE}\n  o:\n    columns:\n"
                        "      price: {type: DOUBLE}\n")
    assert explain_text("SELECT AVG(price) FROM p", md, epsilon=1.0, delta=0.0) == PUBLIC_NOTE
    report = explain("SELECT AVG(price) FROM p", md, epsilon=1.0, delta=0.0)
    assert report["public"] is True and report["epsilon"] == 0.0
    with pytest.raises(MissingMetricError):  # a private table keeps the private refusal
        explain_text("SELECT AVG(price) FROM o", md, epsilon=1.0, delta=0.0)
