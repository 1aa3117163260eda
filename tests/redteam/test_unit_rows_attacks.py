"""Red team of the one-unit SUM levels summed in Python (96fc98d, issue #17).

Under ONE privacy unit, an R2T query with a SUM part used to return one row of L truncated sums
per part, each ``CAST(SUM(CAST(CASE WHEN __u IS NULL THEN 0 ELSE LEAST(p, T_j) END AS
DECIMAL(38, 0))) AS DOUBLE) * 2^-k``, and c_NULL the same way. It now returns one row per unit
(``__nu``, per part ``__q<i>`` = CAST(LEAST(p, T_top) AS BIGINT), ``__z<i>``, ``__k<i>``), and
dpsql.units.execute.levels_from_units sums min(q, T_j) per level in exact integers and converts
each total once with ``math.ldexp(float(total), -k)``. The claims attacked:

1. the same levels and c_NULL as the old query, bit for bit: :func:`old_query` rebuilds the
   old outer SELECT (96fc98d^'s ``_r2t``, with the same helpers of dpsql.units.rewrite) over
   the new query's own per-unit subquery ``__c`` and runs it on the same backend; compared on
   the tiny shop (random and NULL-heavy databases, every SUM shape: signed, COUNT + SUM, AVG,
   joins, bases 2, 2.5 and 3, max_sum) and on "big" worlds built to stress the one conversion:
   totals past 2^53, 2^63 and 2^64 (rounding ties included), k = 0 with a top level of 2^62,
   k = 41, 52 and 60, two signed parts, COUNT + SUM and AVG. DuckDB's DECIMAL(38, 0) ->
   DOUBLE cast is compared with Python's ``float(int)`` on 20,000 integers built at and around
   the half-ulp of every binade from 2^53 to 2^125 too;
2. no data-dependent error: a unit whose sum is 2^65 steps (p past BIGINT: only its LEAST is
   cast), c_NULL of 2^72 steps, empty tables, only rows of no unit, NULL ids and orphans,
   NaN / inf rows, a thousand units at 2^62 steps each (2^72 in all) read without error and
   to their exact values;
3. R2T's precondition: every neighbour (one unit and its cascade removed) of tiny databases
   moves each level down by at most tau_j (exact rationals; past 2^53 plus the documented
   conversion residual), each increment by at most tau_j - tau_(j-1), and c_NULL not at all;
4. Spark (marked ``spark``) returns the same levels and c_NULL as DuckDB, bit for bit, on the
   same worlds.

Verification of the oracle: :func:`old_query`'s text equals 96fc98d^'s own exact SQL on 144
cases (every shop query and metadata here, every big world's queries), and 96fc98d^'s engine
(a second worktree) read 112 big-world cases to the same levels and c_NULL, bit for bit, as
96fc98d's (a scratch run, not kept).

Result. Claims 1, 3 and 4 held (bit-identical levels and c_NULL; DuckDB's cast is correctly
rounded like ``float(int)``; every neighbour within tau_j, with the documented residual at and
past 2^53 steps, unchanged: :func:`test_a_level_at_2_53_steps_rounds_as_the_old_querys_did`).
Claim 2 held for the BIGINT cast and levels_from_units, but BROKE on Spark: the per-unit rows
were collected to the driver, so ``spark.driver.maxResultSize`` turned the number of units into
an error of the exact read, which the session refunds
(:func:`test_spark_reads_a_sum_over_many_units_as_it_reads_few`, a strict xfail until Spark
read the one-row query instead: dpsql.units.rewrite.one_row_levels; it passes now).

``DPSQL_REDTEAM_DBS`` (default 1: the suite's budget) sets the number of random databases per
world (and scales the big worlds' seeds; above 2, Spark runs every world): 30 is a deeper run
(~1-2 minutes).
"""

from __future__ import annotations

import math
import os
import random
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import duckdb
import numpy as np
import pytest
import sqlglot
from sqlglot import exp

from dpsql.analysis.blocks import analyze_request
from dpsql.backends.base import Backend
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import OperationalError
from dpsql.execute.exact import CompiledPlan, compile_plan
from dpsql.metadata import Metadata, loads_metadata
from dpsql.rewrite.plan import plan_execution
from dpsql.units import rewrite as rw
from dpsql.units.analysis import UnitRelease
from dpsql.units.execute import Truncated, levels_from_units, read_truncated_parts
from dpsql.units.grid import part_grid, part_levels
from tests.db_files import insert_many
from tests.units import tiny

DBS = int(os.environ.get("DPSQL_REDTEAM_DBS", "1"))

Tables = dict[str, tuple[Sequence[str], Sequence[tuple[Any, ...]]]]

# ------------------------------------------------------------------------ the old query


def old_query(exact_sql: str, release: UnitRelease) -> str:
    """96fc98d^'s R2T query (one row: per part L truncated sums ``__r<i>_<j>``, then
    ``__z<i>``), rebuilt with the same helpers of dpsql.units.rewrite over the per-unit
    subquery ``__c`` of ``exact_sql`` (the new query; the part's k read from its ``__k<i>``
    literal), in DuckDB's dialect."""
    new = sqlglot.parse_one(exact_sql, read="duckdb")
    assert isinstance(new, exp.Select)
    ks = {e.alias: int(e.this.to_py()) for e in new.expressions
          if isinstance(e, exp.Alias) and e.alias.startswith("__k")}
    source = new.args["from_"].this
    assert isinstance(source, exp.Subquery) and source.alias == "__c", source
    outer = exp.Select()
    for i, part in enumerate(release.parts):
        unit_bound, _ = part_grid(part, release.unit)
        k = ks[f"__k{i}"]
        for j, tau in enumerate(part_levels(part, release.unit)):
            cap = Fraction(tau) * Fraction(unit_bound)
            value = rw._col(f"__p{i}", "__c")
            if part.integer:
                total = rw._count_total(rw._by_unit("__c", rw._zero(),
                                                    rw._least(value, int(cap))))
            else:
                least = rw._least(value, rw._steps(cap, k))
                total = rw._steps_total(rw._by_unit("__c", rw._zero(), least), k)
            outer.select(exp.alias_(total, f"__r{i}_{j}"), copy=False)
        no_unit = rw._by_unit("__c", rw._in_full(rw._col(f"__p{i}", "__c")), rw._zero())
        total = rw._count_total(no_unit) if part.integer else rw._steps_total(no_unit, k)
        outer.select(exp.alias_(total, f"__z{i}"), copy=False)
    outer.from_(source.copy(), copy=False)
    return outer.sql(dialect="duckdb")


def old_parts(rows: Sequence[Sequence[Any]], release: UnitRelease) -> Truncated:
    """96fc98d^'s ``truncated_parts`` of the one row (a NULL sum, over no unit, is 0)."""
    assert len(rows) == 1
    row, start = rows[0], 0
    levels, no_unit = [], []
    for part in release.parts:
        n = len(part_levels(part, release.unit))
        values = [0 if v is None else v for v in row[start:start + n + 1]]
        start += n + 1
        levels.append(np.array(values[:n], dtype=np.int64 if part.integer else np.float64))
        no_unit.append(float(values[n]))
    assert start == len(row)
    return Truncated(levels, no_unit)


def part_ks(exact_sql: str, n: int) -> list[int]:
    """Per part, its ``__k<i>`` literal in the new query."""
    new = sqlglot.parse_one(exact_sql, read="duckdb")
    ks = {e.alias: int(e.this.to_py()) for e in new.expressions
          if isinstance(e, exp.Alias) and e.alias.startswith("__k")}
    return [ks[f"__k{i}"] for i in range(n)]


def bits(parts: Truncated) -> list[tuple[str, list[Any]]]:
    """``parts`` in a form compared bit for bit (the levels' dtype and bytes, c_NULL's)."""
    out: list[tuple[str, list[Any]]] = []
    for lv, z in zip(parts.levels, parts.no_unit, strict=True):
        out.append((str(lv.dtype), [float(v).hex() if lv.dtype.kind == "f" else int(v)
                                    for v in lv.tolist()]))
        out.append(("z", [float(z).hex()]))
    return out


# ------------------------------------------------------------------------------ the harness


@dataclass
class Runner:
    """One query planned once, run on an in-memory DuckDB behind dpsql's backend (tables
    replaced per database): the new levels as the engine reads them, the old query's, and the
    raw per-unit rows."""

    sql: str
    md: Metadata
    backend: Backend
    compiled: CompiledPlan
    release: UnitRelease
    old: str
    ks: list[int]  # per part, the k of its steps (the new query's ``__k<i>``)

    def load(self, tables: Tables) -> None:
        con = self.backend._con  # type: ignore[attr-defined]  # tables only; settings locked
        for name, (columns, rows) in tables.items():
            con.execute(f"CREATE OR REPLACE TABLE {name} ({', '.join(columns)})")
            if rows:
                insert_many(con, name, rows)

    def new_parts(self) -> Truncated:
        return read_truncated_parts(self.backend, self.compiled, (), self.release)

    def old_parts(self) -> Truncated:
        rows, _ = self.backend.execute(self.backend.compile(self.old), {})
        return old_parts(rows, self.release)

    def claims(self) -> list[list[Fraction]]:
        return [[Fraction(t) * Fraction(part_grid(p, self.release.unit)[0])
                 for t in part_levels(p, self.release.unit)] for p in self.release.parts]


#: the in-memory DuckDBBackend every runner of this module shares (module fixture below):
#: each runner loads its tables before reading, as it did on a backend of its own, and no
#: metadata here declares a file source (the only thing a backend takes from it); one
#: connection per module instead of one per runner (~15 ms each, ~120 runners)
_SHARED: list[DuckDBBackend] = []


@pytest.fixture(scope="module", autouse=True)
def _shared_backend() -> Iterator[None]:
    yield
    while _SHARED:
        _SHARED.pop().close()


@contextmanager
def runner(sql: str, md: Metadata, backend: Backend | None = None) -> Iterator[Runner]:
    analysis = analyze_request(sql, md)
    release = analysis.unit
    assert release is not None and release.r2t and not release.more, sql
    assert not rw.counts_only(release), "a SUM part: the per-unit rows"
    plan = plan_execution(analysis, md)
    if backend is None:
        assert not any(t.source for t in md.tables.values())
        if not _SHARED:
            _SHARED.append(DuckDBBackend(None, md))
        backend = _SHARED[0]
    compiled = compile_plan(backend, plan)
    yield Runner(sql, md, backend, compiled, release, old_query(plan.exact_sql, release),
                 part_ks(plan.exact_sql, len(release.parts)))


def shop_tables(db: tiny.Database) -> Tables:
    return {t: ([f"{c} INTEGER" for c in cols], db[t]) for t, cols in tiny.COLUMNS.items()}


SHOP_QUERIES = [
    "SELECT SUM(qty) FROM items",
    "SELECT SUM(amount) FROM orders",  # two parts (bounds [-3, 5])
    "SELECT COUNT(*), SUM(amount) FROM orders",
    "SELECT AVG(qty) FROM items WHERE kind > 1",
    "SELECT SUM(qty), AVG(qty) FROM orders o JOIN items i ON i.i_order = o.o_id "
    "WHERE o.amount > 0",
    "SELECT SUM(amount), COUNT(*) FROM orders o JOIN items i ON i.i_order = o.o_id",
    "SELECT SUM(i1.qty) FROM items i1 JOIN items i2 ON i1.i_order = i2.i_order",
    # two SUMs of different k (qty in [0, 4], amount in [-3, 5]): three parts, two exponents
    "SELECT SUM(qty), SUM(amount) FROM orders o JOIN items i ON i.i_order = o.o_id",
]

SHOP_MDS: dict[str, Callable[[], Metadata]] = {
    "base2": lambda: tiny.metadata(max_contribution=8),
    "base2.5": lambda: tiny.metadata(max_contribution=8, level_base=2.5),
    "max_sum5": lambda: tiny.metadata(max_contribution=8, max_sum=5),
    "max_sum3_base3": lambda: tiny.metadata(max_contribution=4, max_sum=3, level_base=3.0),
}


def shop_dbs(seed: int) -> list[tiny.Database]:
    rng = random.Random(seed)
    empty: tiny.Database = {"customer": [], "orders": [], "items": [], "regions": [(1,)]}
    only_no_unit: tiny.Database = {
        "customer": [(None, 1)], "orders": [(5, None, 4), (6, None, -3)],
        "items": [(99, 3, 1), (None, 4, 2), (5, 2, 1)], "regions": [(1,)]}
    out = [empty, only_no_unit]
    for _ in range(DBS):
        out.append(tiny.random_database(rng))
        out.append(tiny.null_heavy_database(rng))
    return out


# ------------------------------------------------------------------ claim 1: the same levels


@pytest.mark.parametrize("md_name", sorted(SHOP_MDS))
@pytest.mark.parametrize("sql", SHOP_QUERIES)
def test_shop_levels_are_the_old_querys_bit_for_bit(sql, md_name):
    with runner(sql, SHOP_MDS[md_name]()) as r:
        for db in shop_dbs(zlib.crc32(f"{sql}/{md_name}".encode())):
            r.load(shop_tables(db))
            assert bits(r.new_parts()) == bits(r.old_parts()), db


def big_md(lo: str, hi: str, c: int, *, max_sum: int | None = None, base: float = 2.0
           ) -> Metadata:
    """One unit (people) with visits(v_pid, v DOUBLE in [lo, hi]) (YAML numbers)."""
    extra = "" if max_sum is None else f", max_sum: {max_sum}"
    return loads_metadata(f"""
privacy_unit: {{table: people, column: pid, max_contribution: {c}, max_groups: 1,
               max_rows_per_group: 1, levels: {{base: {base}}}{extra}}}
tables:
  people: {{columns: {{pid: {{type: INTEGER}}}}}}
  visits:
    unit: v_pid
    columns:
      v_pid: {{type: INTEGER}}
      v: {{type: DOUBLE, bounds: [{lo}, {hi}]}}
""", "<unit rows red team>")


BIG_COLUMNS = {"people": ["pid INTEGER"], "visits": ["v_pid INTEGER", "v DOUBLE"]}


#: unit ids from here on have no people row (a direct path's value is the unit all the same)
ORPHAN = 10**6


def big_tables(rows: Sequence[tuple[int | None, float | None]]) -> Tables:
    people = sorted({p for p, _ in rows if p is not None and p < ORPHAN})
    return {"people": (BIG_COLUMNS["people"], [(p,) for p in people]),
            "visits": (BIG_COLUMNS["visits"], list(rows))}


@dataclass(frozen=True)
class World:
    """A big world: its metadata, its queries, and a generator of visits rows."""

    name: str
    md: Callable[[], Metadata]
    queries: tuple[str, ...]
    rows: Callable[[random.Random], list[tuple[int | None, float | None]]]
    k: int  # the SUM's k the world is built for (checked)


def _top62(rng: random.Random) -> list[tuple[int | None, float | None]]:
    """Units near and at the top level 2^62 (k = 0): 3-7 units at 2^61 or more per row (two
    rows reach 2^62), small odd and random units so the totals sit past 2^63 and 2^64 at every
    low bit, exact half-ulp ties among them; rows of no unit of 2^61 each (c_NULL past 2^64);
    NaN and inf rows (the top)."""
    rows: list[tuple[int | None, float | None]] = []
    pid = 1
    for _ in range(rng.randint(3, 7)):
        rows += [(pid, 2.0**61), (pid, rng.choice([2.0**61, 2.0**60, 1.5 * 2**61]))]
        pid += 1
    for tie in (2**11, 2**12, 3 * 2**11, 2**10 + 1, 2**11 + 1):  # ulp at 2^64 is 2^12
        if rng.random() < 0.6:
            rows.append((pid, float(tie)))
            pid += 1
    for _ in range(rng.randint(0, 4)):
        rows.append((pid, float(rng.randrange(1, 2**53, 2))))
        rows.append((pid, rng.choice([1.0, 3.0, float(rng.getrandbits(40)), math.nan,
                                      math.inf, -5.0, None])))
        pid += 1
    for _ in range(rng.randint(0, 8)):  # rows of no unit (NULL ids), units without a people row
        rows.append((rng.choice([None, ORPHAN + rng.randint(0, 2)]), rng.choice(
            [2.0**61, float(rng.randrange(1, 2**53, 2)), 1.0])))
    rng.shuffle(rows)
    return rows


def _signed(rng: random.Random) -> list[tuple[int | None, float | None]]:
    """Both signs at 2^60 and below (two parts, each with top 2^62 and k = 0)."""
    rows: list[tuple[int | None, float | None]] = []
    for pid in range(1, rng.randint(3, 9)):
        for _ in range(rng.randint(1, 4)):
            rows.append((pid, rng.choice([2.0**60, -(2.0**60), float(rng.randrange(-2**53, 2**53)),
                                          -1.0, 1.0, -math.inf, 0.0])))
    rows += [(None, -(2.0**60)), (None, float(rng.randrange(1, 2**20, 2)))]
    return rows


def _fractions(scale: float, units: int, per_unit: int) -> Callable[[random.Random], list[
        tuple[int | None, float | None]]]:
    """``units`` units of ``per_unit`` random doubles in [0, scale) (odd step counts: the
    totals past 2^53 steps round at the conversion), a few rows of no unit."""
    def make(rng: random.Random) -> list[tuple[int | None, float | None]]:
        rows: list[tuple[int | None, float | None]] = [
            (pid, rng.random() * scale) for pid in range(1, units + 1)
            for _ in range(rng.randint(1, per_unit))]
        rows += [(None, rng.random() * scale) for _ in range(rng.randint(0, 5))]
        return rows
    return make


_SUM = ("SELECT SUM(v) FROM visits", "SELECT COUNT(*), SUM(v) FROM visits",
        "SELECT AVG(v) FROM visits", "SELECT SUM(v), AVG(v) FROM visits v JOIN people p "
        "ON p.pid = v.v_pid")

WORLDS = [
    # bound 2^61, C = 2: GS 2^62, the top level 2^62 itself (k would be -1: clamped to 0)
    World("top2^62", lambda: big_md("0", str(2**61), 2), _SUM, _top62, 0),
    # max_sum just past 2^61: the top level 2^62 again, from the owner's bound
    World("max_sum2^61+1", lambda: big_md("0", str(2**61), 4, max_sum=2**61 + 1), _SUM,
          _top62, 0),
    # base 3 up to 3^39 (~2^61.8): levels past 2^53 that are not powers of two
    World("base3", lambda: big_md("0", str(2**61), 2, max_sum=3**38 + 1, base=3.0), _SUM,
          _top62, 0),
    World("signed", lambda: big_md(str(-(2**61)), str(2**61), 2), _SUM, _signed, 0),
    # bound 1, C = 2^20: k = 41, 30 units of up to 600 random fractions (totals past 2^53 steps)
    World("k41", lambda: big_md("0", "1", 2**20), _SUM, _fractions(1.0, 30, 600), 41),
    # bound 1, C = 2: the top level 2 (k = 52), every unit past it
    World("k52", lambda: big_md("0", "1", 2), _SUM, _fractions(1.0, 40, 6), 52),
    # bound 2^-8, C = 2 (GS 1, the top level 2): k = 60 (the row and the level exponents agree)
    World("k60", lambda: big_md("0", "0.00390625", 2), _SUM, _fractions(2.0**-8, 30, 200), 60),
]


@pytest.mark.parametrize("world", WORLDS, ids=lambda w: w.name)
def test_big_levels_are_the_old_querys_bit_for_bit(world):
    """Totals past 2^53, 2^63 and 2^64 steps (ties included), k from 0 to 60, two parts,
    COUNT + SUM and AVG: the new levels and c_NULL are the old query's, bit for bit; and
    some level did round (the conversion was exercised, not bypassed)."""
    rounded = 0
    for sql in world.queries:
        with runner(sql, world.md()) as r:
            assert max(r.ks) == world.k, (world.name, max(r.ks))
            for seed in range(DBS):
                rng = random.Random(f"{world.name}/{sql}/{seed}")
                r.load(big_tables(world.rows(rng)))
                new, old = r.new_parts(), r.old_parts()
                assert bits(new) == bits(old), (sql, seed)
                rounded += sum(1 for lv in new.levels if lv.dtype.kind == "f"
                               for v in lv.tolist() if abs(v) * 2.0**world.k > 2.0**53)
    assert rounded, "no level past 2^53 steps: the world does not reach the conversion"


def test_duckdbs_decimal_to_double_cast_is_pythons_float_of_the_int():
    """The old levels' conversion (CAST of a DECIMAL(38, 0) SUM to DOUBLE) against
    ``float(int)`` (correctly rounded) on integers at, just below and just above the half-ulp
    of random binades from 2^53 to 2^125 (ties to even, and the sticky bits below 2^64 that a
    double-rounding cast through two 64-bit halves would lose)."""
    rng = random.Random(17)
    values = []
    for _ in range(4000):
        e = rng.randint(53, 125)
        base = (rng.getrandbits(52) | (1 << 52)) << (e - 52)
        half = 1 << (e - 53)
        for d in (half, half - 1, half + 1, -half, half + (1 << rng.randint(0, max(0, e - 54)))):
            values.append(base + d)
    values += [2**65 + 2**54 + 2**12 + 1, 2**64 + 2**11 + 1, 2**64 + 2**11, 2**64 + 3 * 2**11]
    con = duckdb.connect()
    try:
        con.execute("CREATE TABLE t (i INTEGER, x DECIMAL(38, 0))")
        insert_many(con, "t", [(i, str(v)) for i, v in enumerate(values)])
        got = con.execute("SELECT CAST(SUM(x) AS DOUBLE) FROM t GROUP BY i ORDER BY i").fetchall()
    finally:
        con.close()
    bad = [(v, g) for v, (g,) in zip(values, got, strict=True) if g != float(v)]
    assert not bad, bad[:5]


# ------------------------------------------------------------- claim 2: no data-dependent error


def test_a_unit_past_bigint_and_a_huge_c_null_read_exactly():
    """max_sum 2^62 and C = 8 rows of 2^62 each: a unit's p is 2^65 steps (past BIGINT: only
    its LEAST, at most 2^62, is cast), a thousand units at the top (2^72 in all: past int64,
    summed in halves), and 2^10 rows of no unit at 2^62 (c_NULL 2^72): no error, every level
    the exact sum converted once."""
    md = big_md("0", str(2**62), 8, max_sum=2**62)
    with runner("SELECT SUM(v) FROM visits", md) as r:
        assert max(r.ks) == 0
        rows: list[tuple[int | None, float | None]] = [(1, 2.0**62)] * 8
        rows += [(p, 2.0**62) for p in range(2, 1002)]
        rows += [(None, 2.0**62)] * 2**10 + [(None, 1.0)]
        r.load(big_tables(rows))
        new = r.new_parts()
        levels = part_levels(r.release.parts[0], r.release.unit)
        want = [float(min(8 * 2**62, t) + 1000 * min(2**62, t)) for t in levels]
        assert new.levels[0].tolist() == want
        assert new.no_unit == [float(2**10 * 2**62 + 1)]
        assert bits(new) == bits(r.old_parts())


@pytest.mark.parametrize("tables", [
    {"people": [], "visits": []},
    {"people": [(1,)], "visits": []},                        # a unit with no row
    {"people": [], "visits": [(None, 5.0), (7, 3.0)]},       # only rows of no unit (7: orphan)
    {"people": [(1,)], "visits": [(1, None), (None, None)]},  # NULL values only
    {"people": [(1,), (2,)], "visits": [(1, math.nan), (2, -math.inf), (None, math.inf)]},
], ids=["empty", "unit-without-rows", "no-unit-only", "null-values", "nan-inf"])
def test_legitimate_corner_databases_read_without_error(tables):
    md = big_md(str(-(2**40)), str(2**40), 4)
    for sql in _SUM:
        with runner(sql, md) as r:
            r.load({"people": (BIG_COLUMNS["people"], tables["people"]),
                    "visits": (BIG_COLUMNS["visits"], tables["visits"])})
            assert bits(r.new_parts()) == bits(r.old_parts()), sql


def test_levels_from_units_takes_every_column_form_a_backend_returns():
    """The columns as DuckDB's fetchnumpy (typed, masked) and as Spark's rows (object
    arrays of Python ints, bools, floats and None) give the same levels; no row, only the
    row of no unit, and unsigned / int32 columns too."""
    md = big_md("0", str(2**61), 2)
    release = analyze_request("SELECT SUM(v) FROM visits", md).unit
    assert release is not None
    q = [2**62, 2**62 - 1, 1, 0, 3, 2**62]
    typed = [np.ma.masked_array([False] * 6 + [True]),
             np.ma.masked_array([*q, 7], dtype=np.int64),
             np.ma.masked_array([0.0] * 6 + [1.5e30], mask=[True] * 6 + [False]),
             np.ma.masked_array([0] * 7, dtype=np.int32)]
    objects = [np.array(c.filled(0).tolist() if i != 2 else [None] * 6 + [1.5e30],
                        dtype=object) for i, c in enumerate(typed)]
    unsigned = [typed[0], np.ma.masked_array([*q, 7], dtype=np.uint64), typed[2], typed[3]]
    got = [bits(levels_from_units(cols, release)) for cols in (typed, objects, unsigned)]
    assert got[0] == got[1] == got[2]
    levels = part_levels(release.parts[0], release.unit)
    assert levels_from_units(typed, release).levels[0].tolist() == [
        float(sum(min(x, t) for x in q)) for t in levels]
    empty = [np.empty(0, dtype=object) for _ in range(4)]
    assert levels_from_units(empty, release).levels[0].tolist() == [0.0] * len(levels)
    alone = [np.array([True]), np.array([5]), np.array([2.5]), np.array([0])]
    parts = levels_from_units(alone, release)
    assert parts.levels[0].tolist() == [0.0] * len(levels) and parts.no_unit == [2.5]


# ---------------------------------------------------------- claim 3: R2T's precondition


def _check_neighbour(r: Runner, d: Truncated, d2: Truncated, where: str) -> None:
    """``d2`` (one unit and its cascade removed) against ``d``: each level down by at most
    tau_j b, never up; each increment by at most tau_j - tau_(j-1), never negative; c_NULL the
    same. A level at or past 2^53 steps is rounded at its one conversion (as the old query's
    was, bit for bit): there each bound gets the documented residual, 2^-52 of each value
    (docs/privacy.md section 4; tests/redteam/float_sums.py's conversion_residual)."""
    assert d.no_unit == d2.no_unit, where
    for claims, k, a, b in zip(r.claims(), r.ks, d.levels, d2.levels, strict=True):
        xs = [Fraction(v) for v in a.tolist()]
        ys = [Fraction(v) for v in b.tolist()]
        slack = [(abs(x) + abs(y)) / 2**52 if max(abs(x), abs(y)) * Fraction(2) ** k >= 2**53
                 else Fraction(0) for x, y in zip(xs, ys, strict=True)]
        for j, (x, y, tau) in enumerate(zip(xs, ys, claims, strict=True)):
            assert y <= x, f"{where}: level {j} went up {x} -> {y}"
            assert x - y <= tau + slack[j], f"{where}: level {j} moved {x - y} > {tau}"
            if j:
                inc = (xs[j] - xs[j - 1]) - (ys[j] - ys[j - 1])
                room = slack[j] + slack[j - 1]
                assert -room <= inc <= tau - claims[j - 1] + room, (
                    f"{where}: increment {j} moved {inc}")


@pytest.mark.parametrize("md_name", sorted(SHOP_MDS))
@pytest.mark.parametrize("sql", SHOP_QUERIES)
def test_shop_neighbours_move_each_level_by_at_most_tau(sql, md_name):
    with runner(sql, SHOP_MDS[md_name]()) as r:
        for db in shop_dbs(zlib.crc32(f"{sql}/{md_name}/n".encode()))[2:]:
            r.load(shop_tables(db))
            d = r.new_parts()
            for u in tiny.units(db):
                r.load(shop_tables(tiny.remove_unit(db, u)))
                _check_neighbour(r, d, r.new_parts(), f"{db} minus unit {u}")


@pytest.mark.parametrize("world", [w for w in WORLDS if w.name in ("top2^62", "signed", "k52")],
                         ids=lambda w: w.name)
def test_big_neighbours_move_each_level_by_at_most_tau(world):
    sql = "SELECT COUNT(*), SUM(v) FROM visits"
    with runner(sql, world.md()) as r:
        for seed in range(max(1, DBS // 2)):
            rows = world.rows(random.Random(f"{world.name}/n/{seed}"))
            r.load(big_tables(rows))
            d = r.new_parts()
            for u in sorted({p for p, _ in rows if p is not None}):
                r.load(big_tables([row for row in rows if row[0] != u]))
                _check_neighbour(r, d, r.new_parts(), f"{world.name} seed {seed} minus {u}")


# ------------------------------------------------------------- claim 4: Spark as DuckDB


@pytest.mark.spark
def test_spark_levels_are_duckdbs_bit_for_bit(spark, tmp_path):
    from tests.recording import export_parquet, spark_backend_class, with_sources

    cases: list[tuple[str, Metadata, Tables]] = []
    rng = random.Random(5)
    # each case is a Spark query (~1 s): by default three big worlds (the top level 2^62, a
    # signed SUM's two parts, totals past 2^53 steps at k = 41) and one shop query (a signed
    # SUM and a COUNT) on one database, the suite's budget; DPSQL_REDTEAM_DBS > 2 runs every
    # world and two databases (every shop query is checked on DuckDB above)
    deep = DBS > 2
    for world in WORLDS if deep else [w for w in WORLDS if w.name in ("top2^62", "signed",
                                                                      "k41")]:
        cases.append((world.queries[1], world.md(), big_tables(world.rows(rng))))
    for sql in (SHOP_QUERIES[5],):
        for db in shop_dbs(11)[1:3 if deep else 2]:
            cases.append((sql, tiny.metadata(max_contribution=8, level_base=2.5),
                          shop_tables(db)))
    for n, (sql, md, tables) in enumerate(cases):
        path = tmp_path / f"case{n}.duckdb"
        con = duckdb.connect(str(path))
        try:
            for name, (columns, rows) in tables.items():
                con.execute(f"CREATE TABLE {name} ({', '.join(columns)})")
                if rows:
                    insert_many(con, name, rows)
        finally:
            con.close()
        duck = DuckDBBackend(path, md)
        try:
            with runner(sql, md, duck) as r:
                want = bits(r.new_parts())
        finally:
            duck.close()
        sources = export_parquet(path, tmp_path / f"parquet{n}")
        smd = with_sources(md, sources)
        backend = spark_backend_class(False)(smd, spark)
        try:
            with runner(sql, smd, backend) as r:
                assert bits(r.new_parts()) == want, (sql, n)
        finally:
            backend.close()


@pytest.mark.spark
# Broke on 96fc98d (a strict xfail on the red team's branch): Spark collected the per-unit
# rows; now a backend that is not columnar reads the one-row levels query instead
# (dpsql.units.rewrite.one_row_levels), and this passes.
def test_spark_reads_a_sum_over_many_units_as_it_reads_few(spark, tmp_path):
    """Counterexample: the same SUM over 100 units and over 20,000 units (one row of value
    i % 997 each), on a Spark context whose maxResultSize is 64k (an owner's setting; the
    default 1g is reached the same way at ~1.3-2 x 10^8 units: 5.4 bytes a unit measured on
    these values, 8.2 on hashed ones). 96fc98d^ read one row whatever the
    units (and the COUNT, read as a histogram, still does); 96fc98d reads one row per unit,
    ~105 KiB serialized here: OperationalError ("Spark could not run the query") on the
    larger database only -- a data-dependent error, refunded by the session (a failed exact
    read), so repeatable for free with WHERE clauses that add or drop one unit near the
    threshold. Fix: keep the old L-sums query on backends that are not columnar (Spark), or
    fold the per-unit rows in SQL / stream them (toLocalIterator) instead of collecting."""
    from tests.recording import export_parquet, spark_backend_class, with_sources
    from tests.spark_limits import max_result_size

    md = big_md("0", "1000", 8)
    outcome = {}
    for n in (100, 20_000):
        path = tmp_path / f"units{n}.duckdb"
        con = duckdb.connect(str(path))
        try:
            con.execute(f"CREATE TABLE people AS SELECT i::INTEGER AS pid FROM range({n}) r(i)")
            con.execute("CREATE TABLE visits AS SELECT i::INTEGER AS v_pid, (i % 997)::DOUBLE "
                        f"AS v FROM range({n}) r(i)")
        finally:
            con.close()
        smd = with_sources(md, export_parquet(path, tmp_path / f"pq{n}"))
        backend = spark_backend_class(False)(smd, spark)
        try:
            with runner("SELECT SUM(v) FROM visits", smd, backend) as r, \
                    max_result_size(spark, "64k"):
                # the old query's one row fits whatever the units
                assert r.old_parts().levels[0][-1] == sum(i % 997 for i in range(n))
                try:
                    outcome[n] = r.new_parts().levels[0][-1]
                except OperationalError as err:
                    outcome[n] = str(err)
        finally:
            backend.close()
    assert outcome[100] == sum(i % 997 for i in range(100))
    assert outcome[20_000] == sum(i % 997 for i in range(20_000)), outcome[20_000]


def test_a_level_at_2_53_steps_rounds_as_the_old_querys_did():
    """Not a break (the documented residual, unchanged): two units of 2^53 and 1 value units
    (k = 0) make a level's exact total 2^53 + 1, which the one conversion rounds to 2^53 (ties
    to even) -- in the old query too, bit for bit -- so without the unit of 1 that level does
    not move and the increment below it moves by -1: within 2^-52 of the values, as
    docs/privacy.md section 4 bounds it (what the brute force allows past 2^53 steps)."""
    md = big_md("0", str(2**61), 2)
    with runner("SELECT SUM(v) FROM visits", md) as r:
        assert r.ks == [0]
        rows: list[tuple[int | None, float | None]] = [(1, 2.0**53), (2, 1.0)]
        r.load(big_tables(rows))
        d = r.new_parts()
        assert bits(d) == bits(r.old_parts())
        levels = part_levels(r.release.parts[0], r.release.unit)
        j = levels.index(2**53)
        assert d.levels[0][j] == 2.0**53 and d.levels[0][j - 1] == 2.0**52 + 1
        r.load(big_tables(rows[:1]))
        d2 = r.new_parts()
        assert d2.levels[0][j] == 2.0**53 and d2.levels[0][j - 1] == 2.0**52
        _check_neighbour(r, d, d2, "2^53 + 1")
