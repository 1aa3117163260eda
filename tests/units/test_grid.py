"""dpsql.units.grid: each R2T part's truncation grid -- rows for a COUNT, value units for a SUM
part (R2T's code) up to the owner's ``max_sum`` or ``max_contribution`` x the per-row bound --
exact values, refusals, and the engine's executed query and explain on it."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.analysis.explain import explain, explain_text
from dpsql.errors import NotSupportedError
from dpsql.metadata import PrivacyUnit
from dpsql.noise.r2t import truncated_sums
from dpsql.rewrite.plan import plan_execution
from dpsql.units.analysis import R2TPart
from dpsql.units.execute import truncated_levels, truncated_parts
from dpsql.units.grid import part_grid, part_levels, sum_top
from tests.units import tiny

COUNT = R2TPart(0, 1, 1.0, True)


def _unit(**kw) -> PrivacyUnit:
    return PrivacyUnit("customer", "c_id", **kw)


def test_a_count_keeps_its_rows_grid():
    unit = _unit(max_contribution=837339, level_base=5.5, max_sum=10)
    assert part_grid(COUNT, unit) == (1.0, 837339)
    assert part_levels(COUNT, unit) == (5, 30, 166, 915, 5032, 27680, 152243, 837339)


def test_a_sum_part_is_in_value_units_up_to_gs_times_the_bound():
    unit = _unit(max_contribution=8)
    assert part_grid(R2TPart(0, 1, 4.0, False), unit) == (1.0, 32)
    assert part_levels(R2TPart(0, 1, 4.0, False), unit) == (2, 4, 8, 16, 32)
    # the non-positive part of a SUM over [-3, 5]: bound 3, GS_value 24 -> 2 .. 32
    assert part_levels(R2TPart(0, -1, 3.0, False), unit) == (2, 4, 8, 16, 32)
    # exact rounding up, in rationals: 8 x 0.1 is 0.8 -> 1 value unit (one level, 2)
    assert sum_top(0.1, unit) == 1 and part_levels(R2TPart(0, 1, 0.1, False), unit) == (2,)
    assert sum_top(2.5, _unit(max_contribution=3)) == 8  # 7.5 rounded up


def test_the_owners_max_sum_sets_every_sum_grid():
    # R2T's Q18 setting: SUM(l_quantity) per customer on R2T's code's grid (5.5^j, GS 10^6)
    unit = _unit(max_contribution=837339, level_base=5.5, max_sum=837339)
    assert part_grid(R2TPart(0, 1, 50.0, False), unit) == (1.0, 837339)
    assert part_levels(R2TPart(0, 1, 50.0, False), unit) == (
        5, 30, 166, 915, 5032, 27680, 152243, 837339)
    # without it: 837339 x 50 value units, 11 levels
    plain = _unit(max_contribution=837339, level_base=5.5)
    assert part_grid(R2TPart(0, 1, 50.0, False), plain) == (1.0, 41866950)
    assert len(part_levels(R2TPart(0, 1, 50.0, False), plain)) == 11


def test_a_grid_beyond_2_62_is_refused():
    with pytest.raises(NotSupportedError, match="max_sum"):
        part_grid(R2TPart(0, 1, 1e15, False), _unit(max_contribution=2**20))
    with pytest.raises(NotSupportedError, match="max_sum"):  # the top level itself too large
        part_grid(R2TPart(0, 1, 1.0, False), _unit(max_contribution=2**62, level_base=3))


@pytest.mark.parametrize("max_sum", [None, 5])
def test_the_executed_sum_levels_are_the_value_grid_exactly(max_sum):
    md = tiny.metadata(max_contribution=8, max_sum=max_sum)
    sql = "SELECT SUM(qty) FROM items"
    analysis = analyze_request(sql, md)
    assert analysis.unit is not None
    (part,) = analysis.unit.parts
    exact_sql = plan_execution(analysis, md).exact_sql
    taus = (2, 4, 8) if max_sum == 5 else (2, 4, 8, 16, 32)  # GS_value 5, or 8 rows x 4
    assert part_levels(part, md.privacy_unit) == taus
    rng = random.Random(3)
    for _ in range(6):
        db = tiny.random_database(rng)
        db["items"] += [(o, 3, 1) for o, _, _ in db["orders"] for _ in range(rng.randint(0, 4))]
        con = tiny.load(db)
        rows = con.execute(exact_sql).fetchall()  # one per unit (dpsql.units.rewrite)
        owner = {o: c for o, c, _ in db["orders"]}
        sums: dict[int | None, float] = {}
        for order, qty, _ in db["items"]:
            u = owner.get(order)
            sums[u] = sums.get(u, 0.0) + min(max(qty, 0), 4)
        # the rows of no unit (orphan order 99) in full at every level, never truncated
        rest = sums.pop(None, 0.0)
        want = truncated_sums(np.array(list(sums.values()) or [0.0]), unit_bound=1.0,
                              max_contribution=taus[-1]) + rest
        # the levels (units alone) plus c_NULL: their totals as read_truncated's
        assert all(len(row) == 4 for row in rows)  # __nu, __q0, __z0, __k0
        (got,) = truncated_levels(rows, analysis.unit)
        assert np.allclose(got, want[:len(taus)], rtol=0, atol=1e-9)


def test_explain_shows_a_sums_value_grid():
    md = tiny.metadata(max_contribution=8, max_sum=5)
    report = explain("SELECT SUM(qty) FROM items", md, epsilon=1.0, delta=0.0)
    assert report["privacy_unit"]["max_sum"] == 5
    (part,) = report["measurements"][0]["parts"]
    assert part["level_unit"] == "value" and part["level_top"] == 5
    assert len(part["level_scales"]) == 3  # levels 2, 4, 8 value units
    text = explain_text("SELECT SUM(qty) FROM items", md, epsilon=1.0, delta=0.0)
    assert "levels in value units up to 5" in text


@pytest.mark.parametrize(("unit", "bound"), [(_unit(max_contribution=8), 4.0),
                                             (_unit(max_contribution=2**40), 1e6),
                                             (_unit(max_contribution=837339, level_base=5.5,
                                                    max_sum=837339), 0.001)])
def test_every_r2t_summand_stays_below_2_62_steps(unit, bound):
    """dpsql.units.grid.summand_exponent: the top level in steps 2^-k is below 2^62 and k is
    the largest such (a coarser grid would round the rows more than needed)."""
    from dpsql.analysis.model import Measurement
    from dpsql.units.analysis import UnitRelease
    from dpsql.units.grid import summand_exponent

    part = R2TPart(0, 1, bound, False)
    release = UnitRelease(unit, None, (part,))  # type: ignore[arg-type]  # source unused
    m = Measurement(0, "SUM", None, None, bounds=(0.0, bound))  # type: ignore[arg-type]
    k = summand_exponent(m, release)
    top = Fraction(max(part_levels(part, unit)))
    assert top * Fraction(2) ** k < 2**62 <= top * Fraction(2) ** (k + 1)


def _round_half_away(x: Fraction) -> int:
    """DuckDB's ROUND of a double, on its exact value."""
    return int(math.copysign(math.floor(abs(x) + Fraction(1, 2)), x)) if x else 0


def test_r2t_sums_of_doubles_are_exact_in_any_row_order():
    """A DOUBLE SUM under a unit: each level is the exact sum over units of the truncated
    per-unit sums of the rows' steps (computed here in rationals), converted once, whatever
    the order the rows were written in."""
    import dataclasses

    import duckdb

    from dpsql.rewrite.clamps import sum_exponent
    from dpsql.rewrite.fixed_point import grid_bounds

    base = tiny.metadata(max_contribution=8)
    items = base.tables["items"]
    qty = dataclasses.replace(items.columns["qty"], type="DOUBLE", bounds=(-1e12, 1e12))
    md = dataclasses.replace(base, tables={**base.tables, "items": dataclasses.replace(
        items, columns={**items.columns, "qty": qty})})
    analysis = analyze_request("SELECT SUM(qty) FROM items", md)
    assert analysis.unit is not None
    (m,) = analysis.measurements
    k = sum_exponent(m, analysis)
    exact_sql = plan_execution(analysis, md).exact_sql
    rng = random.Random(17)
    customers = [(c, 1) for c in range(1, 21)]
    orders = [(o, rng.randint(1, 20), 0) for o in range(1, 61)]
    values = [rng.choice([1e11, -1e11, 3.7e10]) if rng.random() < 0.2
              else rng.uniform(-1, 1) * 10 ** rng.randint(-3, 3) for _ in range(3000)]
    items_rows = [(rng.randint(1, 61), v, 1) for v in values]  # order 61: an orphan
    # the reference, in exact rationals
    owner = {o: c for o, c, _ in orders}
    lo, hi = grid_bounds(-1e12, 1e12, k)
    per_unit: dict[tuple[int | None, int], int] = {}
    for order, v, _ in items_rows:
        steps = min(max(_round_half_away(Fraction(v) * 2**k), lo), hi)
        for sign in (1, -1):
            key = (owner.get(order), sign)
            per_unit[key] = per_unit.get(key, 0) + max(sign * steps, 0)
    seen = set()
    for _ in range(2):
        rng.shuffle(items_rows)
        con = duckdb.connect()
        con.execute("CREATE TABLE customer (c_id INTEGER, region INTEGER)")
        con.execute("CREATE TABLE orders (o_id INTEGER, o_cust INTEGER, amount INTEGER)")
        con.execute("CREATE TABLE items (i_order INTEGER, qty DOUBLE, kind INTEGER)")
        con.execute("CREATE TABLE regions (r INTEGER)")
        con.executemany("INSERT INTO customer VALUES (?, ?)", customers)
        con.executemany("INSERT INTO orders VALUES (?, ?, ?)", orders)
        con.executemany("INSERT INTO items VALUES (?, ?, ?)", items_rows)
        parts = truncated_parts(con.execute(exact_sql).fetchall(), analysis.unit)
        con.close()
        row = tuple(v for levels, z in zip(parts.levels, parts.no_unit, strict=True)
                    for v in (*levels.tolist(), z))
        seen.add(row)
        got = iter(row)
        for part in analysis.unit.parts:
            for tau in part_levels(part, md.privacy_unit):
                cap = Fraction(tau) * 2**k
                # the units' truncated sums alone (c_NULL is the part's own column)
                want = sum(min(c, cap) for (u, sign), c in per_unit.items()
                           if sign == part.sign and u is not None)
                value = Fraction(next(got))
                exact = Fraction(want) / 2**k
                assert abs(value - exact) <= abs(exact) / 2**51, (tau, value, exact)
            # the rows of no unit (order 61) in full, never truncated, converted once too
            exact = Fraction(sum(c for (u, sign), c in per_unit.items()
                                 if sign == part.sign and u is None)) / 2**k
            value = Fraction(next(got))
            assert abs(value - exact) <= abs(exact) / 2**51, (value, exact)
    assert len(seen) == 1


def test_r2t_rows_are_clamped_at_the_top_level_and_k_is_never_negative():
    """A row above a part's top level cannot change a truncated sum, so R2T clamps rows there
    (each row's steps then fit BIGINT whatever the bounds), and k >= 0 keeps every level a
    whole number of steps (the noised increments' sensitivities: the red team's finding)."""
    import dataclasses

    from dpsql.rewrite.clamps import sum_bounds, sum_exponent
    from dpsql.units.grid import r2t_row_bounds

    base = tiny.metadata(max_contribution=8, max_sum=10)  # levels 2, 4, 8, 16 value units
    items = base.tables["items"]
    qty = dataclasses.replace(items.columns["qty"], type="DOUBLE", bounds=(-2.0**60, 2.0**60))
    md = dataclasses.replace(base, tables={**base.tables, "items": dataclasses.replace(
        items, columns={**items.columns, "qty": qty})})
    analysis = analyze_request("SELECT SUM(qty) FROM items", md)
    assert analysis.unit is not None
    (m,) = analysis.measurements
    assert r2t_row_bounds(m, analysis.unit) == sum_bounds(m, analysis) == (-16.0, 16.0)
    assert sum_exponent(m, analysis) == 48  # a row: 16 * 2^48 = 2^52 (the summand cap: 57)
    wide = dataclasses.replace(base.privacy_unit, max_sum=2**61)
    analysis = analyze_request("SELECT SUM(qty) FROM items",
                               dataclasses.replace(md, privacy_unit=wide))
    (m,) = analysis.measurements
    assert sum_exponent(m, analysis) == 0  # never negative: levels stay whole steps
