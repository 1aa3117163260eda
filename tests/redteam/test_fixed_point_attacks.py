"""Red team: the fixed-point sums themselves (dpsql.rewrite.fixed_point, main 7ccea40; docs/
privacy.md section 4, "Floating-point summation"): each clamped DOUBLE value an integer number
of steps 2^-k inside the bounds, summed exactly, converted to DOUBLE once. The harness:
tests/redteam/float_sums.py; the attacks on floating-point sums before the fix:
test_float_sum_attacks.py.

Held: the exact sums move by exactly the clamped values' move, plus the one conversion to
DOUBLE, measured (two people or rows at 1e16: a half ulp, 2) within the documented 2^-51 |S| per
value; every row adds a value inside [l, u] within half a step of it (NaN, +-inf, -0.0, NULL,
half steps rounding away from zero, bounds off the grid, negative, 1e-300, subnormal, 1e300),
with or without the CASE the stored data let go -- except next to a bound off the grid, up to a
whole step (documented as half: a contract nit, no privacy effect); sums past 2^63 steps exact;
R2T's levels equal an independent reference in exact rationals, people a step above, below and
on a level; brute force over every unit removal (R2T, two-stage, pairs) with such values, in
both storage orders; Spark computes the same values.

FIXED (was a strict xfail; now k >= 0 under R2T, dpsql.rewrite.clamps.sum_exponent): with bounds
>= 2^53 the grid step exceeded 1 (k < 0) and R2T's levels were floored onto it (base 2, bounds
2^54: level 2 to 0 steps, level 4 to one step of 4; base 5.5, bounds 2^53: level 5 to 4), so an
increment Q(tau_j) - Q(tau_(j-1)), which the default plan noises at the scale of
(tau_j - tau_(j-1)) b, moved by up to twice that for one person.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import pytest

from dpsql.budget import Budget
from dpsql.metadata import loads_metadata
from dpsql.rewrite.fixed_point import exponent
from dpsql.units.grid import part_grid, part_levels
from tests.db_files import writing
from tests.redteam.float_sums import (
    B53,
    ROW_MD,
    UNIT_MD,
    Query,
    excess,
    items_db,
    make_db,
    moves,
    pair_md,
    same,
    t_rows,
    unit_md,
    visits_db,
)

#: bounds [0, 1e16] sum in steps of 2 (k = -1): D's exact sum 1e16 + 3 steps is above 2^53
#: and converts to 1e16 + 4 (ties to even), D''s 5e15 + 3 steps converts exactly
CONVERSION_D = [1e16, 1e16, 6.0]
CONVERSION_D2 = [0.0, 1e16, 6.0]


def test_row_sum_moves_by_es_plus_at_most_the_conversion_residual(tmp_path):
    """The exact integer sums move by ES exactly; their one conversion to DOUBLE rounds D's
    up and D''s not at all: the released value moves by ES + 2 (one step of 2), within the
    documented residual. Measured, so that a change in the conversion shows here."""
    q = Query("SELECT SUM(v) FROM t", ROW_MD)
    got = q.exact(make_db(tmp_path / "d.duckdb", t_rows(CONVERSION_D)))
    got2 = q.exact(make_db(tmp_path / "d2.duckdb", t_rows(CONVERSION_D2)))
    [(move, claim, residual)] = moves(q, got, got2)
    assert move == claim + 2  # 2e16 + 8 - (1e16 + 6): the conversion's half ulp, attained
    assert move - claim <= residual


def test_r2t_top_level_moves_by_tau_plus_at_most_the_conversion_residual(tmp_path):
    """Person 1 reaches the top level 2^54 (2^53 steps of 2), person 2 adds 3 steps: Q(2^54)
    = 2^53 + 3 steps converts to 2^53 + 4; without person 1 it is 3 steps. The level moves by
    tau + 2, within the documented residual; every other level by at most tau."""
    q = Query("SELECT SUM(v) FROM visits", UNIT_MD)
    got = q.exact(make_db(tmp_path / "d.duckdb",
                          visits_db([(1, 1, B53), (1, 1, B53), (2, 1, 6.0)])))
    got2 = q.exact(make_db(tmp_path / "d2.duckdb", visits_db([(2, 1, 6.0)])))
    out = moves(q, got, got2)
    assert [m - c for m, c, _ in out if m > c] == [2]
    assert all(m - c <= r for m, c, r in out)


def test_two_stage_bin_moves_by_its_claim_plus_at_most_the_conversion_residual(tmp_path):
    """Two people at C * u = 2^53 (2^52 steps) and one adding 3 steps in the same group: the
    bin's exact sum 2^53 + 3 steps converts to 2^53 + 4."""
    q = Query("SELECT g, SUM(v) FROM visits GROUP BY g", UNIT_MD)
    got = q.exact(make_db(tmp_path / "d.duckdb",
                          visits_db([(1, 1, B53), (2, 1, B53), (3, 1, 6.0)])))
    got2 = q.exact(make_db(tmp_path / "d2.duckdb", visits_db([(2, 1, B53), (3, 1, 6.0)])))
    out = moves(q, got, got2)
    assert [m - c for m, c, _ in out if m > c] == [2]
    assert all(m - c <= r for m, c, r in out)


@pytest.mark.parametrize(("hi", "base", "value"), [("18014398509481984", None, 4.0),
                                                  ("1152921504606846976", None, 256.0),
                                                  ("9007199254740992", 5.5, 30.0)],
                         ids=["2^54", "2^60", "2^53_base_5.5"])
def test_r2t_increments_move_at_most_their_claim_when_one_unit_goes(hi, base, value):
    """The release noises the increments D_j = Q(tau_j) - Q(tau_(j-1)) at scale
    L (tau_j - tau_(j-1)) b / epsilon (dpsql.noise.r2t_plans.increment_plan), which needs
    each to move by at most (tau_j - tau_(j-1)) b. With bounds [0, 2^54] the grid step is 4
    (k = -2): level 2 truncates at floor(2 / 4) = 0 steps, level 4 at 1 step, so one person
    with one visit of 4.0 moves D_2 = Q(4) - Q(2) by 4 where 2 is claimed: twice that draw's
    share of epsilon (bounds [0, 2^60], step 256: D at tau = 256 moves by 256, 128 claimed;
    bounds [0, 2^53] with levels of base 5.5, step 2: level 5 is floored to 4, so the
    increment from 5 to 30 moves by 26, 25 claimed).
    Before the fix the levels were truncated at tau_j exactly. A level below one step, or
    off the grid, must not be floored below what the increments' scales assume: e.g. the
    plan's sensitivities from the floored levels, or k >= 0 while the bounds allow it (a
    row's t is then an integer-valued double, exact up to 2^62)."""
    from dpsql.units.noise import plan_r2t as plan_unit_r2t

    q = Query("SELECT SUM(v) FROM visits", unit_md("0", hi, 2, base))
    [plan] = plan_unit_r2t(q.analysis, Budget(1.0, 1e-6))
    assert plan.r2t is not None and all(part.increments for part in plan.r2t)
    [taus] = q.claimed()
    with q.in_memory() as run:
        [got] = run(visits_db([(1, 1, value)]))
        [got2] = run(visits_db([(2, 1, 0.0)]))
    bad = []
    for j in range(1, len(taus)):
        move = abs((Fraction(got[j]) - Fraction(got[j - 1]))
                   - (Fraction(got2[j]) - Fraction(got2[j - 1])))
        if move > Fraction(taus[j]) - Fraction(taus[j - 1]):
            bad.append((taus[j - 1], taus[j], move))
    assert not bad, bad


def test_many_rows_at_the_bound_sum_beyond_2_63_steps_exactly(tmp_path):
    """No 64-bit integer on the way: 4096 rows at 1e16 (5e15 steps each, 2^64.2 in all) in a
    row-level SUM; five people each at the two-stage's per-group clamp C * u = 512 * 2^53
    (2^61 steps each, 5 * 2^61 > 2^63 over units). Both exact."""
    path = tmp_path / "many.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE t AS SELECT i::INTEGER AS i, 1e16::DOUBLE AS v "
                    "FROM range(4096) r(i)")
        con.execute("CREATE TABLE people AS SELECT i::INTEGER AS pid FROM range(1, 6) r(i)")
        con.execute("CREATE TABLE visits AS SELECT p.pid AS v_pid, 1 AS g, "
                    f"{B53!r}::DOUBLE AS v FROM people p, range(512)")
    [got] = Query("SELECT SUM(v) FROM t", ROW_MD).exact(path)
    assert got.tolist() == [4096 * 1e16]
    [bins] = Query("SELECT g, SUM(v) FROM visits GROUP BY g",
                   unit_md("0", str(int(B53)), 512)).exact(path)
    assert bins.tolist() == [5 * 512 * B53, 0.0]


def single_rows(tmp_path: Path, bounds: tuple[str, str], values: Sequence[float | None],
                *, stored: bool = False) -> list[float]:
    """What each row of ``values`` adds alone: the exact bins of ``SELECT i, SUM(v) FROM t
    GROUP BY i`` (row i the only row of bin i), v DOUBLE with ``bounds`` (YAML numbers), on a
    database file holding ``values``."""
    domain = ", ".join(str(i) for i in range(len(values)))
    md = loads_metadata(f"tables:\n  t: {{columns: {{i: {{type: INTEGER, releasable: true, "
                        f"domain: {{values: [{domain}]}}}}, v: {{type: DOUBLE, "
                        f"bounds: [{bounds[0]}, {bounds[1]}]}}}}}}\n", "<float sums: edges>")
    path = make_db(tmp_path / f"edges{len(list(tmp_path.iterdir()))}.duckdb", t_rows(values))
    [sums] = Query("SELECT i, SUM(v) FROM t GROUP BY i", md).exact(path, stored=stored)
    return [float(x) for x in sums]


def test_non_finite_signed_zero_and_null_rows_add_what_the_contract_says(tmp_path):
    """NaN and +inf add the upper bound, -inf the lower, -0.0 and NULL nothing (bounds on the
    grid); the sum of an empty or zero set is +0.0, never -0.0 (it would leak a sign)."""
    got = single_rows(tmp_path, ("-4", "4"),
                      [float("nan"), float("inf"), float("-inf"), -0.0, None, 5.0, -5.0])
    assert got == [4.0, 4.0, -4.0, 0.0, 0.0, 4.0, -4.0]
    assert all(math.copysign(1.0, g) == 1.0 for g in got[3:5])


def _half_steps(k: int) -> list[float]:
    h = math.ldexp(1.0, -k - 1)  # half a step 2^-k
    below = h * (1 - 2**-53)  # 0.49999999999999994 steps: floor(x + 0.5) would give 1
    return [h, -h, 3 * h, -3 * h, 5 * h, 1 - h, -1 + h, 2 * h, 0.0, below, -below]


@pytest.mark.parametrize("stored", [False, True], ids=["clamped", "clamp_removed"])
def test_half_steps_round_away_from_zero(tmp_path, stored):
    """Bounds [-1, 1] (on the grid): a value half a step from the grid goes to the step
    farther from zero (ROUND), with and without the CASE the stored data let go."""
    k = exponent(1.0)
    values = _half_steps(k)
    got = single_rows(tmp_path, ("-1", "1"), values, stored=stored)
    step = Fraction(2) ** -k
    expected = [float(math.floor(abs(Fraction(v)) / step + Fraction(1, 2)) * step
                      * (1 if v >= 0 else -1)) for v in values]
    assert got == expected


@pytest.mark.parametrize(("bounds", "values"), [
    (("0.1", "0.7"), [0.1, 0.7, 0.05, 0.75, 0.3, 0.1 + 2**-56]),
    (("-0.7", "-0.1"), [-0.1, -0.7, -0.05, -0.75, -0.3]),
    (("-1.0e-300", "1.0e-300"), [0.0, -0.0, 1e-300, -1e-300, 5e-301, 5e-324, 2e-300]),
    (("0", "5.0e-324"), [0.0, 5e-324, 1.0]),
    (("0", "1.0e-310"), [0.0, 1e-310, 3e-311, 5e-324]),
    (("0", "1.0e+300"), [1e300, 3e299, 1.0, 0.0, 2e300]),
    (("-3.5e+15", "0.3"), [0.3, 0.1, -0.1, -3.5e15, 1.0]),
], ids=["off_grid", "negative", "tiny", "min_subnormal", "subnormal", "huge", "mixed"])
def test_each_row_adds_its_value_within_half_a_step_inside_the_bounds(tmp_path, bounds, values):
    """What a row adds lies inside [l, u] and within half a step 2^-k-1 <= 2^-53 max(|l|, |u|)
    of its value clamped into them (the contract's rounding error): bounds off the grid ([0.1,
    0.7]), negative, tiny (1e-300, subnormal: k beyond 1000, 2^k written as two factors), huge
    (1e300). Except next to a bound off the grid: a value whose nearest step lies outside the
    bounds goes to the first step inside, up to one whole step away (0.1 in [0.1, 0.7] adds
    ceil(0.1 2^53) 2^-53 = 0.1 + 0.8 * 2^-53; privacy is unaffected, the row stays in [l, u])."""
    lo, hi = float(bounds[0]), float(bounds[1])
    step = Fraction(2) ** -exponent(max(abs(lo), abs(hi)))
    got = single_rows(tmp_path, bounds, values)
    for v, g in zip(values, got, strict=True):
        clamped = Fraction(min(max(v, lo), hi))
        nearest = round(clamped / step) * step  # ties do not occur in these values
        tol = step / 2 if Fraction(lo) <= nearest <= Fraction(hi) else step
        assert lo <= g <= hi, (v, g)
        assert abs(Fraction(g) - clamped) <= tol <= Fraction(max(abs(lo), abs(hi))) / 2**52, (
            v, g)

#: (bounds, values a row may hold): off the grid, and at 2^53 where the sums over units pass
#: 2^53 steps (the conversion rounds)
UNIT_WORLDS = [
    (("-0.7", "0.7"), [0.7, -0.7, 0.1, -0.1, 0.35, 2**-54, -(2**-54), float("nan"),
                       float("inf"), float("-inf"), -0.0, None, 5.0]),
    (("-9007199254740992", "9007199254740992"), [B53, -B53, B53 - 2, 6.0, -6.0, 3.0, 1.0,
                                                  float("nan"), None]),
]


@pytest.mark.parametrize("sql", ["SELECT SUM(v) FROM visits",
                                 "SELECT g, SUM(v) FROM visits GROUP BY g"],
                         ids=["r2t", "two_stage"])
@pytest.mark.parametrize("world", range(len(UNIT_WORLDS)), ids=["off_grid", "at_2_53"])
def test_unit_sums_over_every_removal_of_small_databases(tmp_path, sql, world):
    """Brute force: random databases of 3 people with 0-3 visits each, every removal of one
    person (with their visits): each level / bin moves by at most its claim plus the
    documented conversion residual, and a database's value does not depend on the order its
    rows are stored in."""

    (lo, hi), pool = UNIT_WORLDS[world]
    q = Query(sql, unit_md(lo, hi, 2))
    rng = random.Random(world)
    with q.in_memory() as run:
        for _ in range(6):
            rows = [(p, rng.choice([1, 2]), rng.choice(pool))
                    for p in (1, 2, 3) for _ in range(rng.randint(0, 3))]
            base = run(visits_db(rows))
            assert same([base, run(visits_db(rows[::-1]))]), rows
            for gone in (1, 2, 3):
                other = run(visits_db([r for r in rows if r[0] != gone]))
                for move, claim, residual in moves(q, base, other):
                    assert move <= claim + residual, (rows, gone, move, claim)


@pytest.mark.spark
def test_fixed_point_sums_are_the_same_on_spark_and_duckdb(tmp_path, spark):
    """Spark rounds (ROUND: half up on the decimal form), compares NaN, sums DECIMAL(38, 0)
    and converts to DOUBLE by its own code: the same exact values as DuckDB on half steps,
    non-finite values, signed zeros and NULLs, a sum that the conversion rounds, in a
    row-level SUM and R2T. (Before the fix, a DOUBLE SUM over 983,040 rows
    read by Spark, sequentially, differed from DuckDB's parallel one in the 14th digit.)"""
    values = [*_half_steps(exponent(1.0)), float("nan"), float("inf"), float("-inf"), -0.0,
              None, 0.3, -0.7]
    md = loads_metadata("tables:\n  t: {columns: {i: {type: INTEGER}, v: {type: DOUBLE, "
                        "bounds: [-1, 1]}}}\n", "<float sums: spark>")
    cases = [(Query("SELECT SUM(v) FROM t", md), t_rows(values)),
             # an exact sum above 2^53 steps: Spark's DECIMAL -> DOUBLE conversion
             (Query("SELECT SUM(v) FROM t", ROW_MD), t_rows(CONVERSION_D)),
             # R2T: per-unit sums, truncations and the sum over units, all in steps (the
             # two-stage's sums over units are the same DECIMAL(38, 0) sums of steps: DuckDB
             # only, to keep the Spark group short)
             (Query("SELECT SUM(v) FROM visits", unit_md("-0.7", "0.7", 2)),
              visits_db([(1 + i % 3, 1, v) for i, v in enumerate(values)]))]
    for n, (q, tables) in enumerate(cases):
        path = make_db(tmp_path / f"s{n}.duckdb", tables)
        on_duckdb = q.exact(path)
        on_spark = q.on_spark(path, tmp_path / f"parquet{n}", spark)
        assert same([on_duckdb, on_spark]), ([a.tolist() for a in on_duckdb],
                                             [a.tolist() for a in on_spark])

def _steps_ref(v: float | None, lo: float, hi: float, k: int) -> int:
    """One row's steps by the contract, independently, in exact rationals: t = v 2^k; below
    L = ceil(l 2^k): L; above U = floor(u 2^k) (or NaN): U; else t rounded half away from 0."""
    lo_s = math.ceil(Fraction(lo) * 2**k) if k >= 0 else math.ceil(Fraction(lo) / 2**-k)
    hi_s = math.floor(Fraction(hi) * 2**k) if k >= 0 else math.floor(Fraction(hi) / 2**-k)
    if v is None:
        return 0
    if math.isnan(v) or v == math.inf:
        return hi_s
    if v == -math.inf:
        return lo_s
    t = Fraction(v) * Fraction(2) ** k
    if t < lo_s:
        return lo_s
    if t > hi_s:
        return hi_s
    r = math.floor(abs(t) + Fraction(1, 2))
    return r if t >= 0 else -r


def test_r2t_levels_are_the_truncated_sums_on_the_grid():
    """R2T's Q(tau_j) against the contract computed here: each row's steps (_steps_ref), c_u
    their sum per person, min(c_u, floor(tau_j 2^k)) summed over people and converted once
    (correctly rounded, as DuckDB converts). Bounds [0, 0.7] (k = 53, levels 2 and 4): rows a
    half step (2^-54) around 0.5 put people a step or two above or below level 2."""

    from dpsql.rewrite.clamps import sum_exponent

    q = Query("SELECT SUM(v) FROM visits", unit_md("0", "0.7", 4))
    [m] = q.analysis.measurements
    k = sum_exponent(m, q.analysis)
    assert q.analysis.unit is not None
    [part] = q.analysis.unit.parts
    taus = [t * part_grid(part, q.analysis.unit.unit)[0]
            for t in part_levels(part, q.analysis.unit.unit)]
    assert (k, taus) == (53, [2.0, 4.0])
    half = 2.0**-54
    pool = [0.5, 0.5, 0.5, 0.5 + half, 0.5 - half, 0.5 + 3 * half, 0.25, 0.7, 0.75, 0.1,
            float("nan"), None, -0.0]
    rng = random.Random(7)
    with q.in_memory() as run:
        edge = [(1, 1, 0.5 + half), (2, 1, 0.5 - half)] + [(p, 1, 0.5) for p in (1, 2, 3)
                                                           for _ in range(3)] + [(3, 1, 0.5)]
        for n in range(12):
            rows = edge if n == 0 else [(p, 1, rng.choice(pool)) for p in (1, 2, 3)
                                        for _ in range(rng.randint(0, 5))]
            [got] = run(visits_db(rows))
            c = {p: sum(_steps_ref(v, 0.0, 0.7, k) for q_, _, v in rows if q_ == p)
                 for p in (1, 2, 3)}
            want = [float(Fraction(sum(min(cu, math.floor(Fraction(tau) * 2**k))
                                      for cu in c.values())) / 2**k) for tau in taus]
            assert got.tolist() == want, rows


@pytest.mark.parametrize("world", range(len(UNIT_WORLDS)), ids=["off_grid", "at_2_53"])
def test_pair_sums_over_every_removal_of_small_databases(world):
    """The same brute force for a SUM over two units (each pair's psi summed in steps and
    converted once, then the flow): every level moves by at most tau_j when one customer or
    one supplier goes (psi is a function of the pair's rows, the levels exact multiples of
    delta_j: no residual), and the storage order changes nothing."""

    (lo, hi), pool = UNIT_WORLDS[world]
    q = Query("SELECT SUM(v) FROM items", pair_md(lo, hi))
    rng = random.Random(10 + world)
    with q.in_memory() as run:
        for _ in range(4):
            rows = [(rng.randint(1, 2), rng.randint(1, 2), rng.choice(pool))
                    for _ in range(rng.randint(1, 5))]
            base = run(items_db(rows))
            assert same([base, run(items_db(rows[::-1]))]), rows
            for column, gone in itertools.product((0, 1), (1, 2)):
                other = run(items_db([r for r in rows if r[column] != gone]))
                assert not excess(q, base, other), (rows, column, gone)
