"""A query under a privacy unit through the whole session: real DuckDB file, real ledger."""

from __future__ import annotations

import random

import pytest

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import NotSupportedError
from dpsql.noise import r2t
from tests.db_files import writing
from tests.ledgers import charged, ledger_session, open_ledger
from tests.shop_fixture import ZeroNoise
from tests.units import tiny


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    path = tmp_path_factory.mktemp("units") / "shop.duckdb"
    rng = random.Random(3)
    db = tiny.random_database(rng)
    # a bigger shop than the brute force's: 40 customers, one with many orders
    db["customer"] = [(c, 1 + c % 2) for c in range(1, 41)]
    db["orders"] = [(o, 1 if o <= 30 else 1 + o % 40, o % 7 - 2) for o in range(1, 121)]
    db["items"] = [(1 + i % 120, i % 5, 1 + i % 3) for i in range(300)]
    src = tiny.load(db)
    with writing(path) as con:
        for table in tiny.COLUMNS:
            rows = src.execute(f"SELECT * FROM {table}").fetchall()
            columns = ", ".join(c + " INTEGER" for c in tiny.COLUMNS[table])
            con.execute(f"CREATE TABLE {table} ({columns})")
            if rows:
                con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' for _ in rows[0])})",
                                [list(r) for r in rows])
    return path, db


@pytest.fixture
def session(database, tmp_path):
    path, _ = database
    md = tiny.metadata(max_contribution=64, max_groups=3, max_rows_per_group=100)
    backend = DuckDBBackend(path, md)
    ledger = open_ledger(tmp_path / "ledger.sqlite", epsilon=10.0, delta=1e-3)
    yield ledger_session(md, backend, ledger, sampler=ZeroNoise())
    backend.close()
    ledger.close()


def _exact(database, sql):
    return tiny.load(database[1]).execute(sql).fetchall()


def test_r2t_count_is_charged_recorded_and_biased_low_by_its_shift(session, database):
    sql = "SELECT COUNT(*) AS n FROM items"
    result = session.run(sql, epsilon=1.0)
    (true,) = _exact(database, sql)[0]
    record = result.release
    assert record.privacy_unit == "customer.c_id"
    assert record.mechanism == "r2t" and record.epsilon == 1.0 and record.delta == 0.0
    col = record.columns[0]
    assert col.mechanism == "r2t" and col.half_width_95 is None
    assert col.level_scales == tuple(r2t.r2t_scales(unit_bound=1, max_contribution=64,
                                                    epsilon=1.0, integer=True))
    # with zero noise every level is its exact truncated sum minus its public shift
    plan = r2t.plan_r2t(unit_bound=1, max_contribution=64, epsilon=1.0, integer=True)
    top = true - plan.shifts[-1]  # the top level truncates nothing (<= 64 rows per unit)
    (n,) = result.rows[0]
    assert isinstance(n, int) and n >= top and n <= true
    lower, upper = col.interval_95
    assert lower <= true <= upper
    assert [c.epsilon for c in charged(session)] == [1.0]


def test_r2t_sum_over_signed_bounds_releases_both_parts(session, database):
    sql = "SELECT SUM(amount) AS s FROM orders"
    result = session.run(sql, epsilon=2.0)
    (true,) = _exact(database, "SELECT SUM(GREATEST(LEAST(amount, 5), -3)) FROM orders")[0]
    (s,) = result.rows[0]
    lower, upper = result.release.columns[0].interval_95
    assert lower <= true <= upper
    assert abs(s - true) < upper - lower


def test_grouped_query_is_two_stage_with_a_public_scale(session, database):
    result = session.run("SELECT kind, COUNT(*) AS n FROM items GROUP BY kind", epsilon=1.0)
    col = result.release.columns[1]
    assert col.mechanism == "discrete_laplace"
    assert col.half_width_95 is not None  # kappa * C / epsilon is public
    assert col.noise_scale == 3 * 100 / 1.0
    # every unit keeps at most 3 kinds (all of them here) and 100 rows per kind: exact
    assert sorted(result.rows) == sorted(_exact(
        database, "SELECT kind, COUNT(*) FROM items WHERE i_order IN (SELECT o_id FROM orders) "
                  "OR i_order NOT IN (SELECT o_id FROM orders) GROUP BY kind"))


def test_the_unit_table_alone_is_one_row_per_unit_with_scale_one_over_epsilon(session,
                                                                            database):
    """COUNT(*) over the unit table read alone: each unit is one row (its id is a key), so a
    plain count at sensitivity 1, not R2T over levels up to max_contribution (64 here) nor
    the two-stage's kappa * C = 300 (dpsql.units.analysis.one_row_per_unit)."""
    sql = "SELECT region, COUNT(*) AS n FROM customer WHERE EXISTS (SELECT 1 FROM orders o "\
          "WHERE o.o_cust = customer.c_id) GROUP BY region"
    result = session.run(sql, epsilon=0.5)
    record = result.release
    assert record.privacy_unit == "customer.c_id"
    col = record.columns[1]
    assert col.mechanism == "discrete_laplace" and col.noise_scale == 1 / 0.5
    assert col.half_width_95 is not None
    # zero noise: the exact counts of customers with an order, per region
    assert sorted(result.rows) == sorted(_exact(database, sql.replace(" AS n", "")))
    assert [c.epsilon for c in charged(session)] == [0.5]


def test_gaussian_is_refused_for_r2t_before_any_charge(session):
    with pytest.raises(NotSupportedError, match="R2T"):
        session.run("SELECT COUNT(*) FROM items", epsilon=1.0, delta=1e-6, mechanism="gaussian")
    assert charged(session) == []


def test_a_refused_query_is_not_charged(session):
    with pytest.raises(NotSupportedError, match="two units"):
        session.run("SELECT COUNT(*) FROM orders a JOIN orders b ON a.amount = b.amount",
                    epsilon=1.0)
    assert charged(session) == []


def test_r2t_is_charged_by_its_curve_under_a_renyi_budget(session):
    # R2T is pure epsilon-DP under unit neighbours: its curve is randomised response's bound
    from dpsql.accounting.curves import pure_dp_rdp
    from tests.ledgers import ANALYST, DATABASE

    session.ledger.set_budget(DATABASE, ANALYST, 10.0, 1e-3, filter="renyi", alpha=8.0)
    result = session.run("SELECT COUNT(*) AS n, SUM(amount) AS s FROM orders", epsilon=1.0)
    status = session.ledger.status(DATABASE, ANALYST)
    assert status.filter_spent == pytest.approx(
        min(2 * pure_dp_rdp(8.0, 0.5), pure_dp_rdp(8.0, 1.0)), rel=1e-8)
    assert result.release.rho == pytest.approx(2 * 0.5 ** 2 / 2, rel=1e-8)


def test_a_count_past_the_discrete_samplers_range_is_released_with_sums_noise(database,
                                                                             tmp_path):
    # GS = 2^40 rows at epsilon 1: the top level's discrete scale (40 * 2^40) passes 2^32, so
    # the count takes the sums' noise, rounded (QA: refused below epsilon ~15 before)
    path, _ = database
    md = tiny.metadata(max_contribution=2**40)
    with pytest.raises(NotSupportedError, match="discrete sampler"):
        r2t.plan_r2t(unit_bound=1, max_contribution=2**40, epsilon=1.0, integer=True)
    plan = r2t.plan_r2t(unit_bound=1, max_contribution=2**40, epsilon=1.0, integer=False)
    backend = DuckDBBackend(path, md)
    ledger = open_ledger(tmp_path / "ledger.sqlite", epsilon=10.0, delta=1e-3)
    session = ledger_session(md, backend, ledger, sampler=ZeroNoise())
    try:
        result = session.run("SELECT COUNT(*) AS n FROM items", epsilon=1.0)
        assert [c.epsilon for c in charged(session)] == [1.0]
    finally:
        backend.close()
        ledger.close()
    col = result.release.columns[0]
    assert col.level_scales == plan.scales
    (n,) = result.rows[0]
    (true,) = _exact(database, "SELECT COUNT(*) FROM items")[0]
    assert isinstance(n, int) and 0 <= n <= true
    lower, upper = col.interval_95
    assert float(lower).is_integer() and lower <= true <= upper
