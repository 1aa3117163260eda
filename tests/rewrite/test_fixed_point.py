"""dpsql.rewrite.fixed_point: DOUBLE values summed exactly as integers on a public grid.

The contract checked here, on the real DuckDB: each row adds an integer number of steps inside
the bounds' grid interval (whatever its value: NaN, infinities, -0.0, NULL, huge, tiny); a value
inside the bounds is rounded to the nearest step; the sum is the exact integer sum, so it does
not depend on the order of the rows or on DuckDB's threads (a DOUBLE sum does: the first test
shows it, so the others are not vacuous), and it moves between neighbours by exactly the removed
row's steps.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from dpsql.analysis.elastic import analyze
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.execute.exact import read_exact
from dpsql.metadata import loads_metadata
from dpsql.rewrite import fixed_point
from dpsql.rewrite.plan import plan_execution
from tests.db_files import writing


def _steps_sql(bounds: tuple[float, float], k: int) -> str:
    value = exp.TryCast(this=exp.column("v"), to=exp.DataType.build("DOUBLE"))
    return fixed_point.row_steps(value, bounds, k).sql("duckdb")


def _rows(con: duckdb.DuckDBPyConnection, values: list[float | None],
          bounds: tuple[float, float]) -> list[int | None]:
    k = fixed_point.exponent(max(abs(b) for b in bounds))
    con.execute("CREATE OR REPLACE TABLE t (i INTEGER, v DOUBLE)")
    con.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(values)))
    return [r[0] for r in con.execute(f"SELECT {_steps_sql(bounds, k)} FROM t ORDER BY i")
            .fetchall()]


def test_exponent_exact_values():
    # 2^k * top <= 2^53, the bound of larger magnitude on the grid
    assert fixed_point.exponent(1.0) == 52
    assert fixed_point.exponent(500.0) == 44
    assert fixed_point.exponent(0.1) == 56
    assert fixed_point.exponent(0.0) == 0
    assert fixed_point.exponent(1e300) == 53 - 997
    with pytest.raises(ValueError):
        fixed_point.exponent(math.inf)


@given(st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_subnormal=False),
       st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_subnormal=False))
@settings(max_examples=300, deadline=None)
def test_grid_interval_lies_in_the_bounds_and_is_never_empty(a, b):
    lo, hi = min(a, b), max(a, b)
    k = fixed_point.exponent(max(abs(lo), abs(hi)))
    steps_lo, steps_hi = fixed_point.grid_bounds(lo, hi, k)
    scale = Fraction(2) ** k
    assert steps_lo <= steps_hi
    assert Fraction(steps_lo) / scale >= Fraction(lo)
    assert Fraction(steps_hi) / scale <= Fraction(hi)
    assert max(abs(steps_lo), abs(steps_hi)) <= 2**53  # exact in DOUBLE and BIGINT


@pytest.mark.parametrize("bounds", [(0.0, 500.0), (0.1, 0.7), (-3.5, 2.25), (-1e-300, 1e-300),
                                    (0.0, 1e300), (-7.0, -7.0), (0.0, 0.0)])
def test_each_row_adds_steps_inside_the_bounds(bounds):
    con = duckdb.connect()
    lo, hi = bounds
    k = fixed_point.exponent(max(abs(lo), abs(hi)))
    steps_lo, steps_hi = fixed_point.grid_bounds(lo, hi, k)
    mid = (lo + hi) / 2
    values = [None, math.nan, math.inf, -math.inf, -0.0, 0.0, lo, hi, mid, 1e308, -1e308,
              5e-324, -5e-324, math.nextafter(hi, math.inf), math.nextafter(lo, -math.inf)]
    got = _rows(con, values, bounds)
    for value, steps in zip(values, got, strict=True):
        if value is None:
            assert steps is None  # SUM skips it
            continue
        assert steps_lo <= steps <= steps_hi, (value, steps)
        if math.isnan(value) or value > hi:
            assert steps == steps_hi  # NaN sorts above every number, as the DOUBLE clamp did
        elif value < lo:
            assert steps == steps_lo
        else:  # nearest step: within half a step of the value (or the grid's edge)
            exact = Fraction(value) * Fraction(2) ** k
            assert abs(Fraction(steps) - exact) <= Fraction(1, 2) or steps in (steps_lo,
                                                                               steps_hi)


def _cancelling_values(n: int, rng: random.Random) -> list[float]:
    """Values whose floating-point sum depends on the order: large ones that cancel, small
    ones that vanish next to them."""
    big = [rng.choice([1e15, -1e15, 3.3e14, -3.3e14]) for _ in range(n // 10)]
    small = [rng.uniform(-1, 1) * rng.choice([1e-3, 0.1, 7.0]) for _ in range(n - n // 10)]
    values = big + small
    rng.shuffle(values)
    return values


def _sum_both_ways(con: duckdb.DuckDBPyConnection, values: list[float],
                   bounds: tuple[float, float], threads: int) -> tuple[float, float]:
    k = fixed_point.exponent(max(abs(b) for b in bounds))
    con.execute(f"SET threads = {threads}")
    con.execute("CREATE OR REPLACE TABLE t AS SELECT v FROM (SELECT unnest(?) AS v)", [values])
    lo, hi = bounds
    steps = exp.Sum(this=exp.maybe_parse(_steps_sql(bounds, k), dialect="duckdb"))
    fixed = fixed_point.to_value(steps, k).sql("duckdb")
    (float_sum, fixed_sum), = con.execute(
        f"SELECT SUM(LEAST(GREATEST(v, {lo}), {hi})), {fixed} FROM t").fetchall()
    return float_sum, fixed_sum


def test_the_sum_does_not_depend_on_the_order_of_the_rows_or_the_threads():
    rng = random.Random(7)
    bounds = (-1e15, 1e15)
    values = _cancelling_values(250_000, rng)  # two row groups: a parallel aggregate
    con = duckdb.connect()
    float_sums, fixed_sums = set(), set()
    for threads in (1, 4):
        for _ in range(2):
            rng.shuffle(values)
            float_sum, fixed_sum = _sum_both_ways(con, values, bounds, threads)
            float_sums.add(float_sum)
            fixed_sums.add(fixed_sum)
    assert len(float_sums) > 1  # the DOUBLE sum is order-dependent: the test is not vacuous
    assert len(fixed_sums) == 1
    # and it is the exact sum of the rounded values, converted once
    k = fixed_point.exponent(1e15)
    exact = sum(round(Fraction(v) * 2**k) for v in values)  # every value on or inside the grid
    (got,) = fixed_sums
    assert abs(Fraction(got) - Fraction(exact) / 2**k) <= Fraction(abs(exact), 2**51 * 2**k)


def test_a_neighbour_moves_the_exact_sum_by_its_own_row():
    rng = random.Random(3)
    bounds = (-2.5, 1e6)
    values = _cancelling_values(2_000, rng)
    k = fixed_point.exponent(1e6)
    lo, hi = fixed_point.grid_bounds(*bounds, k)
    con = duckdb.connect()
    sql = f"SELECT SUM({_steps_sql(bounds, k)}) FROM t"
    con.execute("CREATE TABLE t AS SELECT v FROM (SELECT unnest(?) AS v)", [values])
    (whole,), = con.execute(sql).fetchall()
    for i in rng.sample(range(len(values)), 20):
        con.execute("CREATE OR REPLACE TABLE t AS SELECT v FROM (SELECT unnest(?) AS v)",
                    [values[:i] + values[i + 1:]])
        (without,), = con.execute(sql).fetchall()
        row = min(max(round(Fraction(values[i]) * 2**k), lo), hi)
        assert whole - without == row  # exactly: integers
        assert abs(whole - without) <= max(-lo, hi)  # the sensitivity the bounds give


def test_the_conversion_to_double_is_within_its_documented_bound():
    """HUGEINT -> DOUBLE in DuckDB rounds at most twice: within 2^-51 |S| of the exact sum."""
    con = duckdb.connect()
    rng = random.Random(11)
    for _ in range(200):
        s = rng.randrange(-(2**110), 2**110)
        (got,), = con.execute(f"SELECT CAST({s}::HUGEINT AS DOUBLE)").fetchall()
        assert abs(Fraction(got) - s) <= Fraction(abs(s), 2**51)


SHOP = """
tables:
  t:
    columns:
      id: {type: INTEGER, max_freq: 1}
      v: {type: DOUBLE, bounds: [-1000000000000000, 1000000000000000]}
"""


def test_the_engines_exact_read_is_the_same_in_any_row_order(tmp_path):
    """Through the planner and the backend (the row-level SUM and AVG a query runs)."""
    metadata = loads_metadata(SHOP)
    plan = plan_execution(analyze("SELECT SUM(v) AS s, AVG(v) AS a FROM t", metadata), metadata)
    assert "AS BIGINT" in plan.exact_sql and "ROUND(" in plan.exact_sql
    rng = random.Random(5)
    values = _cancelling_values(250_000, rng)  # two row groups: a parallel scan
    seen = set()
    for i in range(2):
        rng.shuffle(values)
        path = tmp_path / f"t{i}.duckdb"
        with writing(path) as con:
            con.execute("CREATE TABLE t AS SELECT (row_number() OVER ())::INTEGER AS id, v "
                        "FROM (SELECT unnest(?) AS v)", [values])
        backend = DuckDBBackend(str(path), metadata)
        try:
            bins = read_exact(backend, plan)
        finally:
            backend.close()
        seen.add(tuple(float(e[0]) for e in bins.exact))
    assert len(seen) == 1
