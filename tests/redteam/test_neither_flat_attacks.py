"""Red team of two unit rules (issue #17): the rows of neither unit over two units counted in
full (f4f970f), and the flat COUNT(*) under one unit over many units (3f38020, f6f343c).

1. Over two units (customer, supplier), a result whose two ids are both NULL is left out of
   the flow and its psi is added after the noise (c_NULL). Attacked on NULL-heavy worlds read
   through the real DuckDB backend: the flat read (real guard), the grouped fallback
   (``multi_execute.FLAT_ROWS`` 0: its last query is ``neither_totals``) and, for the SUM parts,
   the per-pair grouped query of a non-flat twin (the same SUM beside a ``COUNT(qty)``) must
   give bit-identical levels AND c_NULL -- with fractional values (``qty * 0.37``,
   ``qty / 3.0``), signed SUMs (two parts), huge DOUBLE values at the bounds, NULL values and
   big piles of rows of neither unit; and removing any one unit (FK cascade) moves every
   Q(tau_j) = level + c_NULL down by at most tau_j. A row NULL on one side only is still
   truncated by its other unit.
2. Under one unit, a COUNT(*) over many units reads one id per row and counts them in numpy:
   the same histogram rows as the GROUP BY for FK columns of BIGINT / HUGEINT / DECIMAL /
   VARCHAR / negative ids (ids past 2^53, 2^63, 2^64), NULL ids and orphans; the same levels
   forced flat (``many_units`` patched), forced grouped, and past the guard
   (``units.execute.FLAT_ROWS`` 0); ``flat_unit_ids`` refuses every shape whose row is not a
   plain count of one.

``DPSQL_REDTEAM_DBS=<n>`` runs n random worlds per case (default 1: the suite's budget).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.execute.exact import compile_plan
from dpsql.metadata import Metadata, loads_metadata
from dpsql.rewrite.plan import plan_execution
from dpsql.units import execute as unit_execute
from dpsql.units import multi_execute
from dpsql.units.analysis import UnitRelease
from dpsql.units.execute import Truncated, histogram_of_ids, read_truncated_parts
from dpsql.units.flat_counts import flat_unit_ids
from dpsql.units.multi_rewrite import is_flat, value_levels
from tests.db_files import create_tables
from tests.units import tiny_multi

DBS = int(os.environ.get("DPSQL_REDTEAM_DBS", "1"))

World = dict[str, list[tuple[Any, ...]]]

# ------------------------------------------------------------------ 1. neither unit in full

TWO_YAML = tiny_multi.TWO_UNIT_HEAD + """\
    columns: {{i_order: {{type: INTEGER}}, i_supp: {{type: INTEGER}},
              qty: {{type: DOUBLE, bounds: [{lo}, {hi}]}}}}
"""
TWO_SCHEMA = {"customer": ["c_id INTEGER"], "supplier": ["s_id INTEGER"],
              "orders": ["o_id INTEGER", "o_cust INTEGER"],
              "items": ["i_order INTEGER", "i_supp INTEGER", "qty DOUBLE"]}

#: (flat query, its non-flat twin: the same SUM parts first, then a COUNT(qty))
PAIRS = [
    ("SELECT SUM(qty * 0.37) FROM items", "SELECT SUM(qty * 0.37), COUNT(qty) FROM items"),
    ("SELECT SUM(qty) FROM items", "SELECT SUM(qty), COUNT(qty) FROM items"),
    ("SELECT SUM(qty / 3.0) FROM items i JOIN orders o ON i.i_order = o.o_id",
     "SELECT SUM(qty / 3.0), COUNT(qty) FROM items i JOIN orders o ON i.i_order = o.o_id"),
    ("SELECT COUNT(*), SUM(qty * 0.37) FROM items WHERE qty <> 1", None),
    ("SELECT COUNT(*) FROM items", None),
]
#: (bounds, grid): small signed values on the default grid; huge ones near 2^52 on fine levels
TWO_CASES = {"small": ((-2, 4), 8, 2.0), "huge": ((-2.0**52, 3.0 * 2**51), 40, 5.5)}


def two_world(rng: random.Random, lo: float, hi: float) -> World:
    """1-3 customers and suppliers; orders of customer 9 (orphan) and NULL; items of order 99
    (orphan), NULL orders, supplier 8 (orphan) and NULL suppliers, values at and past the
    bounds, fractions and NULLs; often a pile of neither unit's rows (both ids NULL)."""
    cs = list(range(1, rng.randint(1, 3) + 1))
    ss = list(range(1, rng.randint(1, 3) + 1))
    orders = [(o, rng.choice([*cs, 9, None])) for o in range(1, rng.randint(1, 5) + 1)]
    keys = [o for o, _ in orders] + [99, None]

    def value() -> float | None:
        return rng.choice([None, lo, hi, hi * 2, lo * 2, hi / 3, lo / 7, 0.0,
                           rng.uniform(lo, hi), float(rng.randint(-3, 5))])

    items = [(rng.choice(keys), rng.choice([*ss, 8, None]), value())
             for _ in range(rng.randint(0, 14))]
    if rng.random() < 0.7:  # neither unit's pile: NULL / orphan order, NULL supplier
        items += [(rng.choice([None, 99]), None, value()) for _ in range(rng.randint(1, 40))]
    return {"customer": [(c,) for c in cs], "supplier": [(s,) for s in ss],
            "orders": orders, "items": items}


def two_neighbours(world: World) -> Iterator[tuple[str, World]]:
    for c in sorted({r[0] for r in world["customer"]} | {c for _, c in world["orders"]}
                    - {None}):
        gone = {o for o, oc in world["orders"] if oc == c}
        yield f"customer {c}", {**world, "customer": [r for r in world["customer"] if r[0] != c],
                                "orders": [r for r in world["orders"] if r[1] != c],
                                "items": [r for r in world["items"] if r[0] not in gone]}
    for s in sorted(({r[0] for r in world["supplier"]} | {r[1] for r in world["items"]})
                    - {None}):
        yield f"supplier {s}", {**world, "supplier": [r for r in world["supplier"] if r[0] != s],
                                "items": [r for r in world["items"] if r[1] != s]}


class Reader:
    """Queries planned on one metadata, read through the real DuckDB backend."""

    def __init__(self, md: Metadata, schema: dict[str, list[str]], sqls: Sequence[str]) -> None:
        self.backend = DuckDBBackend(None, md)
        self.schema = schema
        self.plans: dict[str, tuple[UnitRelease, Any]] = {}
        for sql in sqls:
            analysis = analyze_request(sql, md)
            release = analysis.unit
            assert release is not None, sql
            self.plans[sql] = (release, compile_plan(self.backend, plan_execution(analysis, md)))

    def load(self, world: World) -> None:
        create_tables(self.backend._con, self.schema, world)

    def read(self, sql: str, **patches: Any) -> Truncated:
        release, compiled = self.plans[sql]
        with pytest.MonkeyPatch.context() as patch:
            for key, value in patches.items():
                module = unit_execute if key in ("many_units", "FLAT_ROWS") else multi_execute
                name = key.removeprefix("multi_")
                patch.setattr(module, name, value)
            return read_truncated_parts(self.backend, compiled, (), release)

    def close(self) -> None:
        self.backend.close()


def _same(a: Truncated, b: Truncated, parts: Sequence[int] | None = None) -> bool:
    idx = range(len(a.levels)) if parts is None else parts
    return all(a.levels[i].tolist() == b.levels[i].tolist() and a.no_unit[i] == b.no_unit[i]
               and a.levels[i].dtype == b.levels[i].dtype for i in idx)


def _show(t: Truncated) -> str:
    return f"levels={[x.tolist() for x in t.levels]} c_NULL={t.no_unit}"


@pytest.mark.parametrize("case", list(TWO_CASES))
def test_neither_unit_reads_agree_and_every_removal_is_bounded(case):
    (lo, hi), gs, base = TWO_CASES[case]
    grid = "" if base == 2.0 else f", levels: {{base: {base}}}"
    md = loads_metadata(TWO_YAML.format(gs=gs, grid=grid, lo=lo, hi=hi), "<two-unit shop>")
    sqls = [q for pair in PAIRS for q in pair if q is not None]
    reader = Reader(md, TWO_SCHEMA, sqls)
    rng = random.Random(f"neither-{case}")
    try:
        for flat, grouped in PAIRS:
            assert is_flat(reader.plans[flat][1].plan.exact_sql), flat
            if grouped:
                assert not is_flat(reader.plans[grouped][1].plan.exact_sql), grouped
        for _ in range((2 if case == "small" else 1) * DBS):  # the suite's budget
            world = two_world(rng, lo, hi)
            reader.load(world)
            base_reads = {}
            for flat, grouped in PAIRS:
                got = reader.read(flat)
                fb = reader.read(flat, multi_FLAT_ROWS=0)
                assert _same(got, fb), (f"flat != fallback: {flat}\n{world}\n"
                                        f"flat {_show(got)}\nfallback {_show(fb)}")
                if grouped:
                    # c_NULL bit for bit; the levels are another query's (the twin's
                    # flow floors a pair's psi, the flat read each row's: by design)
                    twin = reader.read(grouped)
                    k = len(got.levels)
                    assert got.no_unit == twin.no_unit[:k], (
                        f"flat != grouped twin: {flat}\n{world}\n"
                        f"flat {_show(got)}\ngrouped {_show(twin)}")
                base_reads[flat] = got
            for what, other in two_neighbours(world):
                reader.load(other)
                for flat, _ in PAIRS:
                    release = reader.plans[flat][0]
                    # c_NULL is added after the noise (dpsql.units.noise): it must be the
                    # same in both neighbours, and the noised levels move by at most tau_j
                    # (levels + c_NULL in float64 could round by an ulp of c_NULL more)
                    before, after = base_reads[flat], reader.read(flat)
                    assert before.no_unit == after.no_unit, (
                        f"PRIVACY BUG: {flat} c_NULL moved\nworld={world}\nremoved {what}: "
                        f"{before.no_unit} -> {after.no_unit}")
                    for part, x, y in zip(release.parts, before.levels, after.levels,
                                          strict=True):
                        for tau, b, a in zip(value_levels(part, release), x, y, strict=True):
                            assert 0 <= b - a <= tau, (
                                f"PRIVACY BUG: {flat}\nworld={world}\nremoved {what}, "
                                f"tau={tau}: {b} -> {a}")
    finally:
        reader.close()


def test_a_row_null_on_one_side_is_truncated_by_its_other_unit_and_neither_in_full():
    """Supplier 1 holds 50 rows of no customer (NULL order); 30 rows are of neither unit;
    customer 1 holds 20 rows of no supplier. At tau = 2, 4, 8: supplier 1 is capped at tau,
    customer 1 at tau, the 30 in full (c_NULL 30, not one more node capped at tau)."""
    md = loads_metadata(TWO_YAML.format(gs=8, grid="", lo=-2, hi=4), "<two-unit shop>")
    sql = "SELECT COUNT(*) FROM items"
    reader = Reader(md, TWO_SCHEMA, [sql])
    try:
        world = {"customer": [(1,)], "supplier": [(1,)], "orders": [(1, 1)],
                 "items": [(None, 1, 1.0)] * 50 + [(None, None, 1.0)] * 30
                 + [(1, None, 1.0)] * 20}
        reader.load(world)
        for patches in ({}, {"multi_FLAT_ROWS": 0}):
            got = reader.read(sql, **patches)
            assert got.levels[0].tolist() == [4, 8, 16] and got.no_unit == [30.0], _show(got)
    finally:
        reader.close()


# Broke on d8ee268 (claims b and c; a strict xfail on the red team's branch, passing since
# dpsql.units.multi_execute._correctly_rounded_sum): the flat read's c_NULL of a SUM part was
# math.fsum of the values of neither unit, which raises OverflowError when their exact sum
# passes the largest double; the grouped fallback (neither_totals: DECIMAL steps cast to
# DOUBLE) and the per-pair grouped query of a non-flat twin give inf for the same rows.
# Through dpsql.connect the flat read was an InternalError ("unexpected OverflowError ... a
# dpsql bug") where the fallback releases inf: which one runs is the row count against
# FLAT_ROWS, so a removal across the guard turned an answer into an error (an oracle).
def test_neither_units_sum_past_the_largest_double_reads_alike():
    """Counterexample: bounds [0, 4e307] (finite, accepted with max_sum 1000, GS 2), one row
    of customer 1 and supplier 1, and five rows of neither unit at the bound (exact sum 2e308):
    the fallback (FLAT_ROWS 0) and the grouped twin read c_NULL inf; the flat read raises."""
    md = loads_metadata(TWO_YAML.format(gs="2, max_sum: 1000", grid="", lo=0, hi="4.0e+307"),
                        "<two-unit shop>")
    flat, twin = "SELECT SUM(qty) FROM items", "SELECT SUM(qty), COUNT(qty) FROM items"
    reader = Reader(md, TWO_SCHEMA, [flat, twin])
    try:
        reader.load({"customer": [(1,)], "supplier": [(1,)], "orders": [(1, 1)],
                     "items": [(1, 1, 3.0)] + [(None, None, 4.0e307)] * 5})
        fallback = reader.read(flat, multi_FLAT_ROWS=0)
        assert fallback.no_unit == [float("inf")]
        assert reader.read(twin).no_unit[0] == float("inf")
        got = reader.read(flat)  # was OverflowError: intermediate overflow in fsum
        assert _same(got, fallback), (_show(got), _show(fallback))
    finally:
        reader.close()


# ------------------------------------------------------------------ 2. flat counts, one unit

ONE_YAML = """
privacy_unit: {{table: customer, column: c_id, max_contribution: 8}}
tables:
  customer: {{columns: {{c_id: {{type: "{t}"}}}}}}
  orders: {{unit: o_cust, columns: {{o_id: {{type: INTEGER}}, o_cust: {{type: "{t}"}},
            amount: {{type: INTEGER, bounds: [-3, 5]}}}}}}
  items:
    unit: {{via: i_order, to: orders.o_id}}
    columns: {{i_order: {{type: INTEGER}}, qty: {{type: INTEGER, bounds: [0, 4]}},
              kind: {{type: INTEGER, releasable: true,
                                     domain: {{values: [1, 2, 3]}}}}}}
  stock: {{public: true, columns: {{k: {{type: INTEGER}}}}}}
"""

#: an FK type and an abstract id -> its stored value: ids past 2^53 / 2^63 / 2^64, negatives
ID_KINDS: dict[str, tuple[str, Any]] = {
    "bigint": ("BIGINT", lambda v: 2**53 + v if v % 2 else 2**63 - 1 - v),
    "negative": ("BIGINT", lambda v: -(2**62) - v if v % 2 else -v),
    "hugeint": ("HUGEINT", lambda v: 2**64 + v if v % 2 else -(2**100) - v),
    "decimal": ("DECIMAL(38, 0)", lambda v: Decimal(10**30 + v) if v % 2 else Decimal(-v)),
    "varchar": ("VARCHAR", lambda v: f"u{v}" if v % 2 else f"U{v} "),
    "int": ("INTEGER", lambda v: v - 2**30 if v % 2 else 2**30 + v),
}

ONE_FLAT = [
    "SELECT COUNT(*) FROM items",
    "SELECT COUNT(*) FROM orders WHERE amount > 0",
    "SELECT COUNT(*) FROM items i JOIN orders o ON i.i_order = o.o_id WHERE i.qty > 1",
    "SELECT COUNT(*) FROM items i WHERE EXISTS (SELECT 1 FROM orders o WHERE o.o_id = i.i_order"
    " AND o.amount > 0)",
    "SELECT COUNT(*) FROM items i WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE"
    " o.o_id = i.i_order AND o.amount > 0)",
    "SELECT COUNT(*) FROM items i WHERE i.i_order NOT IN (SELECT o_id FROM orders"
    " WHERE amount > 0)",
    "SELECT COUNT(*) FROM items i JOIN items j ON i.i_order = j.i_order",
    "SELECT COUNT(*) FROM orders o JOIN stock s ON s.k = o.amount",
    "SELECT COUNT(*) FROM items HAVING COUNT(*) > 1",
    "SELECT COUNT(*), COUNT(*) FROM items WHERE qty > 0",  # one part, twice
]
ONE_NOT_FLAT = [
    "SELECT COUNT(*) FILTER (WHERE qty > 1) FROM items",
    "SELECT COUNT(qty) FROM items",
    "SELECT COUNT(1) FROM items",
    "SELECT COUNT(*), SUM(qty) FROM items",
    "SELECT SUM(qty) FROM items",
    "SELECT kind, COUNT(*) FROM items GROUP BY kind",
    "SELECT COUNT(*) FROM customer",
]
#: refused outright (never reach flat_unit_ids): derived tables, CTEs, LEFT JOIN null-extension
ONE_REFUSED = [
    "WITH x AS (SELECT * FROM items WHERE qty > 1) SELECT COUNT(*) FROM x",
    "SELECT COUNT(*) FROM (SELECT DISTINCT i_order, kind FROM items) t",
    "SELECT COUNT(*) FROM items i LEFT JOIN orders o ON i.i_order = o.o_id",
    "SELECT COUNT(*) FROM orders o LEFT JOIN items i ON i.i_order = o.o_id",
    "SELECT COUNT(DISTINCT i_order) FROM items",
]


def one_world(rng: random.Random, convert: Any) -> World:
    cs = list(range(1, rng.randint(1, 4) + 1))
    orders = [(o, rng.choice([*cs, 9, None]), rng.randint(-4, 6))
              for o in range(1, rng.randint(0, 7) + 1)]
    keys = [o for o, _, _ in orders] + [99, None]
    items = [(rng.choice(keys), rng.randint(0, 5), rng.randint(1, 3))
             for _ in range(rng.randint(0, 25))]
    typed = [(o, None if c is None else convert(c), a) for o, c, a in orders]
    # the unit's ids stored as its paths store them (dpsql.units.identity)
    return {"customer": [(convert(c),) for c in cs], "orders": typed, "items": items,
            "stock": [(k,) for k in range(-1, 4)]}


def test_flat_unit_ids_accepts_only_plain_row_counts():
    md = loads_metadata(ONE_YAML.format(t="INTEGER"), "<one-unit shop>")
    for sql in ONE_FLAT + ONE_NOT_FLAT:
        analysis = analyze_request(sql, md)
        plan = plan_execution(analysis, md)
        flat = flat_unit_ids(plan.exact_sql, analysis.unit)
        assert (flat is not None) == (sql in ONE_FLAT), sql
        if flat is not None:
            assert plan.fallback_sql == (flat,) and "GROUP BY" not in flat, sql
    for sql in ONE_REFUSED:
        with pytest.raises(Exception, match=r"privacy unit|not supported|no bound"):
            plan_execution(analyze_request(sql, md), md)


@pytest.mark.parametrize("kind", list(ID_KINDS))
def test_flat_count_reads_the_histogram_rows_for_every_id_type(kind):
    t, convert = ID_KINDS[kind]
    md = loads_metadata(ONE_YAML.format(t=t), "<one-unit shop>")
    schema = {"customer": [f"c_id {t}"],
              "orders": ["o_id INTEGER", f"o_cust {t}", "amount INTEGER"],
              "items": ["i_order INTEGER", "qty INTEGER", "kind INTEGER"],
              "stock": ["k INTEGER"]}
    reader = Reader(md, schema, ONE_FLAT)
    rng = random.Random(f"flat-{kind}")
    try:
        for _ in range(2 * DBS):
            world = one_world(rng, convert)
            reader.load(world)
            con = reader.backend._con
            for sql in ONE_FLAT:
                _, compiled = reader.plans[sql]
                want_rows = sorted(con.execute(compiled.exact).fetchall())
                (ids,), _ = reader.backend.execute_flat_columns(compiled.fallback[0], {})
                assert sorted(histogram_of_ids(ids)) == want_rows, (sql, world)
                flat = reader.read(sql, many_units=lambda *a: True)
                grouped = reader.read(sql, many_units=lambda *a: False)
                guarded = reader.read(sql, many_units=lambda *a: True, FLAT_ROWS=0)
                assert _same(flat, grouped) and _same(guarded, grouped), (
                    sql, world, _show(flat), _show(grouped), _show(guarded))
    finally:
        reader.close()


def test_histogram_of_ids_edge_columns():
    """Masked columns with no NULL, all NULL, one id, object ids mixing None."""
    none_masked = np.ma.masked_array([5, 5, 6], mask=[False, False, False])
    assert sorted(histogram_of_ids(none_masked)) == [(1, 1, 0), (2, 1, 0)]
    all_null = np.ma.masked_array([0, 0, 0], mask=[True, True, True])
    assert histogram_of_ids(all_null) == [(3, 0, 1)]
    assert histogram_of_ids(np.array([None, None], dtype=object)) == [(2, 0, 1)]
    assert histogram_of_ids(np.array([7], np.int64)) == [(1, 1, 0)]
    # a NULL count equal to a unit's count: one row (c, n, 1)
    both = np.ma.masked_array([1, 1, 0, 0], mask=[False, False, True, True])
    assert histogram_of_ids(both) == [(2, 1, 1)]
    assert np.asarray(histogram_of_ids(np.arange(2**18, dtype=np.int64))).tolist() == [
        [1, 2**18, 0]]
