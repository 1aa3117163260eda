"""Red team (issue #17): the NULL coding of two-unit releases (commit acb7c14,
dpsql.units.multi_execute.pair_codes; docs/privacy.md "Several privacy units").

The claim: over customer AND supplier each result is a pair of unit ids; a result NULL on ONE
side gets a node of its own there (only its other unit's cap binds it), the results NULL on
BOTH sides share one node a side (one result, capped like a unit); for every neighbour
(remove one customer or one supplier with its FK cascade; a NULL / orphan id is no unit's and
stays) every truncated level Q_j moves by at most tau_j (times a SUM's bound) and never rises
on removal; the flat read equals the grouped fallback exactly; the levels are R2T's LP with
these nodes. Attacked on real DuckDB with noise off, the join, the neighbours and the LP's
nodes re-implemented here (HiGHS's LP of the flat rows, own nodes keyed by row).

BROKE, then fixed (the tests below pass on the fix; each failed before it):

* **Flat != fallback for DECIMAL / HUGEINT unit ids past 2^53, and a removal RAISES the
  levels.** The flat read streams Arrow (exact ``Decimal`` ids); the grouped fallback reads
  ``fetchnumpy``, which returns DECIMAL and HUGEINT columns as float64: distinct ids within one
  double's spacing (2^60 + 0..9) are merged into one node by pair_codes. unit_codes calls the
  merge "still sound" -- it is, for ONE read; but which read runs depends on the data (the row
  count against FLAT_ROWS), so two neighbours can be read differently. Ten customers
  2^60 + i, 8 items each with its own supplier: flat levels [20, 40, 80], fallback [2, 4, 8].
  With one more customer (id 7, 20 items) pushing the rows past the guard, removing customer 7
  moves Q(8) from 16 (fallback) UP to 80 (flat): +64 at tau = 8. Needs ids past 2^53 (bank
  account numbers, snowflake ids stored as DECIMAL(20,0) / HUGEINT) and a neighbour pair on
  both sides of FLAT_ROWS (2^26 rows: TPC-H SF10 sized); here FLAT_ROWS is monkeypatched.
  Fixed: the fallback fetches its ids through Arrow as the flat read does.
* **DATE unit ids past year 9999 crash the flat read (an error oracle).** Arrow's date32 of a
  year past 9999 becomes a Python int, other dates ``datetime.date``; np.unique over the mixed
  object column raises a bare ``TypeError`` ("'<' not supported between instances of 'int'
  and 'datetime.date'") out of read_pair_truncated, whether the query is released or not
  depending on whether the data holds such a date (the fallback's fetchnumpy reads year 12000
  as datetime64; 'infinity' and years past ~294,000 fail it with an OperationalError, also
  data-dependent). Fixed: ids of Python objects are coded by equality alone.

HELD (passing guards): on random NULL-heavy worlds (NULL and orphan order keys, orders of no
customer, items of no supplier, both-NULL rows many times tau, a heavy supplier of
customer-NULL rows), with INTEGER, VARCHAR, DATE, DECIMAL(18, 2) and small HUGEINT ids, base 2
and fine base 5.5 levels, COUNT, COUNT + a SUM with both signs, EXISTS / NOT EXISTS bodies, a
join through orders and a join across the units off the paths: every neighbour moves each
level by at most tau_j and never up; the flat read (real guard) equals the fallback
(FLAT_ROWS 0) exactly; the simple queries' levels equal the LP of the Python join with the
documented nodes. Targeted: three suppliers of 100 customer-NULL rows each are truncated per
supplier (3 min(100, tau) + the both-NULL node's min(n, tau)); the three ways a row's customer
is NULL (a NULL order key, an orphan order key, an order of NULL customer) are coded alike, and
a both-NULL pile of 1000 rows is one result capped at tau_j that no removal moves.

DPSQL_REDTEAM_DBS=<n> runs n random worlds per id type and grid (default 1).
"""

from __future__ import annotations

import datetime
import math
import os
import random
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.analysis.model import QueryAnalysis
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.execute.exact import compile_plan
from dpsql.metadata import Metadata, loads_metadata
from dpsql.noise.r2t_flow import level_step
from dpsql.noise.r2t_lp import lp_truncated
from dpsql.rewrite.plan import plan_execution
from dpsql.units import multi_execute, multi_rewrite
from dpsql.units.analysis import UnitRelease
from dpsql.units.execute import read_truncated
from dpsql.units.multi_rewrite import value_levels
from tests.db_files import create_tables

World = dict[str, list[tuple[Any, ...]]]  # abstract ids: ints and None (typed when loaded)

DBS = int(os.environ.get("DPSQL_REDTEAM_DBS", "1"))

#: id kinds: the SQL type, and an abstract int id -> a stored value of that type
KINDS: dict[str, tuple[str, Callable[[int], Any]]] = {
    "int": ("INTEGER", lambda v: v),
    "varchar": ("VARCHAR", lambda v: f"u{v:03d}"),
    "date": ("DATE", lambda v: datetime.date(2001, 1, 1) + datetime.timedelta(days=v)),
    "decimal": ("DECIMAL(18, 2)", lambda v: Decimal(v) + Decimal(v % 7) / 100),
    "hugeint": ("HUGEINT", lambda v: -v),
}


def yaml(id_type: str, gs: int, base: float) -> str:
    grid = "" if base == 2.0 else f", levels: {{base: {base}}}"
    return f"""
privacy_unit:
  - {{table: customer, column: c_id, max_contribution: {gs}{grid}}}
  - {{table: supplier, column: s_id}}
tables:
  customer: {{columns: {{c_id: {{type: "{id_type}"}}}}}}
  supplier: {{columns: {{s_id: {{type: "{id_type}"}}}}}}
  orders: {{unit: {{customer: o_cust}}, columns: {{o_id: {{type: INTEGER}},
            o_cust: {{type: "{id_type}"}}}}}}
  items:
    unit: {{customer: {{via: i_order, to: orders.o_id}}, supplier: i_supp}}
    columns: {{i_order: {{type: INTEGER}}, i_supp: {{type: "{id_type}"}},
              qty: {{type: INTEGER, bounds: [-2, 4]}}}}
  stock: {{unit: {{supplier: k_supp}}, columns: {{k_supp: {{type: "{id_type}"}},
           k_qty: {{type: INTEGER, bounds: [0, 3]}}}}}}
"""


def schema(id_type: str) -> dict[str, list[str]]:
    return {"customer": [f"c_id {id_type}"], "supplier": [f"s_id {id_type}"],
            "orders": ["o_id INTEGER", f"o_cust {id_type}"],
            "items": ["i_order INTEGER", f"i_supp {id_type}", "qty INTEGER"],
            "stock": [f"k_supp {id_type}", "k_qty INTEGER"]}


#: which columns hold unit ids (typed when loaded); the others are plain integers
ID_COLUMNS = {"customer": (0,), "supplier": (0,), "orders": (1,), "items": (1,),
              "stock": (0,)}


def typed(world: World, kind: str) -> World:
    convert = KINDS[kind][1]
    return {t: [tuple(convert(v) if i in ID_COLUMNS[t] and v is not None else v
                      for i, v in enumerate(r)) for r in rows] for t, rows in world.items()}


# ------------------------------------------------------------------ the world, in Python


def random_world(rng: random.Random) -> World:
    """NULL-heavy: 1-3 customers and suppliers; orders of no customer (NULL) and of customer 9
    (an orphan); items of a NULL order, of order 99 (orphan), of no supplier (NULL) and of
    supplier 8 (orphan); sometimes a pile of both-NULL rows many times the top level, or a
    heavy supplier selling to no customer."""
    customers = list(range(1, rng.randint(1, 3) + 1))
    suppliers = list(range(1, rng.randint(1, 3) + 1))
    orders = [(o, rng.choice([*customers, 9, None])) for o in range(1, rng.randint(1, 4) + 1)]
    keys = [o for o, _ in orders] + [99, None]
    supps = [*suppliers, 8, None]
    items = [(rng.choice(keys), rng.choice(supps), rng.randint(-3, 5))
             for _ in range(rng.randint(0, 10))] * rng.randint(1, 3)
    if rng.random() < 0.4:  # both NULL, many times tau
        items += [(rng.choice([None, 99]), None, rng.randint(-3, 5))] * rng.randint(10, 40)
    if rng.random() < 0.4:  # a heavy supplier of rows of no customer
        items += [(None, suppliers[0], rng.randint(-3, 5))] * rng.randint(10, 40)
    stock = [(rng.choice(supps), rng.randint(0, 4)) for _ in range(rng.randint(0, 3))]
    return {"customer": [(c,) for c in customers], "supplier": [(s,) for s in suppliers],
            "orders": orders, "items": items, "stock": stock}


def neighbours(world: World) -> Iterator[tuple[str, World]]:
    """Every removal of one unit (a NULL id is no unit's): a customer with its orders and
    their items; a supplier with its items and its stock."""
    for c in sorted(({r[0] for r in world["customer"]} | {r[1] for r in world["orders"]})
                    - {None}):
        gone = {o for o, cust in world["orders"] if cust == c}
        out = {k: list(v) for k, v in world.items()}
        out["customer"] = [r for r in world["customer"] if r[0] != c]
        out["orders"] = [r for r in world["orders"] if r[1] != c]
        out["items"] = [r for r in world["items"] if r[0] is None or r[0] not in gone]
        yield f"customer {c}", out
    for s in sorted(({r[0] for r in world["supplier"]} | {r[1] for r in world["items"]}
                     | {r[0] for r in world["stock"]}) - {None}):
        out = {k: list(v) for k, v in world.items()}
        out["supplier"] = [r for r in world["supplier"] if r[0] != s]
        out["items"] = [r for r in world["items"] if r[1] != s]
        out["stock"] = [r for r in world["stock"] if r[0] != s]
        yield f"supplier {s}", out


def flat_results(world: World, sql: str) -> list[tuple[Any, Any, int]]:
    """The query's joined rows as (customer, supplier, qty), joined in Python (a NULL or orphan
    order key: no customer; SQL's NULL never equal)."""
    owner = {o: c for o, c in world["orders"] if o is not None}
    stock = world["stock"]
    out = []
    for order, supp, qty in world["items"]:
        if "JOIN orders" in sql and (order is None or order not in owner):
            continue
        if "NOT EXISTS" in sql:
            if any(k == supp and supp is not None and q > 1 for k, q in stock):
                continue
        elif "EXISTS" in sql and not any(k == supp and supp is not None for k, _ in stock):
            continue
        out.append((owner.get(order), supp, qty))
    return out


def lp_nodes(i: int, c: Any, s: Any) -> tuple[tuple[str, Any], tuple[str, Any]]:
    """Result i's LP constraints as the brief documents them: NULL on one side, a node of the
    result's own there; NULL on both, one shared node a side."""
    if c is None and s is not None:
        return ("c-own", i), ("s", s)
    if s is None and c is not None:
        return ("c", c), ("s-own", i)
    return ("c", c), ("s", s)


def reference_levels(rows: Sequence[tuple[Any, Any, int]], value: Callable[[int], float],
                     taus: Sequence[float], integer: bool) -> list[float]:
    """HiGHS's LP over the flat rows at each level, each row's psi floored at the flow's step
    (dpsql.noise.r2t_flow's contract: 1 for whole count levels, none for fine ones -- the flow
    scales them -- about tau 2^-30 for a SUM part); the rows of neither unit (both ids NULL)
    outside the LP, in full: they are in every neighbour."""
    neither = math.fsum(value(q) for c, s, q in rows if c is None and s is None)
    out = []
    for t in taus:
        t = float(t)
        delta = level_step(t, integer) if (not integer or t.is_integer()) else 0.0

        def floor(v: float, t: float = t, delta: float = delta) -> float:
            return math.floor(min(v, t) / delta) * delta if delta else min(v, t)

        results = [(floor(value(q)), lp_nodes(i, c, s)) for i, (c, s, q) in enumerate(rows)
                   if floor(value(q)) > 0 and not (c is None and s is None)]
        out.append((lp_truncated(results, floor(t)) if results else 0.0) + neither)
    return out


# ------------------------------------------------------------------ the engine


class Engine:
    """Queries planned on one metadata, read through the real DuckDB backend
    (dpsql.units.execute.read_truncated): flat behind the real guard, and with FLAT_ROWS 0 the
    grouped fallback."""

    def __init__(self, sqls: Sequence[str], md: Metadata, id_type: str, kind: str) -> None:
        self.backend = DuckDBBackend(None, md)
        self.schema = schema(id_type)
        self.kind = kind
        self.plans = []
        for sql in sqls:
            analysis = analyze_request(sql, md)
            assert isinstance(analysis, QueryAnalysis)
            release = analysis.unit
            assert release is not None and release.more and release.r2t, sql
            compiled = compile_plan(self.backend, plan_execution(analysis, md))
            self.plans.append((sql, release, compiled))

    def levels(self, world: World, *, fallback: bool = False) -> list[list[list[float]]]:
        create_tables(self.backend._con, self.schema, typed(world, self.kind))
        out = []
        with pytest.MonkeyPatch.context() as patch:
            if fallback:
                patch.setattr(multi_execute, "FLAT_ROWS", 0)
            for _, release, compiled in self.plans:
                got = read_truncated(self.backend, compiled, (), release)
                out.append([g.tolist() for g in got])
        return out

    def close(self) -> None:
        self.backend.close()


SQLS = [
    "SELECT COUNT(*) FROM items",
    "SELECT COUNT(*), SUM(qty) FROM items",  # a COUNT and a SUM with both signs
    "SELECT COUNT(*) FROM items i WHERE EXISTS (SELECT 1 FROM stock k WHERE"
    " k.k_supp = i.i_supp)",
    "SELECT COUNT(*), SUM(qty) FROM items i WHERE NOT EXISTS (SELECT 1 FROM stock k WHERE"
    " k.k_supp = i.i_supp AND k.k_qty > 1)",
    "SELECT SUM(qty) FROM items i JOIN orders o ON i.i_order = o.o_id",
    "SELECT COUNT(*) FROM orders o JOIN stock k ON k.k_qty = o.o_id",  # across, off the paths
]
#: the queries whose levels are checked against the LP of the Python join
REFERENCED = SQLS[:5]


def _part_values(sql: str, release: UnitRelease) -> list[Callable[[int], float]]:
    """psi of a row per part: 1 (COUNT), the clamped positive / negative qty (SUM(qty))."""
    out: list[Callable[[int], float]] = []
    for part in release.parts:
        if part.integer:
            out.append(lambda q: 1.0)
        elif len(out) == (1 if "COUNT" in sql else 0):
            out.append(lambda q: float(min(max(q, 0), 4)))
        else:
            out.append(lambda q: float(min(max(-q, 0), 2)))
    return out


GRIDS = [(8, 2.0), (40, 5.5)]  # whole levels 2..8; fine levels 5.5, 30.25, 166.375


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize(("gs", "base"), GRIDS, ids=["base2", "base5.5"])
def test_every_neighbour_of_null_heavy_worlds(kind, gs, base):
    id_type = KINDS[kind][0]
    md = loads_metadata(yaml(id_type, gs, base), "<null-heavy shop>")
    engine = Engine(SQLS, md, id_type, kind)
    rng = random.Random(f"{kind}-{gs}-{base}")
    try:
        for _ in range(DBS):
            world = random_world(rng)
            got = engine.levels(world)
            assert engine.levels(world, fallback=True) == got, ("flat != fallback", world)
            for (sql, release, _), levels in zip(engine.plans, got, strict=True):
                if sql not in REFERENCED:
                    continue
                rows = flat_results(world, sql)
                for part, value, q in zip(release.parts, _part_values(sql, release), levels,
                                          strict=True):
                    want = reference_levels(rows, value, value_levels(part, release),
                                            part.integer)
                    assert np.allclose(q, want, rtol=0, atol=1e-6), (sql, world, q, want)
            for what, other in neighbours(world):
                after_all = engine.levels(other)
                for (sql, release, _), xs, ys in zip(engine.plans, got, after_all, strict=True):
                    for part, x, y in zip(release.parts, xs, ys, strict=True):
                        for tau, before, after in zip(value_levels(part, release), x, y,
                                                      strict=True):
                            assert 0 <= before - after <= tau, (
                                f"PRIVACY BUG: {sql} ({kind}, base {base})\nworld={world}\n"
                                f"removed {what}, tau={tau}: {before} -> {after}")
    finally:
        engine.close()


# ------------------------------------------------------------------ targeted worlds


def _int_engine(sqls: Sequence[str], gs: int = 8, base: float = 2.0) -> Engine:
    return Engine(sqls, loads_metadata(yaml("INTEGER", gs, base), "<shop>"), "INTEGER", "int")


def test_customer_null_rows_are_truncated_per_supplier_and_neither_unit_rows_in_full():
    """Three suppliers of 100 rows of no customer each (NULL order key, orphan order 99, an
    order of NULL customer: the three ways to be customer-NULL, coded alike), and 3n rows of
    neither unit: each level is 3 min(100, tau) + 3n, flat and grouped (the rows of neither
    unit are in every neighbour: in full, as under one unit), and a supplier's removal moves
    it by exactly min(100, tau)."""
    engine = _int_engine(["SELECT COUNT(*) FROM items"], gs=256)
    try:
        for n in (0, 5, 1000):
            world: World = {
                "customer": [(1,)], "supplier": [(1,), (2,), (3,)],
                "orders": [(1, None), (2, 1)],
                "items": ([(None, 1, 1)] * 100 + [(99, 2, 1)] * 100 + [(1, 3, 1)] * 100
                          + [(None, None, 1), (99, None, 1), (1, None, 1)] * n),
                "stock": []}
            (got,), = engine.levels(world)
            assert engine.levels(world, fallback=True) == [[got]]
            taus = [2, 4, 8, 16, 32, 64, 128, 256]
            assert got == [3 * min(100, t) + 3 * n for t in taus], n
            for what, other in neighbours(world):
                (after,), = engine.levels(other)
                if what.startswith("supplier"):
                    assert [b - a for b, a in zip(got, after, strict=True)] == [
                        min(100, t) for t in taus]
                else:  # customer 1 owns no row here: nothing moves
                    assert after == got
    finally:
        engine.close()


def test_a_result_null_on_one_side_with_a_heavy_other_unit_is_capped_by_it():
    """Customer 1 buys 50 items of no supplier (NULL and orphan-free: i_supp NULL) and 50 of
    supplier 1, which also sells 50 items of no customer: customer 1 and supplier 1 each cap
    their rows at tau; the flow routes at most tau through each."""
    engine = _int_engine(["SELECT COUNT(*), SUM(qty) FROM items"], gs=64)
    try:
        world: World = {"customer": [(1,)], "supplier": [(1,)], "orders": [(1, 1)],
                        "items": [(1, None, 3)] * 50 + [(1, 1, -2)] * 50
                        + [(None, 1, 4)] * 50, "stock": []}
        got = engine.levels(world)
        assert engine.levels(world, fallback=True) == got
        ((count, *_),) = got
        # x1 (customer 1, own) + x2 (1, 1) <= tau, x2 + x3 (own, supplier 1) <= tau, each
        # <= 50: 2 tau up to 50, then 100 + min(tau - 50, 50)
        assert count == [2 * t if t <= 50 else 100 + min(t - 50, 50)
                         for t in (2, 4, 8, 16, 32, 64)]
        (_, release, _), = engine.plans
        for what, other in neighbours(world):
            (after,) = engine.levels(other)
            for part, xs, ys in zip(release.parts, got[0], after, strict=True):
                for x, y, t in zip(xs, ys, value_levels(part, release), strict=True):
                    assert 0 <= x - y <= t, (what, xs, ys)
    finally:
        engine.close()


# ------------------------------------------------------------------ BROKE


BIG_YAML = """
privacy_unit:
  - {{table: customer, column: c_id, max_contribution: 8}}
  - {{table: supplier, column: s_id}}
tables:
  customer: {{columns: {{c_id: {{type: "{t}"}}}}}}
  supplier: {{columns: {{s_id: {{type: INTEGER}}}}}}
  items: {{unit: {{customer: i_cust, supplier: i_supp}},
          columns: {{i_cust: {{type: "{t}"}}, i_supp: {{type: INTEGER}}}}}}
"""


def _guarded_levels(t: str, world: World, guard: int) -> list[int]:
    md = loads_metadata(BIG_YAML.format(t=t), "<big ids>")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(multi_execute, "FLAT_ROWS", guard)
        patch.setattr(multi_rewrite, "FLAT_ROWS", guard)
        analysis = analyze_request("SELECT COUNT(*) FROM items", md)
        assert isinstance(analysis, QueryAnalysis) and analysis.unit is not None
        backend = DuckDBBackend(None, md)
        try:
            create_tables(backend._con, {"customer": [f"c_id {t}"],
                                         "supplier": ["s_id INTEGER"],
                                         "items": [f"i_cust {t}", "i_supp INTEGER"]}, world)
            compiled = compile_plan(backend, plan_execution(analysis, md))
            assert compiled.fallback is not None
            (got,) = read_truncated(backend, compiled, (), analysis.unit)
            return [int(v) for v in got.tolist()]
        finally:
            backend.close()


# Broke before the fix: the grouped fallback fetched DECIMAL / HUGEINT ids as float64
# (fetchnumpy) and merged ids past 2^53 into one node, the flat read (Arrow, Decimal) did not;
# the read switches on the row count, so removing a unit could RAISE the levels by 8 tau.
# Both reads now fetch through Arrow (dpsql.units.multi_execute.read_pair_truncated).
@pytest.mark.parametrize("t", ["HUGEINT", "DECIMAL(38, 0)", "DECIMAL(18, 0)"])
def test_ids_past_2_53_flat_and_fallback_and_a_removal_across_the_guard(t):
    big = 2**60 if t != "DECIMAL(18, 0)" else 2**58  # 18 digits hold 2^58 + i
    customers = [big + i for i in range(10)]  # within one double's spacing (256 / 64)
    items = [(c, i) for i, c in enumerate(customers) for _ in range(8)]
    world: World = {"customer": [(c,) for c in customers],
                    "supplier": [(s,) for s in range(12)], "items": items}
    flat = _guarded_levels(t, world, 1000)
    grouped = _guarded_levels(t, world, 0)
    # I: the world plus customer 7 with 20 rows (100 rows: past a guard of 80, the fallback);
    # I' = I minus customer 7 (80 rows: flat)
    heavy = {**world, "customer": [*world["customer"], (7,)],
             "items": items + [(7, 11)] * 20}
    before = _guarded_levels(t, heavy, 80)
    after = _guarded_levels(t, world, 80)
    moves = [b - a for b, a in zip(before, after, strict=True)]
    assert flat == grouped and all(0 <= m <= tau for m, tau in zip(moves, (2, 4, 8),
                                                                   strict=True)), (
        f"flat {flat}, fallback {grouped}; removing customer 7: {before} -> {after}")


# Broke before the fix: a DATE unit id past year 9999 reads as a Python int through Arrow,
# beside datetime.date ids, and np.unique raised TypeError in the flat read (a data-dependent
# error); objects are now coded by equality alone (multi_execute._coded).
def test_a_date_id_past_year_9999_beside_ordinary_dates():
    engine = Engine(["SELECT COUNT(*) FROM items"],
                    loads_metadata(yaml("DATE", 8, 2.0), "<dates>"), "DATE", "int")
    try:
        # ids as DATE strings, cast by DuckDB (Python's datetime stops at 9999)
        world: World = {"customer": [("2001-01-01",)],
                        "supplier": [("2001-01-01",), ("12000-01-01",)],
                        "orders": [(1, "2001-01-01")],
                        "items": [(1, "2001-01-01", 1), (1, "12000-01-01", 1)], "stock": []}
        (got,), = engine.levels(world)
        assert got == [2, 2, 2]
    finally:
        engine.close()
