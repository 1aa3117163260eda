"""dpsql.units.rewrite's R2T query with noise off on real DuckDB: the truncated sums it returns
are exactly ``sum_u min(c_u, tau_j b) + c_NULL`` over the per-unit contributions its own inner
query computes (``__c``; c_NULL: its row of ``__u`` NULL, the rows of no unit, added in full),
whether they are summed per unit or, for counts, read from the histogram
of contributions the query returns (dpsql.units.execute.levels_from_histogram) -- on random
tiny databases (orphans, NULL paths, duplicate ids and keys), for the paper's grid and an
owner's grid (a SUM's levels in value units, dpsql.units.grid)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import sqlglot
from sqlglot import exp

from dpsql.analysis.blocks import analyze_request
from dpsql.metadata import loads_metadata
from dpsql.noise.r2t import levels, truncated_sums
from dpsql.rewrite.clamps import sum_exponent
from dpsql.rewrite.plan import plan_execution
from dpsql.units.execute import levels_from_histogram, truncated_levels
from dpsql.units.grid import part_grid
from tests.neighbours import outcome, write_database
from tests.units import tiny

QUERIES = [
    ("SELECT COUNT(*) FROM items", True),
    ("SELECT COUNT(*), COUNT(o.amount) FROM orders o", True),
    ("SELECT COUNT(*) FROM items i JOIN orders o ON o.o_id = i.i_order WHERE i.qty > 1", True),
    ("SELECT COUNT(*), COUNT(i.kind), COUNT(o.amount) FROM items i JOIN orders o"
     " ON o.o_id = i.i_order", True),  # three parts: one grouping set each
    ("SELECT COUNT(*) FROM orders o JOIN customer c ON c.c_id = o.o_cust"
     " JOIN regions r ON r.r = c.region", True),  # as TPC-H Q10
    ("SELECT COUNT(*), SUM(amount) FROM orders", False),  # a SUM: summed per unit
    ("SELECT SUM(qty) FROM items", False),
]


def _per_unit(exact_sql: str) -> str:
    tree = sqlglot.parse_one(exact_sql, read="duckdb")
    inner = next(s for s in tree.find_all(exp.Subquery) if s.alias == "__c")
    return inner.this.sql("duckdb")


@pytest.mark.parametrize(("sql", "histogram"), QUERIES)
@pytest.mark.parametrize("base", [2.0, 2.5])
def test_truncated_sums_equal_the_reference_over_the_units(sql, histogram, base):
    md = tiny.metadata(max_contribution=8, level_base=base)
    analysis = analyze_request(sql, md)
    release = analysis.unit
    assert release is not None and release.r2t
    exact_sql = plan_execution(analysis, md).exact_sql
    assert ("__h" in exact_sql) == histogram
    rng = random.Random(5)
    for _ in range(12):
        db = tiny.random_database(rng)
        # heavier units, so the low levels truncate
        db["items"] += [(o, 2, 1) for o, _, _ in db["orders"] for _ in range(rng.randint(0, 9))]
        _dirty(db, rng)
        con = tiny.load(db)
        result = con.execute(exact_sql).fetchall()
        if histogram:  # the same integers (c_NULL inside), flattened as the one-row layout
            row = tuple(v for part in levels_from_histogram(result, release) for v in part)
        else:  # one row per unit: per part its levels plus c_NULL, as read_truncated's
            row = tuple(v for part in truncated_levels(result, release) for v in part)
        cursor = con.execute(_per_unit(exact_sql))
        names = [d[0] for d in cursor.description]
        per_unit = cursor.fetchall()
        u = names.index("__u")
        units = [r for r in per_unit if r[u] is not None]
        no_unit = [r for r in per_unit if r[u] is None]
        assert len(no_unit) <= 1  # _dirty's NULL paths and orphans: one row of no unit
        if "customer" not in sql:  # (an inner join to the unit table drops them)
            assert no_unit
        start = 0
        for i, part in enumerate(release.parts):
            k = names.index(f"__p{i}")
            c = np.array([0 if r[k] is None else r[k] for r in units],
                         dtype=np.int64 if part.integer else np.float64)
            rest = (no_unit[0][k] or 0) if no_unit else 0
            if not part.integer:  # per unit in fixed-point steps 2^-k (dpsql.rewrite.fixed_point)
                scale = 2.0 ** -sum_exponent(analysis.measurements[part.index], analysis)
                c, rest = c * scale, rest * scale
            # each part on its own grid: rows for a COUNT, value units for a SUM
            # (dpsql.units.grid: GS_value = 8 rows x the per-row bound)
            bound, gs = part_grid(part, md.privacy_unit)
            assert (bound, gs) == ((1.0, 8) if part.integer else (1.0, 8 * int(part.bound)))
            n = len(levels(gs, base))
            # the rows of no unit in full at every level: never truncated
            want = truncated_sums(c, unit_bound=bound, max_contribution=gs, base=base) + rest
            got = [0 if v is None else v for v in row[start:start + n]]
            start += n
            if part.integer:
                assert got == want.tolist()  # exact integers
            else:
                assert np.allclose(got, want, rtol=1e-12, atol=1e-9)


def _dirty(db: dict, rng: random.Random) -> None:
    """What a real database may hold beyond the metadata's promises: NULL paths and kinds, a
    duplicated unit id and a duplicated order key (so a join row may repeat), orphans (the
    random databases have some already)."""
    if rng.random() < 0.5 and db["orders"]:
        o, _, amount = db["orders"][0]
        db["orders"].append((o, db["customer"][0][0], amount))  # a duplicated key
    if rng.random() < 0.5:
        db["customer"].append(db["customer"][0])  # a duplicated unit id
    db["orders"].append((7, None, None))  # a NULL path
    db["items"] += [(None, 1, None), (7, 2, None)]  # a NULL path; a NULL kind of no unit



# ------------------------------------------------------------ two-stage: an AVG's SUM


def _visits(tmp_path, rows_per_group: int):
    """Person p (one dept, p % 3) with 1 + p % 5 visits costing 100 p + 10 j: the units'
    means differ, their row counts too."""
    visits = [(p, p % 3, 100.0 * p + 10.0 * j) for p in range(1, 40) for j in range(1 + p % 5)]
    path = write_database(tmp_path / "v.duckdb", [
        "CREATE TABLE people (pid INTEGER)",
        "CREATE TABLE visits (pid INTEGER, dept INTEGER, cost DOUBLE)"],
        {"people": [(p,) for p in range(1, 40)], "visits": visits})
    md = loads_metadata(f"""
privacy_unit: {{table: people, column: pid, max_groups: 1,
               max_rows_per_group: {rows_per_group}}}
tables:
  people: {{columns: {{pid: {{type: INTEGER}}}}}}
  visits:
    unit: pid
    columns:
      pid: {{type: INTEGER}}
      dept: {{type: INTEGER, releasable: true, domain: {{values: [0, 1, 2]}}}}
      cost: {{type: DOUBLE, bounds: [0, 5000]}}
""")
    return path, md, visits


@pytest.mark.parametrize("rows_per_group", [1, 2, 8])
def test_a_two_stage_avg_is_a_mean_of_the_units_means(tmp_path, rows_per_group):
    # its SUM is each unit's mean times the rows its COUNT keeps (min(n, C)), not its sum
    # clamped to C times the bound: with C = 1 a unit's 5 visits of ~2,500 made one row of
    # 5,000 (QA rounds 4 and 5)
    path, md, visits = _visits(tmp_path, rows_per_group)
    kind, rows = outcome(path, md, "SELECT dept, COUNT(*), AVG(cost) FROM visits "
                         "GROUP BY dept", epsilon=1e9)
    assert kind == "ok"
    for dept, count, avg in rows:
        units = _costs_by_unit(visits, dept)
        kept = {p: min(len(c), rows_per_group) for p, c in units.items()}
        expected = (sum(kept[p] * sum(c) / len(c) for p, c in units.items())
                    / sum(kept.values()))
        assert count == sum(kept.values())
        assert avg == pytest.approx(expected, rel=1e-9), (dept, avg, expected)


def test_a_sum_the_query_reads_bare_keeps_its_clamp(tmp_path):
    # SUM(cost) beside AVG(cost) is one measurement: the SUM's per-unit clamp (C times the
    # bound) is kept for both (README, "Privacy units": such an AVG can lie above the mean)
    path, md, visits = _visits(tmp_path, 1)
    kind, rows = outcome(path, md, "SELECT dept, SUM(cost), COUNT(*), AVG(cost) FROM visits "
                         "GROUP BY dept", epsilon=1e9)
    assert kind == "ok"
    for dept, total, count, avg in rows:
        units = _costs_by_unit(visits, dept)
        clamped = sum(min(sum(c), 5000.0) for c in units.values())
        assert total == pytest.approx(clamped)
        assert count == len(units)
        assert avg == pytest.approx(clamped / len(units))  # the clamped sum, not the means


def _costs_by_unit(visits, dept: int) -> dict[int, list[float]]:
    """Each person's visit costs in ``dept``."""
    units: dict[int, list[float]] = {}
    for p, d, cost in visits:
        if d == dept:
            units.setdefault(p, []).append(cost)
    return units
