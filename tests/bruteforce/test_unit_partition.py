"""Brute force: partition selection under a privacy unit, on real DuckDB (docs/privacy.md,
"Privacy units"; dpsql.noise.unit_partition's proof).

For random tiny databases (tests/units/tiny.py: customers, their orders, the orders' items,
orphans included; ``items.kind`` has NO domain here, ``partition_selection: true``) and every
accepted query below, this runs dpsql's GROUPS query (what the engine reads before selecting,
dpsql.execute.layout.write_selected) on D and on D minus each unit's cascade (D is D minus u
plus u: the add/remove relation), and checks what the proof assumes:

1. no group outside the data: every group is a key combination of the query's rows on D;
2. ``__n`` rises by at most 1 per group and by at most kappa in L1 when u is added; no group
   of D minus u disappears; at most kappa groups appear, each with ``__n = 1``;
3. the kept groups' aggregates: every measurement moves by at most its claimed sensitivity
   kappa * C * w in L1 over the union of groups;
4. with C = 1, the COUNT(*) the selection shares is ``__n`` itself.

A failure prints the database, the unit and both results: a privacy bug.
"""

from __future__ import annotations

import dataclasses
import os
import random

import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.metadata import Column, Metadata
from dpsql.noise.unit_partition import shared_count
from dpsql.rewrite.plan import plan_execution
from tests.units import tiny

#: (sql, the query's rows as plain SQL: their group keys)
QUERIES = [
    ("SELECT kind, COUNT(*) FROM items GROUP BY kind", "SELECT kind FROM items"),
    ("SELECT kind, COUNT(*), SUM(qty) FROM items GROUP BY kind", "SELECT kind FROM items"),
    ("SELECT kind, SUM(amount) FROM items i JOIN orders o ON o.o_id = i.i_order GROUP BY kind",
     "SELECT kind FROM items i JOIN orders o ON o.o_id = i.i_order"),
    ("SELECT c.region, i.kind, COUNT(*) FROM customer c JOIN orders o ON o.o_cust = c.c_id"
     " JOIN items i ON i.i_order = o.o_id GROUP BY c.region, i.kind",
     "SELECT c.region, i.kind FROM customer c JOIN orders o ON o.o_cust = c.c_id"
     " JOIN items i ON i.i_order = o.o_id"),
    ("SELECT DISTINCT kind FROM items", "SELECT kind FROM items"),
    ("SELECT kind FROM items i WHERE EXISTS (SELECT 1 FROM orders o WHERE o.o_id = i.i_order"
     " AND o.amount > 0) GROUP BY kind",
     "SELECT kind FROM items i WHERE EXISTS (SELECT 1 FROM orders o WHERE o.o_id = i.i_order"
     " AND o.amount > 0)"),
    # a key with a declared domain, key-only: its keys are selected too (the unit table
    # read alone: one row, so one group, per unit)
    ("SELECT DISTINCT region FROM customer", "SELECT region FROM customer"),
    ("SELECT DISTINCT region FROM customer c WHERE EXISTS (SELECT 1 FROM orders o"
     " WHERE o.o_cust = c.c_id)",
     "SELECT region FROM customer c WHERE EXISTS (SELECT 1 FROM orders o"
     " WHERE o.o_cust = c.c_id)"),
]

DATABASES = int(os.environ.get("DPSQL_UNITS_DATABASES", "10"))


def metadata(kappa: int, c: int) -> Metadata:
    md = tiny.metadata(max_groups=kappa, max_rows_per_group=c)
    items = md.tables["items"]
    columns = dict(items.columns)
    columns["kind"] = Column("kind", type="INTEGER", releasable=True, partition_selection=True)
    return dataclasses.replace(md, tables={**md.tables, "items": dataclasses.replace(
        items, columns=columns)})


def _databases() -> list[tiny.Database]:
    rng = random.Random(int(os.environ.get("DPSQL_UNITS_SEED", "16")))
    return [tiny.random_database(rng) for _ in range(DATABASES)]


@pytest.mark.parametrize(("sql", "relation"), QUERIES)
@pytest.mark.parametrize(("kappa", "c"), [(1, 1), (2, 3)])
def test_selected_groups_move_as_the_unit_proof_assumes(sql, relation, kappa, c):
    md = metadata(kappa, c)
    analysis = analyze_request(sql, md)
    assert (shared_count(analysis) is not None) == (c == 1 and "COUNT(*)" in sql)
    check_selection(sql, relation, md, _databases())


@pytest.mark.parametrize(("sql", "relation"), QUERIES)
@pytest.mark.parametrize(("kappa", "c"), [(1, 1), (2, 3)])
def test_selection_moves_as_assumed_with_large_groups_of_no_unit(sql, relation, kappa, c):
    """The same checks on databases with many rows of no unit in every kind
    (tiny.null_heavy_database): ``__n`` counts them in full, the same in both neighbours."""
    rng = random.Random(int(os.environ.get("DPSQL_UNITS_SEED", "16")) + 1)
    check_selection(sql, relation, metadata(kappa, c),
                    [tiny.null_heavy_database(rng) for _ in range(DATABASES // 2)])


def test_n_is_the_kept_units_plus_the_rows_of_no_unit():
    """``__n`` of a group is the number of units kept in it plus its number of rows of no
    unit (dpsql.units.rewrite._selection_count), so the shared COUNT(*) at C = 1 is the
    group's count with the rows of no unit in full. Before, they counted as one unit."""
    md = metadata(1, 1)
    sql = "SELECT kind, COUNT(*) FROM items GROUP BY kind"
    plan = plan_execution(analyze_request(sql, md), md)
    db = {"customer": [(1, 1), (2, 1)], "orders": [(1, 1, 0), (2, 2, 0), (3, None, 0)],
          # kind 1: unit 1 (two rows) and 4 rows of no unit (guest order 3, orphan 99, NULL);
          # kind 2: unit 2, and 1 row of no unit; kind 3: rows of no unit only (3)
          "items": [(1, 0, 1), (1, 0, 1), (3, 0, 1), (3, 0, 1), (99, 0, 1), (None, 0, 1),
                    (2, 0, 2), (99, 0, 2), (3, 0, 3), (None, 0, 3), (None, 0, 3)],
          "regions": [(1,), (2,)]}
    got = {r[0]: (r[1], r[2]) for r in tiny.world(db).execute(plan.exact_sql).fetchall()}
    assert got == {1: (5, 5), 2: (2, 2), 3: (3, 3)}


def check_selection(sql: str, relation: str, md: Metadata,
                    databases: list[tiny.Database]) -> None:
    """Checks 1-4 of the module docstring for ``sql`` (partition-selected under ``md``'s unit)
    over every unit removal of each database; ``relation`` is the query's rows' keys."""
    analysis = analyze_request(sql, md)
    assert analysis.unit is not None and analysis.partition_selection
    # the unit table read alone is one row per unit: one group each (kappa = C = 1,
    # dpsql.units.analysis.one_row_per_unit); otherwise the owner's max_groups
    kappa = (1 if analysis.unit.derived is not None or analysis.unit.alone is not None
             else md.privacy_unit.max_groups)
    assert analysis.selection_stability == kappa
    plan = plan_execution(analysis, md)
    assert plan.selected
    n_keys, n_meas = len(analysis.group_keys), len(analysis.measurements)
    shared = shared_count(analysis)

    def groups(db: tiny.Database) -> dict[tuple, tuple[int, tuple[float, ...]]]:
        rows = tiny.world(db).execute(plan.exact_sql).fetchall()
        out = {}
        for r in rows:
            key, n, ms = r[:n_keys], r[n_keys], r[n_keys + 1:]
            assert key not in out
            out[key] = (int(n), tuple(float(v or 0) for v in ms))
        return out

    for db in databases:
        big = groups(db)
        keys_in_data = set(tiny.world(db).execute(relation).fetchall())
        assert set(big) <= keys_in_data, f"{sql}\ndb={db}: {set(big) - keys_in_data}"
        assert all(n >= 1 for n, _ in big.values())
        if shared is not None:
            assert all(ms[shared] == n for n, ms in big.values()), (sql, db, big)
        for u in tiny.units(db):
            small = groups(tiny.remove_unit(db, u))
            info = f"{sql}\ndb={db}\nunit={u}: {big} vs {small}"
            assert set(small) <= set(big), info
            created = set(big) - set(small)
            assert len(created) <= kappa and all(big[g][0] == 1 for g in created), info
            moves = [big[g][0] - small.get(g, (0, ()))[0] for g in big]
            assert all(0 <= d <= 1 for d in moves) and sum(moves) <= kappa, info
            zero = (0.0,) * n_meas
            for j, m in enumerate(analysis.measurements):
                moved = sum(abs(big[g][1][j] - small.get(g, (0, zero))[1][j]) for g in big)
                assert moved <= m.sensitivity.at(0) + 1e-9, f"{info}\n{m.function}: {moved}"


def test_the_tiny_databases_reach_the_bounds():
    """Not vacuous: some unit creates a group, and some unit moves kappa groups' counts."""
    md = metadata(2, 1)
    analysis = analyze_request(QUERIES[0][0], md)
    plan = plan_execution(analysis, md)
    created = moved_two = False
    for db in _databases():
        big = dict((r[0], r[1]) for r in tiny.world(db).execute(plan.exact_sql).fetchall())
        for u in tiny.units(db):
            small = dict((r[0], r[1]) for r in tiny.world(tiny.remove_unit(db, u)).execute(
                plan.exact_sql).fetchall())
            created |= bool(set(big) - set(small))
            moved_two |= sum(big[g] - small.get(g, 0) for g in big) == 2
    assert created and moved_two
