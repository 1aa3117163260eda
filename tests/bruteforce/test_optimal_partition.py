"""Brute force: the optimal partition selection under a privacy unit with kappa = 1
(dpsql.noise.optimal_partition), end to end on real DuckDB over tiny databases.

For random tiny databases (tests/units/tiny.py, ``items.kind`` partition-selected) and every
query below that the planner gives the optimal mechanism, this runs dpsql's GROUPS query on D
and on D minus each unit's cascade (the add/remove relation) and computes the EXACT law of
the released set of keys on both -- a product of Bernoulli(pi(__n)) over the groups, every
subset of the union enumerated -- then checks:

1. no released key outside the data (every group is a key combination of the query's rows);
2. the hockey-stick divergence of order e^epsilon between the two laws, both directions, is
   at most delta (in 60-digit decimals: the table's values are exact multiples of 2^-53);
3. not vacuous: some neighbour moves a group from 1 to 2 units, where a table weakened to
   2 epsilon breaks the same check.

A failure prints the database, the unit and both group counts: a privacy bug.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import random
from decimal import Decimal, localcontext

import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.budget import Budget
from dpsql.metadata import Column, Metadata
from dpsql.noise import optimal_partition
from dpsql.noise.partition import plan_with_selection
from dpsql.rewrite.plan import plan_execution
from tests.units import tiny

EPSILON, DELTA = 1.0, 1e-5

#: (sql, the query's rows as plain SQL: their group keys)
QUERIES = [
    ("SELECT DISTINCT kind FROM items", "SELECT kind FROM items"),
    ("SELECT kind FROM items GROUP BY kind", "SELECT kind FROM items"),
    ("SELECT kind, SUM(qty) FROM items GROUP BY kind", "SELECT kind FROM items"),
    ("SELECT DISTINCT c.region, i.kind FROM customer c JOIN orders o ON o.o_cust = c.c_id"
     " JOIN items i ON i.i_order = o.o_id",
     "SELECT c.region, i.kind FROM customer c JOIN orders o ON o.o_cust = c.c_id"
     " JOIN items i ON i.i_order = o.o_id"),
    ("SELECT kind FROM items i WHERE EXISTS (SELECT 1 FROM orders o WHERE o.o_id = i.i_order"
     " AND o.amount > 0) GROUP BY kind",
     "SELECT kind FROM items i WHERE EXISTS (SELECT 1 FROM orders o WHERE o.o_id = i.i_order"
     " AND o.amount > 0)"),
]

DATABASES = int(os.environ.get("DPSQL_UNITS_DATABASES", "6"))


def metadata() -> Metadata:
    md = tiny.metadata(max_groups=1, max_rows_per_group=2)
    items = md.tables["items"]
    columns = dict(items.columns)
    columns["kind"] = Column("kind", type="INTEGER", releasable=True, partition_selection=True)
    return dataclasses.replace(md, tables={**md.tables, "items": dataclasses.replace(
        items, columns=columns)})


def _databases() -> list[tiny.Database]:
    rng = random.Random(int(os.environ.get("DPSQL_UNITS_SEED", "16")))
    return [tiny.random_database(rng) for _ in range(DATABASES)]


def _law(counts: dict[tuple, int], universe: list[tuple],
         table: tuple[float, ...]) -> dict[frozenset, Decimal]:
    """P(released key set = S) for every subset S of ``universe``: independent Bernoullis."""
    pis = {g: Decimal(optimal_partition.keep_probability(table, counts.get(g, 0)))
           for g in universe}
    law = {}
    for bits in itertools.product((False, True), repeat=len(universe)):
        p = Decimal(1)
        for g, kept in zip(universe, bits, strict=True):
            p *= pis[g] if kept else 1 - pis[g]
        law[frozenset(g for g, kept in zip(universe, bits, strict=True) if kept)] = p
    return law


def _hockey_stick(p: dict[frozenset, Decimal], q: dict[frozenset, Decimal],
                  e: Decimal) -> Decimal:
    return sum((max(p[o] - e * q[o], Decimal(0)) for o in p), Decimal(0))


def _groups(sql: str, md: Metadata, db: tiny.Database) -> dict[tuple, int]:
    analysis = analyze_request(sql, md)
    plan = plan_execution(analysis, md)
    n_keys = len(analysis.group_keys)
    rows = tiny.load(db).execute(plan.exact_sql).fetchall()
    return {tuple(r[:n_keys]): int(r[n_keys]) for r in rows}


def worst_divergence(sql: str, relation: str, md: Metadata, table: tuple[float, ...],
                     epsilon: float, databases: list[tiny.Database]) -> tuple[Decimal, bool]:
    """(the largest hockey-stick divergence of order e^``epsilon`` minus delta over every
    neighbour pair, whether
    some neighbour moved a group from 1 to 2 units); asserts check 1 on the way."""
    worst, one_to_two = Decimal(-1), False
    with localcontext() as ctx:
        ctx.prec = 60
        e = Decimal(epsilon).exp()
        for db in databases:
            big = _groups(sql, md, db)
            keys_in_data = set(tiny.load(db).execute(relation).fetchall())
            assert set(big) <= keys_in_data, f"{sql}\ndb={db}: {set(big) - keys_in_data}"
            for u in tiny.units(db):
                small = _groups(sql, md, tiny.remove_unit(db, u))
                universe = sorted(set(big) | set(small))
                assert len(universe) <= 10, universe
                p, q = _law(big, universe, table), _law(small, universe, table)
                div = max(_hockey_stick(p, q, e), _hockey_stick(q, p, e)) - Decimal(DELTA)
                if div > worst:
                    worst = div
                one_to_two |= any(big[g] == 2 and small.get(g) == 1 for g in big)
    return worst, one_to_two


@pytest.mark.parametrize(("sql", "relation"), QUERIES)
def test_the_released_key_set_is_epsilon_delta_over_every_neighbour(sql, relation):
    md = metadata()
    analysis = analyze_request(sql, md)
    _, selection = plan_with_selection(analysis, Budget(EPSILON, DELTA))
    assert selection.mechanism == optimal_partition.MECHANISM, sql
    assert selection.keep_table is not None and selection.delta == DELTA
    # the selection's share: all of epsilon for a key-only query, half with one SUM
    worst, _ = worst_divergence(sql, relation, md, selection.keep_table, selection.epsilon,
                                _databases())
    assert worst <= 0, f"PRIVACY BUG: {sql}: hockey-stick exceeds delta by {worst}"


def test_a_table_at_twice_epsilon_is_caught():
    sql, relation = QUERIES[0]
    weak = optimal_partition.keep_table(2 * EPSILON, DELTA)
    assert weak is not None
    worst, one_to_two = worst_divergence(sql, relation, metadata(), weak, EPSILON,
                                         _databases())
    assert one_to_two, "no neighbour moves a group from 1 to 2 units: a vacuous check"
    assert worst > 0
