"""Red team (commit ed39622): two-unit SUMs read their joined rows FLAT (dpsql.units.multi_rewrite:
``__u0, __u1, __v<i>``, each row one result of R2T's LP, its capacity ``floor(min(v, tau_j) /
delta_j)`` per level), and past the row guard FLAT_ROWS a FALLBACK groups the pairs in the
database with the same floored integers per level (``regrouped``, ``level_capacity``).

Which of the two runs depends on the data (the row count), so the claims attacked are:

1. flat and fallback give BIT-IDENTICAL levels for every database (forced here through
   dpsql.units.multi_execute.read_pair_truncated on a real DuckDBBackend, FLAT_ROWS
   monkeypatched to 0; Spark once);
2. every level keeps R2T's precondition on both paths: ``Q_j >= 0`` and removing one customer
   or supplier (with its FK cascade) lowers Q_j by at most tau_j * b and never raises it;
3. no data-dependent error (error oracle) or refusal on either path.

Attacked with: fractional values; values exactly on a level, one ulp either side, one delta_j
below; huge bounds (levels near 2^62, max_sum); tiny values (bounds 1e-300, subnormal rows);
negative values (a SUM's two parts, a negative-only SUM); NULL values; SUMs of expressions
(TRY: division by zero); level bases 2.5 and 5.5; several SUMs with COUNT(*); DOUBLE and DECIMAL
columns; +-inf and NaN stored values; the SQL literal of tau (LEAST against exactly
float(tau)?) and of the power-of-two scale, checked value by value against the flat reading's
numpy floor; the guard's boundary (FLAT_ROWS rows read flat, one more grouped).

RESULT: every attack HELD (no test here is an xfail). Why the equivalence is robust (checked,
not assumed): a SUM part's levels are integers >= 2 value units (dpsql.units.grid: b = 1), so
each tau literal is ``N.0`` (an exact DECIMAL below 10^16; DuckDB and Spark convert it exactly)
or a scientific DOUBLE literal (parsed exactly), and the scale literals are powers of two; and
even a one-ulp error in a tau literal could change a floor only where tau / delta_j is an
integer, i.e. tau has at most 31 significant bits, whose decimal form is short and exact. The
flow itself (flat float rows with parallel edges vs the fallback's per-pair integers) was also
fuzzed outside this file against an independent scipy max-flow, up to 60,000 rows with every
certificate of dpsql.noise.r2t_certify firing: equal; and at database level with 2,000-40,000
rows (heavy units, base 2 / 2.5 / 3 / 5.5, max_sum 2^60): equal.

Not privacy bugs, noted for the maintainers: (a) the "< tau_j / 128 lost per level" bound holds
for the flat read only; the fallback runs exactly when there are more rows, and floors each
row too, so it loses up to (rows) * delta_j per level (a row below delta_j, e.g. 0.37 at a
level with delta_j = 2, adds nothing at that level however many there are); the grouped query
before ed39622 floored once per pair (documented in docs/privacy.md since). (b) The flat
read's memory at the guard grew with the number of SUM parts: 30 two-signed SUMs read 62
columns, ~3.9 GiB at FLAT_ROWS rows; on Spark the guard's FLAT_ROWS + 1 rows were collected as
Python tuples before the fallback ran. Mended: the guard is now
dpsql.units.multi_rewrite.flat_guard (at most 3 * FLAT_ROWS values whatever the columns), and a
backend without columnar fetch (Spark) runs the fallback at once
(tests/units/test_multi_backends.py).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import duckdb
import numpy as np
import pytest
from sqlglot import exp

from dpsql.analysis.blocks import analyze_request
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.execute.exact import compile_plan
from dpsql.metadata import Metadata, loads_metadata
from dpsql.noise.r2t_certify import level_caps
from dpsql.noise.r2t_flow import level_step
from dpsql.noise.r2t_levels import levels
from dpsql.rewrite.plan import plan_execution
from dpsql.units import multi_execute, multi_rewrite
from dpsql.units.multi_rewrite import is_flat, level_capacity, value_levels
from tests.db_files import create_tables, writing
from tests.units import tiny_multi

Database = dict[str, list[tuple[Any, ...]]]

# ----------------------------------------------------------------------------- the harness

SCHEMA: dict[str, list[str]] = {
    "customer": ["c_id INTEGER"],
    "supplier": ["s_id INTEGER"],
    "orders": ["o_id INTEGER", "o_cust INTEGER"],
    "items": ["i_order INTEGER", "i_supp INTEGER", "qty INTEGER", "price DOUBLE",
              "amt DECIMAL(18, 4)", "w DOUBLE"],
}

YAML = tiny_multi.TWO_UNIT_HEAD + """\
    columns:
      i_order: {{type: INTEGER}}
      i_supp: {{type: INTEGER}}
      qty: {{type: INTEGER, bounds: [-2, 4]}}
      price: {{type: DOUBLE, bounds: [{plo}, {phi}]}}
      amt: {{type: DECIMAL, bounds: [{alo}, {ahi}]}}
      w: {{type: DOUBLE, bounds: [{wlo}, {whi}]}}
"""


def metadata(gs: int = 8, base: float | None = None, max_sum: int | None = None, *,
             plo: str = "-3.5", phi: str = "7.25", alo: str = "0", ahi: str = "1000.1234",
             wlo: str = "0", whi: str = "1.0") -> Metadata:
    """Two units (customer, supplier) over orders and items; ``price`` DOUBLE of both signs,
    ``amt`` DECIMAL, ``w`` DOUBLE for extreme bounds (YAML floats as strings)."""
    extra = ""
    if base is not None:
        extra += f", levels: {{base: {base}}}"
    if max_sum is not None:
        extra += f", max_sum: {max_sum}"
    return loads_metadata(YAML.format(gs=gs, grid=extra, plo=plo, phi=phi, alo=alo, ahi=ahi,
                                      wlo=wlo, whi=whi), "<red team: flat sums>")


def fill(con: Any, db: Mapping[str, Sequence[tuple[Any, ...]]]) -> None:
    create_tables(con, SCHEMA, db)


def levels_both(backend: Any, compiled: Any, unit: Any, params: Sequence[Any] = ()
                ) -> tuple[list[list[float]], list[list[float]]]:
    """(flat, fallback) levels of one compiled plan, both through read_pair_truncated: the
    fallback forced by a guard of 0 rows (the data-dependent switch)."""
    flat, _ = multi_execute.read_pair_truncated(backend, compiled, list(params), unit)
    saved = multi_execute.FLAT_ROWS
    multi_execute.FLAT_ROWS = 0
    try:
        grouped, _ = multi_execute.read_pair_truncated(backend, compiled, list(params), unit)
    finally:
        multi_execute.FLAT_ROWS = saved
    return [f.tolist() for f in flat], [g.tolist() for g in grouped]


class Engine:
    """One in-memory DuckDBBackend (its tables replaced per database) and one planned query."""

    def __init__(self, sql: str, md: Metadata) -> None:
        self.backend = DuckDBBackend(None, md)
        fill(self.backend._con, {})
        analysis = analyze_request(sql, md)
        assert analysis.unit is not None and analysis.unit.more, "reaches both units"
        self.unit = analysis.unit
        self.plan = plan_execution(analysis, md)
        assert is_flat(self.plan.exact_sql) and self.plan.fallback_sql is not None, sql
        self.compiled = compile_plan(self.backend, self.plan)

    def run(self, db: Mapping[str, Sequence[tuple[Any, ...]]], params: Sequence[Any] = ()
            ) -> list[list[float]]:
        """The levels, after checking that flat and fallback agree bit for bit."""
        fill(self.backend._con, db)
        flat, grouped = levels_both(self.backend, self.compiled, self.unit, params)
        assert flat == grouped, f"FLAT != FALLBACK\ndb={db}\nflat={flat}\nfallback={grouped}"
        return flat

    def taus(self) -> list[list[float]]:
        return [value_levels(p, self.unit) for p in self.unit.parts]

    def close(self) -> None:
        self.backend.close()


@pytest.fixture
def engine() -> Iterator[Callable[[str, Metadata], Engine]]:
    made: list[Engine] = []

    def make(sql: str, md: Metadata) -> Engine:
        made.append(Engine(sql, md))
        return made[-1]
    yield make
    for e in made:
        e.close()


Values = Callable[[random.Random], float | None]


def random_database(rng: random.Random, price: Values | None = None, w: Values | None = None,
                    rows: int = 10) -> Database:
    """1-3 customers and suppliers, orphans (customer 9 without a row, order 99 without an
    order, supplier 8 without a row), several rows per pair."""
    customers = list(range(1, rng.randint(1, 3) + 1))
    suppliers = list(range(1, rng.randint(1, 3) + 1))
    orders = [(o, rng.choice([*customers, 9])) for o in range(1, rng.randint(1, 4) + 1)]
    keys = [o for o, _ in orders] + [99]
    items = []
    for _ in range(rng.randint(0, rows)):
        items.append((rng.choice(keys), rng.choice([*suppliers, 8]), rng.randint(-3, 5),
                      price(rng) if price else round(rng.uniform(-5, 9), rng.randint(0, 6)),
                      round(rng.uniform(-1, 1200), 4), w(rng) if w else rng.random()))
    items = items * rng.randint(1, 3)
    return {"customer": [(c,) for c in customers], "supplier": [(s,) for s in suppliers],
            "orders": orders, "items": items}


def neighbours(db: Mapping[str, Sequence[tuple[Any, ...]]]) -> Iterator[tuple[str, Database]]:
    """Every neighbour by removal of one unit with its FK cascade: a customer (its orders and
    their items), a supplier (its items); ids any row holds, rows of absent units included."""
    for c in sorted({r[0] for r in db["customer"]} | {r[1] for r in db["orders"]}):
        gone = {o for o, cust in db["orders"] if cust == c}
        yield f"customer {c}", {
            "customer": [r for r in db["customer"] if r[0] != c],
            "supplier": list(db["supplier"]),
            "orders": [r for r in db["orders"] if r[1] != c],
            "items": [r for r in db["items"] if r[0] not in gone]}
    for s in sorted({r[0] for r in db["supplier"]} | {r[1] for r in db["items"]}):
        yield f"supplier {s}", {
            "customer": list(db["customer"]),
            "supplier": [r for r in db["supplier"] if r[0] != s],
            "orders": list(db["orders"]),
            "items": [r for r in db["items"] if r[1] != s]}


# a stored value exactly on a level, one ulp either side, one step below it (value units:
# every SUM part's levels are integers >= 2, so a row can sit on the low ones)
def _edges(tops: Sequence[float]) -> Values:
    def pick(rng: random.Random) -> float:
        t = rng.choice(tops)
        return rng.choice([t, -t, math.nextafter(t, 0), math.nextafter(t, math.inf),
                           t - level_step(t, False), t * 0.37, 0.0])
    return pick


# ----------------------------------------------------------- 1. flat vs fallback: identical

CASES: dict[str, tuple[str, dict[str, Any], Values | None, Values | None]] = {
    # fractional DOUBLE values of both signs: two parts
    "fractional": ("SELECT SUM(price) FROM items", {}, None, None),
    # a wide grid: steps delta_j up to 2^1 value units, fractions floor away at the top
    "wide 5.5": ("SELECT SUM(price) FROM items", {"gs": 2**27, "base": 5.5, "phi": "1.0e+6"},
                 lambda r: r.uniform(-3.5, 1e6), None),
    "base 2.5 on the levels": ("SELECT SUM(price), COUNT(*) FROM items",
                               {"base": 2.5, "phi": "100.0", "plo": "-100.0"},
                               _edges([2.0, 6.0, 15.0, 39.0, 97.0]), None),
    "base 5.5 on the levels": ("SELECT SUM(price) FROM items",
                               {"base": 5.5, "gs": 40, "phi": "200.0"},
                               _edges([5.0, 30.0, 166.0]), None),
    # a DECIMAL column, and several SUMs with COUNT(*) in one query
    "decimal": ("SELECT SUM(amt) FROM items", {"base": 2.5}, None, None),
    "mixed": ("SELECT COUNT(*), SUM(price), SUM(amt), SUM(qty * 0.37), COUNT(*) FROM items",
              {"gs": 1000, "base": 5.5}, None, None),
    # a SUM of an expression over the join, with a division that can fail (TRY: NULL)
    "expression": ("SELECT SUM(price * 3 - qty), SUM(amt / (qty + 3)) FROM items i"
                   " JOIN orders o ON o.o_id = i.i_order", {"base": 2.5}, None, None),
    # NULL values (a one-part SUM keeps NULL; the two-part GREATEST(NULL, 0) is 0)
    "nulls": ("SELECT SUM(price), SUM(w) FROM items", {},
              lambda r: None if r.random() < 0.5 else r.uniform(-5, 9),
              lambda r: None if r.random() < 0.5 else r.random()),
    # a negative-only SUM (one part of sign -1)
    "negative only": ("SELECT SUM(price) FROM items", {"plo": "-9.75", "phi": "-0.5"},
                      lambda r: r.uniform(-12, 1), None),
    # huge: the top level at 2^62 value units, rows clamped there (steps 2^32)
    "levels near 2^62": ("SELECT SUM(w) FROM items", {"whi": "1.0e+300", "max_sum": 2**62},
                         None, lambda r: r.choice([1e300, 2.0**62, 3.3e18, 2.0**61 + 2**40,
                                                   r.random() * 1e19, 0.5])),
    "huge on base 5.5": ("SELECT SUM(w), COUNT(*) FROM items",
                         {"whi": "1.0e+19", "max_sum": 2**61, "base": 5.5},
                         None, lambda r: r.choice([1e19, float(5.5**24 // 1), r.random() * 1e18,
                                                   float(levels(2**61, 5.5)[-2])])),
    # tiny: bounds of 1e-300 (a fixed-point exponent beyond 1000), subnormal rows
    "tiny": ("SELECT SUM(w), SUM(w * 1e-5) FROM items", {"whi": "1.0e-300"}, None,
             lambda r: r.choice([5e-324, 1e-300, 2.2e-308, r.random() * 1e-300])),
}


@pytest.mark.parametrize("case", CASES)
def test_flat_and_fallback_levels_are_bit_identical(case, engine):
    sql, kw, price, w = CASES[case]
    e = engine(sql, metadata(**kw))
    rng = random.Random(sum(map(ord, case)))
    nonzero = 0
    for _ in range(3):
        got = e.run(random_database(rng, price, w))
        nonzero += any(v for part in got for v in part)
    assert nonzero or case == "tiny"  # the test reached values


def test_the_tau_literal_and_scale_floor_exactly_as_numpy(engine):
    """level_capacity's SQL (LEAST(v, <float(tau) literal>) * 2^-e, FLOOR, capped at T) against
    dpsql.noise.r2t_certify.level_caps, the flat reading's floor, one DOUBLE at a time: on the
    level, one ulp either side, one delta below, fractions; levels of bases 2, 2.5, 5.5, 7.3,
    a just-above-2 base and a huge one, from 2 up to 2^62 (literals ``N.0`` and ``x.ye+NN``)."""
    con = duckdb.connect(config={"threads": 1})
    taus = sorted({float(t) for base, gs in ((2.0, 2**62), (2.5, 10**18), (5.5, 10**18),
                                             (7.3, 10**18), (2.0000001, 2**40), (1000.5, 10**18))
                   for t in levels(gs, base)})
    rng = random.Random(7)
    rows = []
    for j, tau in enumerate(taus):
        delta = level_step(tau, False)
        for v in {tau, math.nextafter(tau, 0), math.nextafter(tau, math.inf), tau - delta,
                  tau - delta / 2, tau + delta, 2 * tau, tau / 3, delta, 0.0, 5e-324,
                  rng.random() * tau}:
            rows.append((j, v))
    con.execute("CREATE TABLE v(j INTEGER, x DOUBLE)")
    con.executemany("INSERT INTO v VALUES (?, ?)", rows)
    cases = [exp.If(this=exp.EQ(this=exp.column("j"), expression=exp.Literal.number(j)),
                    true=level_capacity(exp.column("x"), tau)) for j, tau in enumerate(taus)]
    sql = exp.select("j", "x", exp.alias_(exp.Case(ifs=cases), "c")).from_("v").group_by(
        "j", "x").sql("duckdb")
    got = con.execute(sql).fetchall()
    assert len(got) == len(set(rows))
    for j, x, c in got:
        tau = taus[j]
        s, cap = level_caps(np.array([x]), tau, level_step(tau, False), False)
        assert c == min(int(s[0]), cap), (tau, x, c)


def test_the_guards_boundary_gives_the_same_levels(tmp_path, monkeypatch):
    """flat_guard rows are read flat, one more runs the fallback: the same levels (the guard
    is the reader's, multi_execute.FLAT_ROWS; the SQL has no LIMIT). The
    query reads four columns (two ids, the SUM's two parts), so the guard is FLAT_ROWS * 3 / 4:
    6 rows at FLAT_ROWS 8."""
    monkeypatch.setattr(multi_rewrite, "FLAT_ROWS", 8)
    monkeypatch.setattr(multi_execute, "FLAT_ROWS", 8)
    md = metadata(base=5.5, gs=40, phi="200.0")
    sql = "SELECT SUM(price), COUNT(*) FROM items"
    analysis = analyze_request(sql, md)
    backend = DuckDBBackend(None, md)
    try:
        compiled = compile_plan(backend, plan_execution(analysis, md))
        assert "LIMIT" not in compiled.plan.exact_sql
        ran = tiny_multi.recorded(backend, monkeypatch)
        base = [(1, 1, 0, 166.0, 1, 0.5), (1, 1, 0, 29.9, 1, 0.5), (2, 2, 0, 5.0, 1, 0.5)]
        db = {"customer": [(1,), (2,)], "supplier": [(1,), (2,)],
              "orders": [(1, 1), (2, 2)], "items": base * 2}
        fill(backend._con, db)
        at, _ = multi_execute.read_pair_truncated(backend, compiled, [], analysis.unit)
        assert len(ran) == 1  # 6 rows: flat
        db["items"] = base * 2 + [(2, 2, 0, 0.0, 1, 0.5)]  # a 7th row, of value 0
        fill(backend._con, db)
        past, _ = multi_execute.read_pair_truncated(backend, compiled, [], analysis.unit)
        # 7 rows: the flat read, then the fallback's queries (a few capacity columns each)
        assert compiled.fallback is not None
        assert ran[1:] == [ran[1], *compiled.fallback] and len(compiled.fallback) > 1
        assert all("GROUP BY" in q for q in ran[2:-1])  # then the neither-unit totals
        done = len(ran)
        monkeypatch.setattr(multi_execute, "FLAT_ROWS", 10)  # guard 7: the 7 rows read flat
        flat, _ = multi_execute.read_pair_truncated(backend, compiled, [], analysis.unit)
        assert len(ran) == done + 1
        assert [p.tolist() for p in past] == [f.tolist() for f in flat]
        # a value-0 row changes no SUM level; the count's pair (2, 2) has one more row
        assert [p.tolist() for p in past[:2]] == [a.tolist() for a in at[:2]]
        assert past[2].tolist() == [4 + 3] * 3 and at[2].tolist() == [4 + 2] * 3
    finally:
        backend.close()


def _spark_and_duckdb(make_backend: Any, path: Any, db: Database, md: Metadata, sql: str,
                      params: Sequence[Any]) -> tuple[list[list[float]], list[list[float]]]:
    analysis = analyze_request(sql, md)
    backend = make_backend(path, md)
    try:
        flat, grouped = levels_both(backend, compile_plan(backend, plan_execution(analysis, md)),
                                    analysis.unit, params)
    finally:
        backend.close()
    assert flat == grouped, (sql, flat, grouped)
    reference = DuckDBBackend(None, md)
    try:
        fill(reference._con, db)
        want, _ = levels_both(reference, compile_plan(reference, plan_execution(analysis, md)),
                              analysis.unit, params)
    finally:
        reference.close()
    return flat, want


def test_spark_gives_duckdbs_flat_and_fallback_levels(tmp_path_factory, make_backend):
    """On every backend (Spark: DECIMAL literals, FLOOR to BIGINT, DECIMAL(38, 0) sums): flat
    and fallback bit-identical, and equal to DuckDB's. Values on the levels, fractions, NULLs,
    a negative part and COUNT(*) mixed in; then levels up to 10^18 on base 10^6 (tau literals
    in decimal and in scientific notation) with rows on them. Few levels per grid: Spark
    compiles each of the fallback's queries (a few capacity columns each) in about a
    second."""
    rng = random.Random(11)
    huge = [float(t) for t in levels(10**18, 10**6)]
    db = random_database(rng, _edges([2.0, 6.0, 15.0, 39.0, 97.0]),
                         lambda r: r.choice([*huge, 1e19, r.random() * 1e18]), rows=14)
    db["items"] += [(1, 1, 2, None, None, None), (1, 1, 4, 0.1 + 0.2, 1.1, 1e-9)]
    path = tmp_path_factory.mktemp("flat_sums") / "flat.duckdb"
    with writing(path) as con:
        fill(con, db)
    got, want = _spark_and_duckdb(
        make_backend, path, db, metadata(base=16.0, phi="100.0", plo="-100.0"),
        "SELECT COUNT(*), SUM(price) FROM items WHERE qty > ?", [-1])
    assert got == want and any(got[1])
    got, want = _spark_and_duckdb(
        make_backend, path, db, metadata(base=1e6, whi="1.0e+19", max_sum=10**18),
        "SELECT SUM(w), COUNT(*) FROM items", [])
    assert got == want and got[0][-1] > 1e15


# -------------------------------------------------- 2. sensitivity, flat and fallback paths

SENSITIVITY: dict[str, tuple[str, dict[str, Any], Values | None, Values | None]] = {
    "fractional, both signs": ("SELECT SUM(price) FROM items", {"base": 2.5}, None, None),
    "on the levels, wide": ("SELECT SUM(price), COUNT(*) FROM items",
                            {"gs": 2**27, "base": 5.5, "phi": "200.0", "plo": "-200.0"},
                            _edges([5.0, 30.0, 166.0]), None),
    "join, decimal and an expression": (
        "SELECT SUM(amt * 0.37), SUM(price / (qty + 3)) FROM items i JOIN orders o"
        " ON o.o_id = i.i_order", {"gs": 100, "base": 5.5}, None, None),
    "huge levels": ("SELECT SUM(w) FROM items", {"whi": "1.0e+300", "max_sum": 2**62},
                    None, lambda r: r.choice([1e300, 2.0**61 + 2**40, r.random() * 1e19, 0.5])),
}


@pytest.mark.parametrize("case", SENSITIVITY)
def test_every_level_moves_by_at_most_tau_on_both_paths(case, engine):
    """Brute force over every unit removal (each database checked on both paths by
    Engine.run): Q_j >= 0, removal never raises it, lowers it by at most tau_j."""
    sql, kw, price, w = SENSITIVITY[case]
    e = engine(sql, metadata(**kw))
    taus = e.taus()
    rng = random.Random(sum(map(ord, case)))
    moved = 0.0
    for _ in range(3):
        db = random_database(rng, price, w, rows=6)
        base = e.run(db)
        for what, other_db in neighbours(db):
            other = e.run(other_db)
            for q, q2, levels_ in zip(base, other, taus, strict=True):
                for tau, x, y in zip(levels_, q, q2, strict=True):
                    assert x >= 0 and y >= 0
                    assert y <= x and x - y <= tau, (
                        f"PRIVACY BUG: {sql}\ndb={db}\nremoved {what}, tau={tau}: {x} -> {y}")
                    moved = max(moved, (x - y) / tau)
    assert moved == 1.0  # some unit was truncated at its full level: the bound is tight


# ----------------------------------------------- 3. error oracles and data-dependent refusals

def test_extreme_stored_values_raise_nothing_on_either_path(engine):
    """+-inf, NaN, NULL, huge and subnormal stored values, a division by zero in the SUM's
    expression, rows of no unit at all: both paths return (equal) levels, no error (an error
    on one database and not its neighbour would be an oracle)."""
    e = engine("SELECT SUM(price), SUM(w), SUM(amt / (qty + 3)), COUNT(*) FROM items",
               metadata(whi="1.0e+300", max_sum=2**62))
    weird = [math.inf, -math.inf, math.nan, None, 1e308, -1e308, 5e-324, -0.0]
    db: Database = {"customer": [(1,)], "supplier": [(1,)], "orders": [(1, 1), (2, 9)],
                    "items": [(o, s, q, p, 1.5, w) for o in (1, 2, 99) for s in (1, 8)
                              for q in (0, 2) for p, w in zip(weird, reversed(weird), strict=True)]}
    got = e.run(db)
    assert all(v >= 0 and math.isfinite(v) for part in got for v in part)
    empty = e.run({"customer": [], "supplier": [], "orders": [], "items": []})
    assert [len(p) for p in empty] == [len(p) for p in got]
    assert not any(v for part in empty for v in part)
    # one pair of many rows at the top value: the per-pair sum of floors is capped at T_j
    top = engine("SELECT SUM(w) FROM items", metadata(whi="1.0e+300", max_sum=2**62))
    many = {"customer": [(1,)], "supplier": [(1,)], "orders": [(1, 1)],
            "items": [(1, 1, 4, 7.25, 1000, 1e300)] * 300}
    assert top.run(many) == top.taus()  # levels 2^j: each exactly tau_j

def test_the_plan_is_chosen_from_the_sql_and_metadata_alone():
    """Flat or grouped, and the fallback's text, depend on the SQL and the metadata only:
    planning reads no data (the same plan for any database), and the fallback is compiled
    with the plan (reaching it can meet no compile error)."""
    md = metadata(base=5.5, gs=1000)
    sql = "SELECT COUNT(*), SUM(price), SUM(amt) FROM items WHERE qty > ?"
    plans = []
    for db in ({}, random_database(random.Random(1), rows=30)):
        backend = DuckDBBackend(None, md)
        try:
            fill(backend._con, db)
            compiled = compile_plan(backend, plan_execution(analyze_request(sql, md), md))
            assert compiled.fallback is not None
            plans.append((compiled.plan.exact_sql, compiled.plan.fallback_sql))
        finally:
            backend.close()
    assert plans[0] == plans[1]
