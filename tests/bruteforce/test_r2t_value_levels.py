"""Brute force: a SUM's R2T levels in value units (dpsql.units.grid) move by at most tau_j when
one unit and every row linked to it are removed, and that bound is attained.

For random tiny databases (tests/units/tiny.py, orphans included) and every SUM query below,
dpsql's EXACT plan runs on real DuckDB (noise off) on D and on D minus each unit's cascade
(tests/bruteforce/test_units.py's ``bruteforce_r2t``, which reads each part's own grid): on the
default value grid (GS_value = max_contribution x the per-row bound) and on an owner's
``max_sum`` small enough that the levels truncate. Signed sums (amount in [-3, 5]) are two parts,
max(x, 0) and max(-x, 0), each non-negative per unit: the argument needs c_u >= 0.

The tightness test builds a unit whose clamped sum exceeds every level and checks that its
removal moves level j by exactly tau_j: a noise scale planned for anything smaller than tau_j
would be too small, and this test would catch a grid that claimed it.
"""

from __future__ import annotations

import random

import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.rewrite.plan import plan_execution
from dpsql.units.execute import truncated_levels
from dpsql.units.grid import part_levels
from tests.bruteforce.test_units import _databases, bruteforce_r2t
from tests.units import tiny

SUM_QUERIES = [
    "SELECT SUM(qty) FROM items",
    "SELECT SUM(amount) FROM orders",
    "SELECT COUNT(*), SUM(amount), SUM(qty) FROM orders o JOIN items i ON i.i_order = o.o_id",
    "SELECT AVG(qty) FROM items i JOIN orders o ON o.o_id = i.i_order WHERE o.amount > 0",
    "SELECT SUM(qty * 2 - 1) FROM items",
]


@pytest.mark.parametrize("sql", SUM_QUERIES)
@pytest.mark.parametrize(("max_sum", "base"), [(None, 2.0), (7, 2.5)])
def test_value_levels_move_by_at_most_tau(sql, max_sum, base):
    md = tiny.metadata(max_contribution=8, max_sum=max_sum, level_base=base)
    bruteforce_r2t(sql, md, _databases())


@pytest.mark.parametrize("max_sum", [None, 5])
def test_the_bound_is_attained(max_sum):
    md = tiny.metadata(max_contribution=8, max_sum=max_sum)
    sql = "SELECT SUM(qty) FROM items"
    analysis = analyze_request(sql, md)
    assert analysis.unit is not None
    (part,) = analysis.unit.parts
    taus = part_levels(part, md.privacy_unit)
    exact_sql = plan_execution(analysis, md).exact_sql
    rng = random.Random(11)
    db = tiny.random_database(rng)
    # customer 1 with one order of many items of qty 4 (the bound): a sum above every level
    db["customer"] = [(1, 1), *[r for r in db["customer"] if r[0] != 1]]
    db["orders"] = [(50, 1, 0), *db["orders"]]
    db["items"] += [(50, 4, 1)] * (taus[-1] // 4 + 1)
    full = truncated_levels(tiny.load(db).execute(exact_sql).fetchall(), analysis.unit)[0]
    gone = truncated_levels(tiny.load(tiny.remove_unit(db, 1)).execute(exact_sql).fetchall(),
                            analysis.unit)[0]
    moved = [float(a) - float(b) for a, b in zip(full, gone, strict=True)]
    assert moved == [float(t) for t in taus]
