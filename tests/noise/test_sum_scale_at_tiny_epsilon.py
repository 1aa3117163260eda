"""A SUM at an epsilon of about 2^-19 per noise draw or less (fourth units QA): the grid step
of a sum grows with its scale (g >= scale * 2^-20), so g / epsilon outgrows the scale and
``gridded_sum_scale`` has no fixed point. It used to end in an ``assert``, so a SUM at
epsilon 1e-6 (row level) or an AVG / SUM under a privacy unit at epsilon 1e-5 (R2T splits it
over its levels and parts) failed "as a dpsql bug" (InternalError; through ``dpsql serve`` an
internal error that closed the connection). Such an epsilon is public, so the refusal is a
NotSupportedError naming epsilon, before anything is charged."""

from __future__ import annotations

import math

import pytest

import dpsql
import dpsql.accounting
from dpsql.errors import NotSupportedError
from dpsql.noise import mechanisms
from tests.db_files import writing
from tests.units import tiny


@pytest.mark.parametrize("epsilon", [2.0**-20, 2.0**-21, 1e-9, 1e-12])
def test_no_settled_scale_is_a_clear_refusal(epsilon):
    with pytest.raises(mechanisms.EpsilonTooSmallForSum, match=r"epsilon .* too small"):
        mechanisms.gridded_sum_scale(100.0, epsilon)
    assert issubclass(mechanisms.EpsilonTooSmallForSum, NotSupportedError)
    assert issubclass(mechanisms.EpsilonTooSmallForSum, ValueError)


@pytest.mark.parametrize("epsilon", [2.0**-18, 2.0**-19 * 1.01, 1e-3, 1.0, 1e6])
def test_a_scale_that_settles_is_unchanged(epsilon):
    scale, g = mechanisms.gridded_sum_scale(100.0, epsilon)
    assert g == mechanisms.sum_granularity(scale)
    assert (100.0 + g) / epsilon <= scale * (1 + 1e-12)
    assert math.isfinite(scale)


def _shop() -> tiny.Database:
    customers = [(c, 1) for c in range(1, 21)]
    orders = [(o, 1 + o % 20, o % 5) for o in range(1, 61)]
    return {"customer": customers, "orders": orders, "items": [], "regions": [(1,), (2,)]}


@pytest.mark.parametrize(("sql", "epsilon"), [
    ("SELECT SUM(amount) AS s FROM orders", 1e-5),
    ("SELECT AVG(amount) AS a FROM orders", 1e-5),
    ("SELECT AVG(amount) AS a, COUNT(*) AS n FROM orders", 3e-5),
])
def test_r2t_sum_at_a_tiny_epsilon_is_refused_uncharged(tmp_path, sql, epsilon):
    path = tiny.write_file(tmp_path / "shop.duckdb", _shop())
    ledger = tmp_path / "ledger.sqlite"
    with dpsql.accounting.Ledger(str(ledger)) as led:
        led.set_budget(str(path), "a", epsilon=10.0, delta=0.0)
    conn = dpsql.connect(str(path), metadata=tiny.metadata(max_contribution=64), analyst="a",
                         ledger=str(ledger), epsilon=epsilon)
    try:
        with pytest.raises(dpsql.NotSupportedError, match="epsilon"):
            conn.cursor().execute(sql)
        assert conn.budget.epsilon_spent == 0.0
    finally:
        conn.close()


def test_row_level_sum_at_a_tiny_epsilon_is_refused_uncharged(tmp_path):
    path = tmp_path / "t.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE t (x DOUBLE)")
        con.execute("INSERT INTO t VALUES (1.0), (2.0), (3.0)")
    md = tmp_path / "m.yaml"
    md.write_text("tables:\n  t:\n    columns:\n      x: {type: DOUBLE, bounds: [0, 100]}\n")
    ledger = tmp_path / "ledger.sqlite"
    with dpsql.accounting.Ledger(str(ledger)) as led:
        led.set_budget(str(path), "a", epsilon=10.0, delta=0.0)
    conn = dpsql.connect(str(path), metadata=str(md), analyst="a", ledger=str(ledger),
                         epsilon=1e-7)
    try:
        with pytest.raises(dpsql.NotSupportedError, match=r"SUM.*epsilon .* too small"):
            conn.cursor().execute("SELECT SUM(x) AS s FROM t")
        assert conn.budget.epsilon_spent == 0.0
    finally:
        conn.close()
