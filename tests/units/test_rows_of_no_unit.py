"""The rows of no unit under one privacy unit, through a real session with the noise off (or
the engine's own reading of the executed query's truncated levels): they are the same in
both neighbours (docs/privacy.md, "Rows of no unit"), so they are added in full -- not
truncated at R2T's levels, not limited to kappa groups nor clamped to C rows per group, not
clamped to one row when the unit table is read alone, and counted row by row in a selected
group's ``__n``. Before, they were one pseudo-unit capped like a unit: every test here failed
(guest orders with a NULL customer silently undercounted).

The shop: customers 1-4 (each within every bound: one kind, at most 2 items, at most 2
orders) and 3 customers with a NULL id; 31 guest orders (a NULL ``o_cust``, one with a NULL
amount), 30 items of guest orders, 5 of the orphan order 99 and 4 of a NULL order.
"""

from __future__ import annotations

import dataclasses

import duckdb
import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.budget import Budget
from dpsql.execute.exact import compile_plan
from dpsql.metadata import Column
from dpsql.noise import r2t
from dpsql.noise.unit_partition import plan_with_selection
from dpsql.rewrite.plan import plan_execution
from dpsql.session import Session
from dpsql.units.execute import read_truncated
from dpsql.units.grid import part_grid, part_levels
from tests.shop_fixture import ZeroNoise
from tests.units import tiny

GUESTS = range(10, 40)
DB: tiny.Database = {
    "customer": [(1, 1), (2, 2), (3, 1), (4, 2), (None, 1), (None, 1), (None, 2)],
    "orders": [(1, 1, 2), (2, 2, -1), (3, 3, 4), (4, 4, 1), (5, 1, 3)]
    + [(o, None, o % 10 - 3) for o in GUESTS] + [(40, None, None)],
    "items": [(1, 2, 1), (5, 1, 1), (2, 3, 2), (3, 0, 3), (3, 4, 3), (4, 2, 1)]
    + [(o, o % 5, 1 + o % 3) for o in GUESTS] + [(99, 1, 2)] * 5 + [(None, 3, 3)] * 4,
    "regions": [(1,), (2,)],
}


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    return tiny.write_file(tmp_path_factory.mktemp("no_unit") / "shop.duckdb", DB)


def _plain(database, sql):
    con = duckdb.connect(str(database), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _session(database, md, backend=None):
    from dpsql.backends.duckdb import DuckDBBackend

    return Session(md, backend or DuckDBBackend(database, md), sampler=ZeroNoise())


def _levels(database, md, sql):
    from dpsql.backends.duckdb import DuckDBBackend

    analysis = analyze_request(sql, md)
    backend = DuckDBBackend(database, md)
    try:
        plan = compile_plan(backend, plan_execution(analysis, md))
        return analysis.unit, [p.tolist() for p in read_truncated(backend, plan, [],
                                                                  analysis.unit)]
    finally:
        backend.close()


def test_an_r2t_count_adds_the_guest_orders_at_every_level(database):
    """COUNT(*) FROM orders: units 1-4 hold 2, 1, 1, 1 orders; the 31 guest orders are added
    in full at levels 2, 4, 8 (before: min(31, tau_j) = 2, 4, 8). Through the session with
    the noise off the release is max_j (Q(tau_j) - shift_j): the truth less the top shift."""
    md = tiny.metadata(max_contribution=8)
    sql = "SELECT COUNT(*) AS n FROM orders"
    _, levels = _levels(database, md, sql)
    assert levels == [[5 + 31, 5 + 31, 5 + 31]]
    ((true,),) = _plain(database, "SELECT COUNT(*) FROM orders")
    assert true == 36
    plan = r2t.plan_r2t(unit_bound=1, max_contribution=8, epsilon=100.0, integer=True)
    result = _session(database, md).run(sql, epsilon=100.0)
    assert result.rows == [(max(0, max(true - s for s in plan.shifts)),)]
    lower, upper = result.release.columns[0].interval_95
    assert lower <= true <= upper


def test_an_r2t_sum_releases_the_units_levels_and_adds_the_guests_after_the_noise(database):
    """SUM(amount): R2T runs on the units' levels alone and c_NULL (the guests' 60 and 18) is
    added to each part's release after the noise (dpsql.units.noise): with the noise off the
    value is 60 + max(0, max_j (U_j - shift_j)) - (18 + the non-positive part's), and each
    part's interval is shifted by its c_NULL. (A DOUBLE level carrying c_NULL could round by
    more than tau_j between neighbours: tests/redteam/test_rows_of_no_unit_attacks.py.)"""
    from dpsql.units.execute import read_truncated_parts
    from dpsql.units.noise import BETA

    md = tiny.metadata(max_contribution=8)
    sql = "SELECT SUM(amount) AS s FROM orders"
    analysis = analyze_request(sql, md)
    from dpsql.backends.duckdb import DuckDBBackend

    backend = DuckDBBackend(database, md)
    try:
        plan = compile_plan(backend, plan_execution(analysis, md))
        parts = read_truncated_parts(backend, plan, [], analysis.unit)
    finally:
        backend.close()
    assert parts.no_unit == [60.0, 18.0]
    assert [lv.tolist() for lv in parts.levels][1] == [1.0] * len(parts.levels[1])
    result = _session(database, md).run(sql, epsilon=100.0)
    want = 0.0
    for part, levels, c in zip(analysis.unit.parts, parts.levels, parts.no_unit, strict=True):
        bound, gs = part_grid(part, md.privacy_unit)
        rel = r2t.plan_r2t(unit_bound=bound, max_contribution=gs, epsilon=50.0, beta=BETA,
                           integer=False)
        best = max(0.0, max(q - sh for q, sh in zip(levels, rel.shifts, strict=True)))
        want += part.sign * (c + best)
    ((true,),) = _plain(database, "SELECT SUM(LEAST(GREATEST(amount, -3), 5)) FROM orders")
    (value,) = result.rows[0]
    # zero noise: each level snapped to its grid (at most half a step), so within a step
    assert value == pytest.approx(want, abs=1.0)
    lower, upper = result.release.columns[0].interval_95
    assert lower <= true <= upper


def test_the_histogram_of_counts_adds_the_rows_of_no_unit_in_full(database):
    """Two COUNT parts (the histogram path, dpsql.units.rewrite._r2t_histogram): items per
    unit 2, 1, 2, 1 and 39 rows of no unit (guest orders' 30, orphans' 9); COUNT(i.kind)
    the same (no NULL kind). Levels 2, 4, 8: 6 + 39 at each (before: 6 + 2, 4, 8)."""
    md = tiny.metadata(max_contribution=8)
    release, levels = _levels(database, md, "SELECT COUNT(*), COUNT(i.kind) FROM items i")
    assert len(release.parts) == 2
    assert levels == [[45, 45, 45], [45, 45, 45]]


def test_an_r2t_sum_adds_the_guest_orders_clamped_values_in_full(database):
    """SUM(amount) over [-3, 5]: the non-negative part's units 5, 0, 4, 1 and the guests'
    max(x, 0) of values clamped into [-3, 5] (20 per ten orders); the non-positive part's
    units 0, 1, 0, 0 and the guests' 6 per ten. Added in full at every level."""
    md = tiny.metadata(max_contribution=8)
    release, (pos, neg) = _levels(database, md, "SELECT SUM(amount) FROM orders")
    guests_pos = sum(max(min(o % 10 - 3, 5), 0) for o in GUESTS)
    guests_neg = sum(max(-(o % 10 - 3), 0) for o in GUESTS)
    assert (guests_pos, guests_neg) == (60, 18)
    units_pos, units_neg = [5, 0, 4, 1], [0, 1, 0, 0]
    for got, part, units, rest in ((pos, release.parts[0], units_pos, guests_pos),
                                   (neg, release.parts[1], units_neg, guests_neg)):
        bound, _ = part_grid(part, md.privacy_unit)
        want = [sum(min(c, t * bound) for c in units) + rest
                for t in part_levels(part, md.privacy_unit)]
        assert got == pytest.approx(want, abs=1e-9)


def test_a_two_stage_group_by_adds_the_rows_of_no_unit_to_every_group(database):
    """kappa = 1, C = 2: every customer is within the bounds (one kind, at most 2 items), so
    the release with the noise off is the plain GROUP BY -- the rows of no unit (10-15 per
    kind) in all three kinds, unclamped. Before: one kind, 2 rows of them."""
    md = tiny.metadata(max_contribution=8, max_groups=1, max_rows_per_group=2)
    sql = "SELECT kind, COUNT(*) AS n, SUM(qty) AS s FROM items GROUP BY kind"
    rows = sorted(_session(database, md).run(sql, epsilon=1.0).rows)
    want = sorted(_plain(database, sql.replace(" AS n", "").replace(" AS s", "")))
    assert [(k, n) for k, n, _ in rows] == [(k, n) for k, n, _ in want]
    assert [float(s) for _, _, s in rows] == [float(s) for _, _, s in want]
    assert all(n > 10 for _, n, _ in rows)


def test_the_unit_table_alone_counts_every_null_id(database):
    """The unit table read alone (two-stage at kappa = C = 1): the 3 customers with a NULL
    id count 3, not 1 -- 7 customers, and 4 / 3 per region."""
    md = tiny.metadata(max_contribution=8)
    session = _session(database, md)
    assert session.run("SELECT COUNT(*) AS n FROM customer", epsilon=1.0).rows == [(7,)]
    rows = session.run("SELECT region, COUNT(*) AS n FROM customer GROUP BY region",
                       epsilon=1.0).rows
    assert sorted(rows) == [(1, 4), (2, 3)]


def test_a_selected_groups_count_holds_the_rows_of_no_unit_in_full(database):
    """Partition selection at kappa = C = 1 with the shared COUNT(*) (its noisy values are the
    selection's ``__n``): each kind's count is its number of units (each clamped to 1 row)
    plus its rows of no unit, row by row. Before, they were one unit: 2-3 per kind."""
    base = tiny.metadata(max_contribution=8, max_groups=1, max_rows_per_group=1)
    items = base.tables["items"]
    kind = Column("kind", type="INTEGER", releasable=True, partition_selection=True)
    md = dataclasses.replace(base, tables={**base.tables, "items": dataclasses.replace(
        items, columns={**items.columns, "kind": kind})})
    sql = "SELECT kind, COUNT(*) AS n FROM items GROUP BY kind"
    _, selection = plan_with_selection(analyze_request(sql, md), Budget(10.0, 1e-5))
    assert selection.shared == 0  # the released counts are the selection's noisy __n
    assert selection.threshold is not None and selection.threshold <= 12  # all pass
    result = _session(database, md).run(sql, epsilon=10.0, delta=1e-5)
    # kind 1: units 1, 4 and 10 guest items; kind 2: unit 2, 10 guest and 5 orphan items;
    # kind 3: unit 3, 10 guest and 4 items of a NULL order
    assert sorted(result.rows) == [(1, 12), (2, 16), (3, 15)]


def test_rows_of_no_unit_are_added_in_full_on_every_backend(database, make_backend):
    """The two-stage's rows of no unit (the OR in its WHERE, the CASE around its clamp) and
    R2T's histogram on DuckDB and on Spark alike."""
    md = tiny.metadata(max_contribution=8, max_groups=1, max_rows_per_group=2)
    backend = make_backend(database, md)
    try:
        session = _session(database, md, backend)
        rows = session.run("SELECT kind, COUNT(*) AS n FROM items GROUP BY kind",
                           epsilon=1.0).rows
        assert sorted(rows) == [(1, 13), (2, 16), (3, 16)]
        analysis = analyze_request("SELECT COUNT(*) FROM items", md)
        plan = compile_plan(backend, plan_execution(analysis, md))
        assert [p.tolist() for p in read_truncated(backend, plan, [], analysis.unit)] == [
            [45, 45, 45]]
    finally:
        backend.close()
