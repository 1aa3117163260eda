"""dpsql.units.multi: queries under two declared privacy units (customer AND supplier), from the
analysis's refusals to a release through the whole session (real DuckDB file, real ledger)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.analysis.explain import explain, explain_text
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import NotSupportedError, UnsupportedConstructError
from dpsql.metadata import loads_metadata
from dpsql.noise import r2t
from dpsql.noise.r2t_lp import lp_truncated
from tests.db_files import writing
from tests.ledgers import charged, ledger_session, open_ledger
from tests.shop_fixture import ZeroNoise
from tests.units import tiny_multi


@pytest.mark.parametrize(("sql", "error", "message"), [
    ("SELECT qty, COUNT(*) FROM items GROUP BY qty", NotSupportedError,
     "GROUP BY .* over rows of two privacy units"),
    ("SELECT DISTINCT qty FROM items", NotSupportedError, "two privacy units"),
    ("SELECT COUNT(*) FROM (SELECT i_supp, COUNT(*) AS n FROM items GROUP BY i_supp) t",
     NotSupportedError, "aggregate at the top level only"),
    # a unit self-join: two items of one order may come from two suppliers
    ("SELECT COUNT(*) FROM items a JOIN items b ON a.i_order = b.i_order",
     UnsupportedConstructError, "may belong to another unit"),
    ("SELECT COUNT(DISTINCT i_supp) FROM items", UnsupportedConstructError,
     "COUNT\\(DISTINCT"),
])
def test_refusals_name_the_construct_and_the_fix(sql, error, message):
    with pytest.raises(error, match=message):
        analyze_request(sql, tiny_multi.metadata())


def test_three_units_are_refused_and_one_unit_runs_the_one_unit_engine():
    text = tiny_multi.YAML.format(gs=8, grid="").replace(
        "  - {table: supplier, column: s_id}",
        "  - {table: supplier, column: s_id}\n  - {table: nations, column: n}").replace(
        "nations: {public: true, ", "nations: {")
    # items reach nations through their order too: the hop rule (metadata/unit_multi.py)
    md = loads_metadata(text.replace("orders: {unit: {customer: o_cust}",
                                     "orders: {unit: {customer: o_cust, nations: o_id}").replace(
        "supplier: i_supp}", "supplier: i_supp, nations: {via: i_order, to: orders.o_id}}"))
    with pytest.raises(NotSupportedError, match="3 privacy units"):
        analyze_request("SELECT COUNT(*) FROM items i JOIN orders o ON o.o_id = i.i_order", md)
    two = tiny_multi.metadata()
    grouped = analyze_request("SELECT nat, COUNT(*) FROM customer GROUP BY nat", two)
    assert grouped.unit is not None and not grouped.unit.more and not grouped.unit.r2t
    assert grouped.unit.label == "customer.c_id"
    stock = analyze_request("SELECT COUNT(*) FROM stock", two)
    assert stock.unit is not None and stock.unit.label == "supplier.s_id"
    assert stock.unit.r2t and not stock.unit.more
    public = analyze_request("SELECT COUNT(*) FROM nations", two)
    assert public.unit is None


def test_explain_shows_both_units_and_the_public_scales():
    md = tiny_multi.metadata()
    sql = "SELECT COUNT(*) FROM items"
    report = explain(sql, md, epsilon=1.0, delta=0.0)
    unit = report["privacy_unit"]
    assert unit["unit"] == "customer.c_id and supplier.s_id" and unit["mechanism"] == "r2t"
    assert unit["other_units"][0]["unit_of_each_row"] == "items.i_supp"
    (m,) = report["measurements"]
    assert m["parts"][0]["level_scales"] == [6.0, 12.0, 24.0]  # 3 levels at epsilon 1/3
    text = explain_text(sql, md, epsilon=1.0, delta=0.0)
    assert "its supplier unit: items.i_supp" in text and "max-flow" in text


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    path = tmp_path_factory.mktemp("multi") / "two.duckdb"
    db = tiny_multi.random_database(random.Random(1))
    db["customer"] = [(c, 1 + c % 2) for c in range(1, 21)]
    db["supplier"] = [(s, 1 + s % 2) for s in range(1, 6)]
    db["orders"] = [(o, 1 + o % 20) for o in range(1, 61)]
    # supplier 1 sells 80 items: well above the top level (GS 16)
    db["items"] = [(1 + i % 60, 1 if i < 80 else 2 + i % 4, i % 5 - 1) for i in range(200)]
    with writing(path) as con:
        tiny_multi.load(db, con)
    return path, db


def test_a_release_over_two_units_through_the_session(database, tmp_path):
    path, db = database
    md = tiny_multi.metadata(max_contribution=16)
    backend = DuckDBBackend(path, md)
    ledger = open_ledger(tmp_path / "ledger.sqlite", epsilon=10.0, delta=1e-3)
    session = ledger_session(md, backend, ledger, sampler=ZeroNoise())
    try:
        result = session.run("SELECT COUNT(*) AS n FROM items i JOIN orders o"
                             " ON o.o_id = i.i_order", epsilon=1.0)
        assert [c.epsilon for c in charged(session)] == [1.0]
    finally:
        backend.close()
        ledger.close()
    record = result.release
    assert record.privacy_unit == "customer.c_id and supplier.s_id"
    # the reference: the join's (customer, supplier) pairs in Python, truncated by HiGHS's LP
    owner = dict(db["orders"])
    pairs: dict[tuple[int, int], int] = {}
    for order, supp, _ in db["items"]:
        if order in owner:
            key = (owner[order], supp)
            pairs[key] = pairs.get(key, 0) + 1
    results = [(n, (("c", c), ("s", s))) for (c, s), n in pairs.items()]
    plan = r2t.plan_r2t(unit_bound=1, max_contribution=16, epsilon=1.0, integer=True)
    levels = np.array([round(lp_truncated(results, t)) for t in plan.levels])
    assert levels[-1] < sum(pairs.values())  # supplier 1 is truncated even at the top
    # zero noise: the release is max_j (Q(tau_j) - shift_j), the interval around it
    (n,) = result.rows[0]
    assert n == max(0, int(max(levels - np.array(plan.shifts, dtype=np.int64))))
    lower, upper = record.columns[0].interval_95
    assert lower <= levels[-1] <= upper


def test_a_count_over_two_units_races_r2ts_real_levels(database, tmp_path):
    """Base 2.25 (R2T's code races real B^j): the flow truncates at 2.25, 5.0625, ..; the
    count is released through the sums' noise at those levels, rounded, with a whole-row
    interval; explain's scales are that plan's."""
    path, db = database
    md = tiny_multi.metadata(max_contribution=16, level_base=2.25)
    sql = "SELECT COUNT(*) AS n FROM items i JOIN orders o ON o.o_id = i.i_order"
    plan = r2t.plan_r2t(unit_bound=1, max_contribution=16, epsilon=1.0, integer=False,
                        base=2.25, increments=False, fine=True)
    assert plan.levels == (2.25, 5.0625, 11.390625, 25.62890625)
    (m,) = explain(sql, md, epsilon=1.0, delta=0.0)["measurements"]
    assert m["parts"][0]["level_scales"] == list(plan.scales)
    backend = DuckDBBackend(path, md)
    ledger = open_ledger(tmp_path / "ledger.sqlite", epsilon=10.0, delta=1e-3)
    session = ledger_session(md, backend, ledger, sampler=ZeroNoise())
    try:
        result = session.run(sql, epsilon=1.0)
    finally:
        backend.close()
        ledger.close()
    owner = dict(db["orders"])
    pairs: dict[tuple[int, int], int] = {}
    for order, supp, _ in db["items"]:
        if order in owner:
            pairs[(owner[order], supp)] = pairs.get((owner[order], supp), 0) + 1
    results = [(n, (("c", c), ("s", s))) for (c, s), n in pairs.items()]
    levels = np.array([lp_truncated(results, t) for t in plan.levels])
    assert any(not float(v).is_integer() for v in np.round(levels, 6))  # a real level binds
    (n,) = result.rows[0]
    # zero noise: each level snapped to its grid (at most half a step off), then shifted
    want = max(0.0, float(max(levels - np.array(plan.shifts))))
    assert isinstance(n, int) and abs(n - want) <= 0.5 + max(plan.granularities)
    lower, upper = result.release.columns[0].interval_95
    assert float(lower).is_integer() and float(upper).is_integer()
    assert lower <= levels[-1] <= upper
