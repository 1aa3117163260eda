"""Brute force: a derived table grouped by the privacy unit (dpsql.units.derived; docs/privacy.md,
"Privacy units: a derived table grouped by the unit"), on real DuckDB.

For random tiny databases (tests/units/tiny.py's shop: customers, their orders, the orders'
items; orphans, and here NULL ``o_cust`` too) and every accepted query below, every unit is
removed with its cascade (D is D minus u plus u: the add / remove relation) and this checks:

1. the derived table: D(db minus u) is a sub-multiset of D(db) with at most ONE row fewer
   (the rule's claim: a unit adds at most its own group's row and changes no other);
2. the release: what the engine reads (dpsql.rewrite.plan's exact query) moves by at most
   each measurement's claimed sensitivity in L1 over the bins; with a partition-selected key,
   ``__n`` rises by at most 1 in one group (none disappears; a created group has ``__n`` = 1),
   what dpsql.noise.unit_partition's proof needs at kappa = 1.

The near misses (grouped by a column other than the unit id; a private table joined off its
unit path) break claim 1 on these databases, so the rule's conditions are needed; and the
accepted queries reach their bounds (not vacuous). A failure prints the database, the unit and
both results: a privacy bug.
"""

from __future__ import annotations

import functools
import os
import random
from collections import Counter

import duckdb
import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.errors import UnsupportedConstructError
from dpsql.rewrite.plan import plan_execution
from tests.units import tiny

D13 = ("SELECT c.c_id, COUNT(o.o_id) AS n FROM customer c LEFT JOIN orders o "
       "ON o.o_cust = c.c_id AND o.amount > 0 GROUP BY c.c_id")
CLAMPED = ("SELECT c.c_id, LEAST(COUNT(o.o_id), 2) AS n FROM customer c LEFT JOIN orders o "
           "ON o.o_cust = c.c_id GROUP BY c.c_id")
DIRECT = "SELECT o.o_cust, COUNT(*) AS n, LEAST(COUNT(*), 3) AS m FROM orders o GROUP BY o.o_cust"
VIA = ("SELECT c.c_id, COUNT(i.qty) AS n FROM customer c JOIN orders o ON o.o_cust = c.c_id "
       "LEFT JOIN items i ON i.i_order = o.o_id AND i.kind < 3 GROUP BY c.c_id")
VIA_LEFT = ("SELECT o.o_cust, COUNT(i.i_order) AS n FROM orders o LEFT JOIN items i "
            "ON i.i_order = o.o_id GROUP BY o.o_cust")
SELF = ("SELECT a.o_cust, COUNT(*) AS n FROM orders a JOIN orders b ON a.o_cust = b.o_cust "
        "WHERE a.amount < b.amount GROUP BY a.o_cust")
HAVING = ("SELECT c.c_id, COUNT(o.o_id) AS n FROM customer c JOIN orders o ON o.o_cust = c.c_id "
          "JOIN regions r ON r.r = c.region GROUP BY c.c_id HAVING COUNT(*) > 1")

#: (the derived table, the query over it as ``d``)
QUERIES = [
    (D13, f"SELECT n, COUNT(*) FROM ({D13}) d GROUP BY n"),
    (CLAMPED, f"SELECT n, COUNT(*) FROM ({CLAMPED}) d GROUP BY n"),
    (CLAMPED, f"SELECT SUM(n), AVG(n), COUNT(*) FROM ({CLAMPED}) d WHERE n > 0"),
    (DIRECT, f"SELECT n, COUNT(*), SUM(m) FROM ({DIRECT}) d GROUP BY n"),
    (VIA, f"WITH d AS ({VIA}) SELECT n, COUNT(*) FROM d GROUP BY n"),
    (VIA_LEFT, f"SELECT n, COUNT(*) FROM ({VIA_LEFT}) d GROUP BY n"),
    (SELF, f"SELECT n, COUNT(*) FROM ({SELF}) d GROUP BY n"),
    (HAVING, f"SELECT n FROM ({HAVING}) d GROUP BY n"),  # key-only: selected
]

#: derived tables the rule refuses, each breaking claim 1 on the databases below
NEAR_MISSES = [
    "SELECT c.region, COUNT(*) AS n FROM customer c GROUP BY c.region",
    "SELECT c.c_id, COUNT(o.o_id) AS n FROM customer c LEFT JOIN orders o ON o.o_id = c.c_id "
    "GROUP BY c.c_id",
    "SELECT r.r, COUNT(c.c_id) AS n FROM regions r LEFT JOIN customer c ON c.region = r.r "
    "GROUP BY r.r",
]

DATABASES = int(os.environ.get("DPSQL_UNITS_DATABASES", "12"))


@functools.cache
def _databases() -> list[tiny.Database]:
    return random_databases(random.Random(int(os.environ.get("DPSQL_UNITS_SEED", "13"))),
                            DATABASES)


def random_databases(rng: random.Random, n: int) -> list[tiny.Database]:
    """tiny's random shops, with some orders' o_cust NULL (rows of no unit)."""
    out = []
    for _ in range(n):
        db = tiny.random_database(rng)
        db["orders"] = [(o, None if rng.random() < 0.15 else c, a) for o, c, a in db["orders"]]
        out.append(db)
    return out


_CON: list[duckdb.DuckDBPyConnection] = []


def _load(db: tiny.Database) -> duckdb.DuckDBPyConnection:
    """``db`` in an in-memory DuckDB (NULLs allowed), INTEGER columns as tiny's metadata says."""
    if not _CON:
        _CON.append(duckdb.connect(config={"threads": 1}))
    con = _CON[0]
    for table, columns in tiny.COLUMNS.items():
        con.execute(f"CREATE OR REPLACE TABLE {table} "
                    f"({', '.join(c + ' INTEGER' for c in columns)})")
        if db[table]:
            values = ", ".join("(" + ", ".join("NULL" if v is None else str(int(v)) for v in r)
                               + ")" for r in db[table])
            con.execute(f"INSERT INTO {table} VALUES {values}")
    return con


def _units(db: tiny.Database) -> list[int]:
    # (a NULL id is no unit: tests/redteam/test_units_derived_attacks.py has NULL customers)
    return sorted({c for c, _ in db["customer"] if c is not None}
                  | {c for _, c, _ in db["orders"] if c is not None})


MD = tiny.metadata(max_groups=3, max_rows_per_group=4)  # not what bounds this shape


@functools.cache
def _plan(sql: str):
    analysis = analyze_request(sql, MD)
    return analysis, plan_execution(analysis, MD)


Readings = list[dict[int | None, dict[str, list[tuple]]]]


def variant_rows(databases: list[tiny.Database], sqls: list[str]) -> Readings:
    """Per database, per unit removed (None: none), every SQL's rows (one load per variant)."""
    out = []
    for db in databases:
        per: dict[int | None, dict[str, list[tuple]]] = {}
        for u in [None, *_units(db)]:
            con = _load(db if u is None else tiny.remove_unit(db, u))
            per[u] = {sql: con.execute(sql).fetchall() for sql in dict.fromkeys(sqls)}
        out.append(per)
    return out


@functools.cache
def _readings() -> Readings:
    """:func:`variant_rows` of the derived tables, the near misses and the accepted queries'
    exact SQL over this module's databases."""
    sqls = [d for d, _ in QUERIES] + NEAR_MISSES + [_plan(q)[1].exact_sql for _, q in QUERIES]
    return variant_rows(_databases(), sqls)


def _one_row_added(derived: str, per: dict, u: int) -> bool:
    big, small = Counter(per[None][derived]), Counter(per[u][derived])
    return not (small - big) and sum((big - small).values()) <= 1


@pytest.mark.parametrize(("derived", "sql"), QUERIES)
def test_one_unit_is_at_most_one_row_and_the_release_moves_within_its_bound(derived, sql):
    analysis, plan = _plan(sql)
    check_derived(derived, sql, analysis, plan.exact_sql, _databases(), _readings())


def check_derived(derived: str, sql: str, analysis, exact_sql: str,
                  databases: list[tiny.Database], readings: Readings) -> None:
    """Claims 1 and 2 of the module docstring for ``sql`` over the derived table ``derived``
    (``analysis`` its accepted analysis, ``exact_sql`` what the engine reads), every unit
    removal of each database (``readings``: :func:`variant_rows` of both SQLs)."""
    assert analysis.unit is not None and analysis.unit.derived is not None
    n_keys, n_meas = len(analysis.group_keys), len(analysis.measurements)
    selected = analysis.partition_selection
    if selected:
        assert analysis.selection_stability == 1.0

    def read(rows: list[tuple]) -> dict[tuple, tuple[int, tuple[float, ...]]]:
        out = {}
        for r in rows:
            if selected:
                key, n, ms = r[:n_keys], int(r[n_keys]), r[n_keys + 1:]
            else:  # one row per non-empty bin (its index), or one row without GROUP BY
                key, n, ms = (r[:1] if n_keys else ()), 0, r[1:] if n_keys else r
            assert key not in out
            out[key] = (n, tuple(float(v or 0) for v in ms))
        return out

    zero = (0, (0.0,) * n_meas)
    for db, per in zip(databases, readings, strict=True):
        big = read(per[None][exact_sql])
        for u in _units(db):
            info = f"{sql}\ndb={db}\nunit={u}"
            assert _one_row_added(derived, per, u), f"{info}: D moved more than one row"
            small = read(per[u][exact_sql])
            info += f": {big} vs {small}"
            for j, m in enumerate(analysis.measurements):
                moved = sum(abs(big.get(g, zero)[1][j] - small.get(g, zero)[1][j])
                            for g in set(big) | set(small))
                assert moved <= m.sensitivity.at(0) + 1e-9, f"{info}\n{m.function}: {moved}"
            if selected:
                assert set(small) <= set(big), info
                moves = [big[g][0] - small.get(g, zero)[0] for g in big]
                assert all(d in (0, 1) for d in moves) and sum(moves) <= 1, info
                assert all(big[g][0] == 1 for g in set(big) - set(small)), info


@pytest.mark.parametrize("derived", NEAR_MISSES)
def test_the_near_misses_break_one_row_per_unit(derived):
    with pytest.raises(UnsupportedConstructError, match="unit"):
        analyze_request(f"SELECT n, COUNT(*) FROM ({derived}) d GROUP BY n", MD)
    assert any(not _one_row_added(derived, per, u)
               for db, per in zip(_databases(), _readings(), strict=True) for u in _units(db))


def test_the_bounds_are_reached():
    """Not vacuous: some removal drops a row of D, and moves the Q13 histogram by exactly 1."""
    plan = _plan(QUERIES[0][1])[1]
    reached = False
    for db, per in zip(_databases(), _readings(), strict=True):
        big = {r[0]: r[2] for r in per[None][plan.exact_sql]}
        for u in _units(db):
            small = {r[0]: r[2] for r in per[u][plan.exact_sql]}
            reached |= sum(abs(big.get(g, 0) - small.get(g, 0))
                           for g in set(big) | set(small)) == 1
    assert reached
