"""Partition selection by brute force over every neighbour of tiny databases, on real DuckDB.

For random tiny databases D (2-4 rows of private table ``a``, values from {1, 2, 3}; public
``p`` fixed) and query templates grouping by partition-selected columns, this runs the plan's
GROUPS query (what the engine reads before selecting, dpsql.execute.layout.write_selected) on
D and on EVERY neighbour D' (one row of ``a`` replaced by any other tuple), and checks what
dpsql.noise.partition's proof assumes and what the release needs:

1. no group outside the data: the groups are exactly the distinct keys of the query's
   relation (so no released key can be outside the data);
2. the per-group row counts ``__n`` differ between D and D' by at most 2S in L1, with at most
   S groups emptied and at most S created (S = the analysis's constant stability);
3. the histogram bound: every measurement changes by at most ES(0) per group and in L1 over the
   union of groups (a group absent on one side counts as 0).

A failure prints the database, the neighbour and both results: a counterexample is a privacy
bug.
"""

from __future__ import annotations

import itertools
import random

import duckdb
import pytest

from dpsql.analysis.elastic import analyze
from dpsql.metadata import loads_metadata
from dpsql.rewrite.plan import plan_execution

VALUES = (1, 2, 3)

METADATA = loads_metadata("""
tables:
  a:
    columns:
      x: {max_freq: 4, releasable: true, partition_selection: true, type: INTEGER}
      y: {max_freq: 4, releasable: true, partition_selection: true, bounds: [0, 2],
          type: INTEGER}
  p:
    public: true
    columns:
      x: {max_freq: 2, type: INTEGER}
      g: {type: INTEGER}
""")

#: p: x = 1 twice, 2 once (mf 2): a public join has stability 2
PUBLIC_ROWS = [(1, 10), (1, 11), (2, 10)]

#: (sql, the query's relation as plain SQL: its group keys, one row per relation row)
QUERIES = [
    ("SELECT x, COUNT(*) FROM a GROUP BY x", "SELECT x FROM a"),
    ("SELECT x, SUM(y), COUNT(y) FROM a WHERE y <> 1 GROUP BY x",
     "SELECT x FROM a WHERE y <> 1"),
    ("SELECT x, y, COUNT(*) FROM a GROUP BY x, y", "SELECT x, y FROM a"),
    ("SELECT a.x, COUNT(*), SUM(a.y) FROM a JOIN p ON a.y = p.x GROUP BY a.x",
     "SELECT a.x FROM a JOIN p ON a.y = p.x"),
    ("SELECT a.y, p.g, COUNT(*) FROM a JOIN p ON a.x = p.x GROUP BY a.y, p.g",
     "SELECT a.y, p.g FROM a JOIN p ON a.x = p.x"),
    ("SELECT t.x, AVG(t.y) FROM (SELECT x, y FROM a WHERE x <> 3) t GROUP BY t.x",
     "SELECT x FROM a WHERE x <> 3"),
]


def _databases(seed: int, n: int):
    rng = random.Random(seed)
    for _ in range(n):
        size = rng.randint(2, 4)
        yield [(rng.choice(VALUES), rng.choice(VALUES)) for _ in range(size)]


def _neighbours(rows):
    for i, new in itertools.product(range(len(rows)), itertools.product(VALUES, VALUES)):
        if rows[i] != new:
            yield [*rows[:i], new, *rows[i + 1:]]


def _run(con, rows, sql):
    con.execute("DELETE FROM a")
    con.executemany("INSERT INTO a VALUES (?, ?)", rows)
    return con.execute(sql).fetchall()


def _groups(result, n_keys):
    """{key tuple: (row count, measurements...)}."""
    out = {}
    for r in result:
        key = tuple(r[:n_keys])
        assert key not in out, f"group {key} appears twice"
        out[key] = tuple(0 if v is None else float(v) for v in r[n_keys:])
    return out


@pytest.mark.parametrize(("sql", "relation"), QUERIES, ids=[q[0] for q in QUERIES])
def test_groups_and_counts_over_every_neighbour(sql, relation):
    analysis = analyze(sql, METADATA)
    assert analysis.partition_selection
    stability = analysis.selection_stability
    plan = plan_execution(analysis, METADATA)
    assert plan.selected
    n_keys = plan.n_keys
    es = [m.sensitivity.at(0) for m in analysis.measurements]
    con = duckdb.connect(config={"threads": 1})
    con.execute("CREATE TABLE a (x INTEGER, y INTEGER)")
    con.execute("CREATE TABLE p (x INTEGER, g INTEGER)")
    con.executemany("INSERT INTO p VALUES (?, ?)", PUBLIC_ROWS)
    if "JOIN p" in sql:
        assert stability == 2  # p's key has max frequency 2
    for rows in _databases(len(sql), 4):
        here = _groups(_run(con, rows, plan.exact_sql), n_keys)
        keys = {tuple(r) for r in _run(con, rows, relation)}
        assert set(here) == keys, (rows, here, keys)  # 1: no group outside the data
        for other in _neighbours(rows):
            there = _groups(_run(con, other, plan.exact_sql), n_keys)
            union = set(here) | set(there)
            zero = (0.0,) * (1 + len(es))
            counts = [abs(here.get(k, zero)[0] - there.get(k, zero)[0]) for k in union]
            context = (rows, other, here, there)
            assert sum(counts) <= 2 * stability, context  # 2
            assert len(set(here) - set(there)) <= stability, context
            assert len(set(there) - set(here)) <= stability, context
            for j, bound in enumerate(es):  # 3
                diffs = [abs(here.get(k, zero)[1 + j] - there.get(k, zero)[1 + j])
                         for k in union]
                assert max(diffs, default=0.0) <= bound + 1e-9, (j, context)
                assert sum(diffs) <= bound + 1e-9, (j, context)
    con.close()
