"""A derived table grouped by the privacy unit (dpsql.units.derived): the shapes accepted, their
exact bounds (kappa = C = 1 by the SQL), and the near misses refused with what is missing."""

from __future__ import annotations

import dataclasses

import duckdb
import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.analysis.explain import explain_text
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget import Budget
from dpsql.errors import AggregateArithmeticError, Error, UnsupportedConstructError
from dpsql.noise.unit_partition import plan_with_selection, shared_count
from dpsql.rewrite.plan import plan_execution
from tests.db_files import writing
from tests.ledgers import charged, ledger_session, open_ledger
from tests.shop_fixture import ZeroNoise
from tests.units import tiny

#: TPC-H Q13's shape on the tiny shop: each customer's number of orders, zeros included
D = ("SELECT c.c_id, COUNT(o.o_id) AS n FROM customer c LEFT JOIN orders o "
     "ON o.o_cust = c.c_id AND o.amount > 0 GROUP BY c.c_id")
Q13 = f"SELECT n, COUNT(*) AS k FROM ({D}) AS d GROUP BY n"
CLAMPED = ("SELECT c.c_id, LEAST(COUNT(o.o_id), 3) AS n FROM customer c LEFT JOIN orders o "
           "ON o.o_cust = c.c_id GROUP BY c.c_id")


def md():
    # the owner's kappa and C are not what bounds this shape: 2 and 5 here, 1 and 1 used
    return tiny.metadata(max_groups=2, max_rows_per_group=5)


def test_q13_shape_is_one_row_per_unit_with_sensitivity_one_and_a_selected_key():
    analysis = analyze_request(Q13, md())
    unit = analysis.unit
    assert unit is not None and unit.derived is not None and not unit.r2t
    assert "customer.c_id" in unit.derived
    assert (unit.unit.max_groups, unit.unit.max_rows_per_group) == (1, 1)
    assert analysis.partition_selection and analysis.selection_stability == 1.0
    (m,) = analysis.measurements
    assert m.function == "COUNT" and m.sensitivity.at(0) == 1.0
    assert not m.sensitivity.depends_on_k
    # the COUNT(*) is the selection's count (one unit in one group, once): one share
    assert shared_count(analysis) == 0
    plans, selection = plan_with_selection(analysis, Budget(0.5, 1e-6))
    assert plans[0].scale == 1 / 0.5 and selection.scale == 1 / 0.5
    # the executed query is the row-level one: no per-unit grouping added
    plan = plan_execution(analysis, md())
    assert "__u" not in plan.exact_sql and "__g" not in plan.exact_sql


@pytest.mark.parametrize("sql,widths", [
    # a clamped count: bins 0..3 from the SQL, no selection; its SUM and AVG bounded by 3
    (f"SELECT n, COUNT(*) FROM ({CLAMPED}) d GROUP BY n", [1.0]),
    (f"SELECT SUM(n) FROM ({CLAMPED}) d", [3.0]),
    (f"SELECT AVG(n) FROM ({CLAMPED}) d", [3.0, 1.0]),
    (f"SELECT COUNT(*), COUNT(n) FROM ({CLAMPED}) d WHERE n > 1", [1.0, 1.0]),
    # a CTE, and the unit's direct path column as the key
    (f"WITH d AS ({CLAMPED}) SELECT n, COUNT(*) FROM d GROUP BY n", [1.0]),
    ("SELECT n, COUNT(*) FROM (SELECT o.o_cust, LEAST(COUNT(*), 2) AS n FROM orders o "
     "GROUP BY o.o_cust) d GROUP BY n", [1.0]),
    # a via path tied through its table's tied row, and a public table joined
    ("SELECT n, COUNT(*) FROM (SELECT c.c_id, LEAST(COUNT(i.qty), 4) AS n FROM customer c "
     "JOIN orders o ON o.o_cust = c.c_id LEFT JOIN items i ON i.i_order = o.o_id "
     "JOIN regions r ON r.r = c.region GROUP BY c.c_id) d GROUP BY n", [1.0]),
])
def test_accepted_shapes_and_their_exact_sensitivities(sql, widths):
    analysis = analyze_request(sql, md())
    assert analysis.unit is not None and analysis.unit.derived is not None
    assert [m.sensitivity.at(0) for m in analysis.measurements] == widths
    assert not analysis.partition_selection


def test_explain_names_the_shape_and_the_unit():
    text = explain_text(Q13, md(), epsilon=1.0, delta=1e-6)
    assert "privacy unit: customer.c_id" in text
    assert "one row per unit" in text and "kappa = C = 1" in text


@pytest.mark.parametrize("sql,fragment", [
    # grouped by a non-unit key
    ("SELECT n, COUNT(*) FROM (SELECT c.region, COUNT(*) AS n FROM customer c "
     "GROUP BY c.region) d GROUP BY n", "customer.region, which is not the unit id"),
    ("SELECT n, COUNT(*) FROM (SELECT o.o_id, COUNT(*) AS n FROM orders o "
     "GROUP BY o.o_id) d GROUP BY n", "orders.o_id, which is not the unit id"),
    ("SELECT n, COUNT(*) FROM (SELECT i.i_order, COUNT(*) AS n FROM items i "
     "GROUP BY i.i_order) d GROUP BY n", "items.i_order, which is not the unit id"),
    # the unit id from a public table, or from the null-extended side
    ("SELECT n, COUNT(*) FROM (SELECT r.r, COUNT(c.c_id) AS n FROM regions r JOIN customer c "
     "ON c.c_id = r.r GROUP BY r.r) d GROUP BY n", "regions.r, which is not the unit id"),
    ("SELECT n, COUNT(*) FROM (SELECT c.c_id, COUNT(*) AS n FROM regions r LEFT JOIN "
     "customer c ON c.c_id = r.r GROUP BY c.c_id) d GROUP BY n", "nullable side"),
    # a private table joined on another column than its unit path
    ("SELECT n, COUNT(*) FROM (SELECT c.c_id, COUNT(o.o_id) AS n FROM customer c LEFT JOIN "
     "orders o ON o.o_id = c.c_id GROUP BY c.c_id) d GROUP BY n", "orders (o) are not joined"),
    ("SELECT n, COUNT(*) FROM (SELECT c.c_id, COUNT(*) AS n FROM customer c JOIN "
     "orders o ON o.amount = c.region GROUP BY c.c_id) d GROUP BY n", "orders (o) are not"),
    # a via path pointing elsewhere than its declared key
    ("SELECT n, COUNT(*) FROM (SELECT o.o_cust, COUNT(*) AS n FROM orders o JOIN items i "
     "ON i.i_order = o.o_cust GROUP BY o.o_cust) d GROUP BY n", "items (i) are not joined"),
    ("SELECT n, COUNT(*) FROM (SELECT o.o_cust, COUNT(*) AS n FROM orders o JOIN items i "
     "ON i.qty = o.o_id GROUP BY o.o_cust) d GROUP BY n", "items (i) are not joined"),
    # a predicate reading other rows: correlated, or a subquery over a private table
    ("SELECT n, COUNT(*) FROM (SELECT o.o_cust, COUNT(*) AS n FROM orders o WHERE EXISTS "
     "(SELECT 1 FROM items i WHERE i.i_order = o.o_id) GROUP BY o.o_cust) d GROUP BY n",
     "has a subquery"),
    ("SELECT n, COUNT(*) FROM (SELECT o.o_cust, COUNT(*) AS n FROM orders o WHERE o.amount > "
     "(SELECT AVG(amount) FROM orders) GROUP BY o.o_cust) d GROUP BY n", "has a subquery"),
    # the outer query: a join, a second CTE, a subquery beside the derived table
    (f"SELECT d.n, COUNT(*) FROM ({D}) d JOIN regions r ON r.r = d.n GROUP BY d.n",
     "joins the derived table"),
    (f"WITH d AS ({D}), e AS (SELECT 1 AS x) SELECT n, COUNT(*) FROM d GROUP BY n",
     "exactly one derived table"),
    (f"SELECT n, COUNT(*) FROM ({D}) d WHERE n < (SELECT COUNT(*) FROM orders) GROUP BY n",
     "besides the derived table"),
    # an aggregate in a WHERE subquery, the top level reading a table: named as a subquery's
    # aggregate, not as a missing derived table (QA round 2 of issue #17)
    ("SELECT COUNT(*) FROM customer c WHERE c.region > (SELECT AVG(region) FROM customer)",
     "in a scalar, IN or EXISTS subquery has no unit-level rule"),
    ("SELECT COUNT(*) FROM customer c WHERE (SELECT COUNT(*) FROM orders o "
     "WHERE o.o_cust = c.c_id) > 2", "the subquery (SELECT COUNT(*)"),
    ("SELECT COUNT(*) FROM customer c WHERE c.c_id IN (SELECT o.o_cust FROM orders o "
     "GROUP BY o.o_cust HAVING COUNT(*) > 2)", "in a scalar, IN or EXISTS subquery"),
    # not grouped, or by several columns; outer and right joins; set operations
    ("SELECT c FROM (SELECT COUNT(*) AS c FROM orders) t", "not grouped by one column"),
    ("SELECT n, COUNT(*) FROM (SELECT o.o_cust, o.amount, COUNT(*) AS n FROM orders o "
     "GROUP BY o.o_cust, o.amount) d GROUP BY n", "not grouped by one column"),
    ("SELECT n, COUNT(*) FROM (SELECT c.c_id, COUNT(*) AS n FROM customer c FULL JOIN "
     "orders o ON o.o_cust = c.c_id GROUP BY c.c_id) d GROUP BY n", "inner or LEFT joins"),
    # an aggregate over the derived table without a unit-level rule
    (f"SELECT COUNT(DISTINCT n) FROM ({D}) d", "COUNT(DISTINCT"),
    # the row-level join analysis's refusal of a LEFT JOIN chain, without its max_freq advice
    ("SELECT n, COUNT(*) FROM (SELECT c.c_id, COUNT(i.qty) AS n FROM customer c LEFT JOIN "
     "orders o ON o.o_cust = c.c_id LEFT JOIN items i ON i.i_order = o.o_id GROUP BY c.c_id) d "
     "GROUP BY n", "null-extended side of an earlier LEFT JOIN"),
])
def test_near_misses_are_refused_naming_what_is_missing(sql, fragment):
    with pytest.raises(UnsupportedConstructError, match="unit") as err:
        analyze_request(sql, md())
    assert fragment in str(err.value)


@pytest.mark.parametrize("sql", [
    f"SELECT SUM(n) FROM ({D}) d",
    # a per-unit SUM has no derived bounds yet (the row-level analysis's rule)
    "SELECT SUM(s) FROM (SELECT o.o_cust, LEAST(GREATEST(SUM(o.amount), -2), 6) AS s "
    "FROM orders o GROUP BY o.o_cust) d",
])
def test_an_unbounded_sum_outside_stays_refused(sql):
    # the row-level analysis's refusal stands: an outer SUM needs bounds
    with pytest.raises(Error, match="no bounds"):
        analyze_request(sql, md())


# ------------------------------------------- the whole session, noise off (rewrite equivalence)

@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """A DuckDB file: 40 customers, 120 orders (30 of customer 1; some of customer 99, who has
    no row: an orphan unit), so the histograms have several counts."""
    path = tmp_path_factory.mktemp("derived") / "shop.duckdb"
    db = {"customer": [(c, 1 + c % 2) for c in range(1, 41)],
          "orders": [(o, 1 if o <= 30 else 99 if o > 115 else 1 + o % 40, o % 7 - 2)
                     for o in range(1, 121)],
          "items": [(1 + i % 120, i % 5, 1 + i % 3) for i in range(200)],
          "regions": [(1,), (2,)]}
    with writing(path) as con:
        for table, columns in tiny.COLUMNS.items():
            con.execute(f"CREATE TABLE {table} ({', '.join(c + ' INTEGER' for c in columns)})")
            con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' for _ in columns)})",
                            [list(r) for r in db[table]])
    return path


@pytest.fixture
def session(shop, tmp_path):
    backend = DuckDBBackend(shop, md())
    ledger = open_ledger(tmp_path / "ledger.sqlite", epsilon=100.0, delta=1e-2)
    yield ledger_session(md(), backend, ledger, sampler=ZeroNoise())
    backend.close()
    ledger.close()


def _truth(shop, sql):
    con = duckdb.connect(str(shop), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("sql", [
    f"SELECT n, COUNT(*) AS k FROM ({CLAMPED}) d GROUP BY n",
    f"SELECT SUM(n) AS s, COUNT(*) AS k FROM ({CLAMPED}) d WHERE n > 0",
    "SELECT n, COUNT(*) AS k FROM (SELECT o.o_cust, LEAST(COUNT(i.qty), 5) AS n FROM orders o "
    "LEFT JOIN items i ON i.i_order = o.o_id GROUP BY o.o_cust) d GROUP BY n",
])
def test_noise_off_the_release_is_the_plain_query(session, shop, sql):
    result = session.run(sql, epsilon=1.0)
    truth = _truth(shop, sql)
    if " GROUP BY n" in sql:  # the declared bins 0..n: empty ones released as 0
        assert {r for r in result.rows if r[1]} == set(truth)
    else:
        assert [tuple(float(v) for v in r) for r in result.rows] == [
            tuple(float(v) for v in r) for r in truth]
    assert result.release.privacy_unit == "customer.c_id"
    assert [c.epsilon for c in charged(session)] == [1.0]


def test_noise_off_q13_keeps_only_groups_of_enough_units_with_their_exact_counts(session, shop):
    result = session.run(Q13, epsilon=10.0, delta=1e-3)
    truth = dict(_truth(shop, Q13))
    record = result.release
    assert record.selection_threshold is not None and record.privacy_unit == "customer.c_id"
    released = dict(result.rows)
    assert released and set(released) <= set(truth)
    assert all(released[g] == truth[g] for g in released)  # the shared COUNT(*): exact here
    # zero noise: every group of at least tau customers is kept, and no other
    assert set(released) == {g for g, n in truth.items() if n >= record.selection_threshold}


def test_a_unit_id_of_unknown_type_is_refused_as_for_any_unit_query():
    m = md()
    customer = m.tables["customer"]
    c_id = dataclasses.replace(customer.columns["c_id"], type=None)
    m = dataclasses.replace(m, tables={**m.tables, "customer": dataclasses.replace(
        customer, columns={**customer.columns, "c_id": c_id})})
    with pytest.raises(UnsupportedConstructError, match=r"customer\.c_id has no known type"):
        analyze_request(Q13, m)


@pytest.mark.parametrize("sql,clamp", [
    # a clamped SUM inside D, and a clamp outside over an unclamped count (QA round 2, #17)
    ("SELECT SUM(s) AS t FROM (SELECT o.o_cust, LEAST(GREATEST(SUM(o.amount), 0), 500) AS s "
     "FROM orders o GROUP BY o.o_cust) d", "LEAST(COUNT(..), n) AS s"),
    (f"SELECT SUM(LEAST(n, 5)) AS t FROM ({D}) d", "LEAST(COUNT(..), n) AS n"),
])
def test_an_unbounded_value_of_the_derived_table_says_what_has_bounds_there(session, sql, clamp):
    # still refused (the row-level rule: an outer SUM needs bounds), before anything is charged,
    # and the message says what D supports and the alternative
    with pytest.raises(AggregateArithmeticError) as err:
        session.run(sql, epsilon=1.0)
    text = str(err.value)
    assert text.startswith("under a privacy unit, ") and "which has no bounds" in text
    assert f"only a count clamped there gets bounds, {clamp}" in text
    assert "a clamped SUM or another aggregate does not" in text
    assert "Clamp the count inside d, or aggregate the rows without the derived table" in text
    assert charged(session) == []
    assert err.value.to_json()["error"]["type"] == "AggregateArithmeticError"
