"""Brute force: a release over TWO privacy units (customer AND supplier; dpsql.units.multi)
moves each truncated level by at most tau_j when ONE unit of either table is removed with its
FK cascade (docs/privacy.md, "Several privacy units").

For random tiny two-unit databases (tests/units/tiny_multi.py, orphans included) and every
query below, this runs dpsql's EXACT plan on real DuckDB (noise off), truncates it as the
engine does (dpsql.units.multi_execute: the per-pair rows, then the flow of
dpsql.noise.r2t_flow), on D and on D minus each customer's and each supplier's cascade, and
checks R2T's precondition: every level of every part stays >= 0, moves by at most
tau_j * bound, and never rises when a unit is removed. Queries reaching one unit run the
one-unit engine on that unit's view and are checked the same way. Also: the per-pair rows are
the join's (the exact query is the analyst's join grouped by the two ids), against a reference
computed in Python.

A failure prints the database, the removed unit and both results: a privacy bug.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.metadata import Metadata
from dpsql.rewrite.plan import plan_execution
from dpsql.units import multi_rewrite
from dpsql.units.analysis import UnitRelease
from dpsql.units.execute import truncated_levels as engine_levels
from dpsql.units.grid import fine_grid, part_grid, part_levels
from dpsql.units.multi_execute import fallback_levels, pair_levels
from dpsql.units.multi_rewrite import is_flat, regrouped
from tests.units import tiny_multi

TWO_UNITS = [
    "SELECT COUNT(*) FROM items",
    "SELECT COUNT(*) FROM items i JOIN orders o ON i.i_order = o.o_id",
    # R2T's Q5 shape: customer and supplier of the same nation
    "SELECT COUNT(*) FROM customer c JOIN orders o ON o.o_cust = c.c_id"
    " JOIN items i ON i.i_order = o.o_id JOIN supplier s ON s.s_id = i.i_supp"
    " WHERE c.nat = s.nat",
    # a SUM with both signs: two parts, each truncated by the flow
    "SELECT SUM(qty) FROM items i JOIN supplier s ON s.s_id = i.i_supp",
    "SELECT COUNT(*), SUM(qty) FROM items WHERE qty > 0",
    "SELECT COUNT(*) FROM items i JOIN nations n ON n.n = i.qty",
    # a join across the units off the paths: each (order, stock) pair has one of each
    "SELECT COUNT(*) FROM orders o JOIN stock k ON k.k_qty = o.o_cust",
    "SELECT COUNT(*) FROM items i WHERE EXISTS (SELECT 1 FROM stock k WHERE"
    " k.k_supp = i.i_supp)",
    "SELECT COUNT(*) FROM items i WHERE NOT EXISTS (SELECT 1 FROM stock k WHERE"
    " k.k_supp = i.i_supp AND k.k_qty > 1)",
    "SELECT SUM(i.qty) FROM orders o JOIN items i ON i.i_order = o.o_id"
    " JOIN customer c ON c.c_id = o.o_cust WHERE c.nat = 1",
]
ONE_UNIT = [
    "SELECT COUNT(*) FROM orders",
    "SELECT SUM(k_qty) FROM stock",
    "SELECT COUNT(*) FROM customer c JOIN orders o ON o.o_cust = c.c_id",
]


def _databases(n: int, seed: int) -> list[tiny_multi.Database]:
    rng = random.Random(seed)
    return [tiny_multi.random_database(rng) for _ in range(n)]


def _plan(sql: str, md: Metadata) -> tuple[UnitRelease, str]:
    analysis = analyze_request(sql, md)
    release = analysis.unit
    assert release is not None and release.r2t
    return release, plan_execution(analysis, md).exact_sql


def truncated_levels(release: UnitRelease, exact_sql: str, db: tiny_multi.Database, *,
                     check_fallback: bool = True) -> list[tuple[float, list[float]]]:
    """Per part: (its bound b, Q(tau_j) for every level), as the engine computes them; for a
    flat query, checked first against the guard's fallback (``check_fallback``)."""
    con = tiny_multi.world(db)
    grids = [(part_grid(p, release.unit)[0], part_levels(p, release.unit, fine_grid(release)))
             for p in release.parts]
    out = []
    if release.more:
        # the engine's reading of the executed query's columns (grouped pairs, or the flat
        # rows of plain counts and SUMs: dpsql.units.multi_rewrite)
        cols = list(con.execute(exact_sql).fetchnumpy().values())
        got = pair_levels(cols, release)
        if check_fallback and is_flat(exact_sql):  # the same levels, grouped in the database
            grouped = [list(con.execute(q).fetchnumpy().values())
                       for q in regrouped(exact_sql, release)]
            want = fallback_levels(grouped, release)
            assert [g.tolist() for g in got] == [w.tolist() for w in want]
        for (bound, _), levels in zip(grids, got, strict=True):
            out.append((bound, [float(v) for v in levels]))
        return out
    # one unit: the one row of sums, or for counts the histogram of contributions
    # (dpsql.units.execute.truncated_levels reads either)
    parts = engine_levels(con.execute(exact_sql).fetchall(), release)
    for (bound, _), levels in zip(grids, parts, strict=True):
        out.append((bound, [float(v) for v in levels]))
    return out


def bruteforce_two_units(sql: str, md: Metadata,
                         databases: Sequence[tiny_multi.Database]) -> None:
    """R2T's precondition for every level of ``sql`` over every neighbour (module docstring)."""
    release, exact_sql = _plan(sql, md)
    # the engine's own levels: fine ones over two units (dpsql.units.grid)
    taus = [part_levels(p, release.unit, fine_grid(release)) for p in release.parts]
    for db in databases:
        base = truncated_levels(release, exact_sql, db)
        for what, other_db in tiny_multi.neighbours(db):
            # flat == fallback is a property of each database: checked on the bases
            other = truncated_levels(release, exact_sql, other_db, check_fallback=False)
            for (bound, q), (_, q2), levels in zip(base, other, taus, strict=True):
                for tau, x, y in zip(levels, q, q2, strict=True):
                    assert x >= 0 and y >= 0
                    assert abs(x - y) <= tau * bound + 1e-9 and y <= x + 1e-9, (
                        f"PRIVACY BUG: {sql}\ndb={db}\nremoved {what}, tau={tau}: {x} -> {y}")


@pytest.mark.parametrize("index", range(len(TWO_UNITS)))
def test_two_unit_levels_move_by_at_most_tau(index):
    sql = TWO_UNITS[index]
    md = tiny_multi.metadata()
    release = analyze_request(sql, md).unit
    assert release is not None and release.more, "reaches both units"
    bruteforce_two_units(sql, md, _databases(3, index))


@pytest.mark.parametrize("sql", ONE_UNIT)
def test_one_unit_queries_under_two_declared_units(sql):
    md = tiny_multi.metadata()
    release = analyze_request(sql, md).unit
    assert release is not None and not release.more
    bruteforce_two_units(sql, md, _databases(2, 7))


def test_on_an_owner_grid():
    md = tiny_multi.metadata(max_contribution=8, level_base=2.5)
    for sql in TWO_UNITS[2:4]:
        bruteforce_two_units(sql, md, _databases(2, 11))


@pytest.mark.parametrize("sql", [TWO_UNITS[0], TWO_UNITS[2], TWO_UNITS[4]])
def test_on_fine_levels(sql):
    # base 1.5 * 2^0 .. : levels 2.25, 5.0625, 11.390625 are not whole rows (R2T's real
    # levels; dpsql.units.grid), so the counts' flow runs in quarter, sixteenth.. rows
    md = tiny_multi.metadata(max_contribution=8, level_base=2.25)
    release = analyze_request(sql, md).unit
    assert release is not None and release.more
    assert not all(float(t).is_integer()
                   for t in part_levels(release.parts[0], release.unit, True))
    bruteforce_two_units(sql, md, _databases(3, 13))


def test_the_exact_query_is_the_join_grouped_by_both_ids(monkeypatch):
    """Rewrite equivalence (noise off): the flat rows are the analyst's join rows with both ids
    and each SUM part's clamped value, and the grouped form (planned when a query cannot be
    flat) is that join grouped by (customer, supplier), both computed here in Python."""
    md = tiny_multi.metadata()
    sql = ("SELECT COUNT(*), SUM(qty) FROM orders o JOIN items i ON i.i_order = o.o_id"
           " WHERE i.qty > -5")
    flat_plan = plan_execution(analyze_request(sql, md), md)
    assert is_flat(flat_plan.exact_sql)
    monkeypatch.setattr(multi_rewrite, "flat_rows", lambda *args: False)
    plan = plan_execution(analyze_request(sql, md), md)
    assert not is_flat(plan.exact_sql)
    for db in _databases(4, 5):
        con = tiny_multi.load(db)
        rows = con.execute(plan.exact_sql).fetchall()
        got = {(r[0], r[1]): (r[2], r[3], r[4]) for r in rows}
        want: dict[tuple[object, object], list[float]] = {}
        joined = []
        for o_id, cust in db["orders"]:
            for order, supp, qty in db["items"]:
                if order == o_id:
                    q = min(max(qty, -2), 4)
                    joined.append((cust, supp, float(max(q, 0)), float(max(-q, 0))))
                    entry = want.setdefault((cust, supp), [0, 0.0, 0.0])
                    entry[0] += 1
                    entry[1] += max(q, 0)
                    entry[2] += max(-q, 0)
        assert got == {k: (v[0], v[1], v[2]) for k, v in want.items()}
        assert sorted(con.execute(flat_plan.exact_sql).fetchall()) == sorted(joined)


def test_a_star_supplier_is_truncated_at_tau_and_its_removal_moves_by_exactly_tau():
    """Hand-checked: supplier 1 sells one item to each of 4 customers (a star). The flow caps
    the supplier at tau: Q(2) = 2, Q(4) = Q(8) = 4; removing the supplier moves Q(2) by
    exactly 2 = tau (the bound is tight), while truncating per customer only would keep all 4
    at tau = 2 and move by 4 > tau (the one-unit rule is not enough here)."""
    md = tiny_multi.metadata()
    db: tiny_multi.Database = {
        "customer": [(c, 1) for c in range(1, 5)], "supplier": [(1, 1)],
        "orders": [(c, c) for c in range(1, 5)], "items": [(c, 1, 1) for c in range(1, 5)],
        "stock": [], "nations": [(1,), (2,)]}
    release, exact_sql = _plan("SELECT COUNT(*) FROM items", md)
    ((_, levels),) = truncated_levels(release, exact_sql, db)
    assert levels == [2.0, 4.0, 4.0]
    ((_, without),) = truncated_levels(release, exact_sql, tiny_multi.remove_supplier(db, 1))
    assert without == [0.0, 0.0, 0.0]
    ((_, one_less),) = truncated_levels(release, exact_sql, tiny_multi.remove_customer(db, 4))
    assert one_less == [2.0, 3.0, 3.0]
