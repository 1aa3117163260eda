"""Red team: the floating-point summation of DOUBLE values (docs/privacy.md section 4,
"Floating-point summation"), as it broke before the fixed-point sums (main 7ccea40) and the
ordered inner aggregates (main 93a88ef, 99feeca); each test now guards those fixes. The harness:
tests/redteam/float_sums.py; the attacks on the fixed-point sums themselves:
test_fixed_point_attacks.py.

The claim attacked: the executed query clamps every SUM argument into its bounds
(dpsql.rewrite.clamps), bounds each unit's contribution (dpsql.units.rewrite: R2T's truncated
sums, the two-stage GROUP BY's per-group clamp) and each pair's psi (dpsql.units.multi_rewrite),
so its exact value moves by at most the sensitivity the noise plan uses when one row changes /
one unit goes (with its cascade), and is a function of the database's rows.

BROKE before the fixes: DOUBLE values were summed in floating point, so

* a neighbour moved the exact value beyond its claim: fl(1.5 + 2^53) = 2^53 + 2, so removing
  the row (or unit) at the bound 2^53 moved a row-level SUM / AVG / SUM(x * 2.5), R2T's levels
  2^52..2^54 and a two-stage bin by 2^53 + 0.5 where 2^53 is claimed;
* one database's exact value depended on its rows' storage order (fl(fl(1e16 + 0.75) + 0.75)
  = 1e16 but fl(1.5 + 1e16) = 1e16 + 2; one unit's or pair's 0.1 + 0.2 + 0.7 = 1 + 2^-52 or
  1 - 2^-53, flipping every floored level of the two-unit flow by a step), on DuckDB's threads
  (983,040 rows: a different value at 1, 2 and 4 threads, and between two runs at 2), and on the
  backend (Spark's sequential sum of those rows differed from DuckDB's parallel one in the 14th
  digit: the parity test was dropped after the fix, 9 s; test_fixed_point_attacks.py has
  small ones);
* sample-and-aggregate's block answers and a derived table's per-group sums too (an unchanged
  block's SUM moved by the clamp's whole width with the storage order).

FIXED (rewrite.ordered counts a literal's digits): rewrite.ordered took a numeric literal without an
exponent for exact DECIMAL arithmetic, but DuckDB reads one of more than 38 digits as a DOUBLE:
a derived table's SUM(y * 0.1234...41 digits) stays in scan order, and an outer WHERE on it
counts the group or not by the storage order.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import duckdb
import numpy as np
import pytest

from dpsql.metadata import loads_metadata
from tests.redteam.float_sums import (
    B53,
    PAIR_MD,
    PARALLEL_MD,
    ROW_MD,
    UNIT_MD,
    Query,
    at_thread_counts,
    excess,
    items_db,
    make_db,
    opened,
    same,
    t_rows,
    visits_db,
)

# ------------------------------------------------------------------ (a) a row-level SUM

#: (query, D's values, D''s values: one row changed). The small rows are summed first (exactly),
#: then the row at the upper bound U: U + s rounds UP to the DOUBLE grid (ulp 2 at 1e16, 4 at
#: 2.5e16), so the top row's move from U to 0 comes out as U + 0.5 (U + 1) > ES = U.
ROW_NEIGHBOURS = [
    ("SELECT SUM(v) FROM t", [0.75, 0.75, 1e16], [0.75, 0.75, 0.0]),
    ("SELECT AVG(v) FROM t", [0.75, 0.75, 1e16], [0.75, 0.75, 0.0]),
    ("SELECT SUM(v * 2.5) FROM t", [0.6, 0.6, 1e16], [0.6, 0.6, 0.0]),
]


@pytest.mark.parametrize(("sql", "d", "d2"), ROW_NEIGHBOURS, ids=["sum", "avg", "computed"])
def test_row_sum_moves_at_most_es_when_one_row_changes(tmp_path, sql, d, d2):
    """ES of SUM over [0, U] is U; the executed query's exact value moves by U + 0.5 (U + 1 for
    x * 2.5, U = 2.5e16) when the top row goes from U to 0 -- fl(1.5 + 1e16) = 1e16 + 2."""
    q = Query(sql, ROW_MD)
    got = q.exact(make_db(tmp_path / "d.duckdb", t_rows(d)))
    got2 = q.exact(make_db(tmp_path / "d2.duckdb", t_rows(d2)))
    assert not excess(q, got, got2), excess(q, got, got2)


@pytest.mark.parametrize("sql", ["SELECT SUM(v) FROM t", "SELECT AVG(v) FROM t",
                                 "SELECT SUM(v * 2.5) FROM t"])
def test_row_sum_is_the_same_for_every_storage_order(tmp_path, sql):
    """The same three rows stored in each order: fl(fl(1e16 + 0.75) + 0.75) = 1e16 but
    fl(1.5 + 1e16) = 1e16 + 2 (x * 2.5: 1e16 / 2.5 and 0.3)."""
    values = [0.3, 0.3, 4e15] if "2.5" in sql else [0.75, 0.75, 1e16]
    q = Query(sql, ROW_MD)
    runs = [q.exact(make_db(tmp_path / f"p{k}.duckdb", t_rows(list(order))))
            for k, order in enumerate(sorted(set(itertools.permutations(values))))]
    assert same(runs), [r[0].tolist() for r in runs]


def test_row_sum_is_the_same_for_every_thread_count(parallel_db):
    """One database, read with 1, 2 and 4 DuckDB threads (two runs each at 2): the per-thread
    partial sums are added in whatever order the threads finish, so the exact value changes
    between thread counts and even between runs of the same database."""
    q = Query("SELECT SUM(v) FROM t", ROW_MD)
    runs = at_thread_counts(q, parallel_db)
    assert same(runs), [r[0].tolist() for r in runs]

# ---------------------------------------------- (b), (c) one privacy unit: R2T and two-stage
#: person 1 contributes 2^53 (the bound), person 2 contributes 1.5: whatever the order the
#: two are added in, fl(2^53 + 1.5) = 2^53 + 2, and removing person 1 leaves 1.5: a move of
#: 2^53 + 0.5 > 2^53 (R2T: Q(tau) at tau = 2^52, 2^53, 2^54; two-stage: C * u = 2^53)
UNIT_D = [(1, 1, B53), (2, 1, 1.5)]
UNIT_D2 = [(2, 1, 1.5)]  # person 1 removed with their visit


@pytest.mark.parametrize("sql", ["SELECT SUM(v) FROM visits",
                                 "SELECT g, SUM(v) FROM visits GROUP BY g"],
                         ids=["r2t", "two_stage"])
def test_unit_sum_moves_at_most_its_claim_when_one_unit_goes(tmp_path, sql):
    """R2T's precondition (dpsql.units.grid): each Q(tau_j) moves by <= tau_j * b; the
    two-stage's (per_group_clamp): each bin moves by <= C * max(|l|, |u|)."""
    q = Query(sql, UNIT_MD)
    got = q.exact(make_db(tmp_path / "d.duckdb", visits_db(UNIT_D)))
    got2 = q.exact(make_db(tmp_path / "d2.duckdb", visits_db(UNIT_D2)))
    assert not excess(q, got, got2), excess(q, got, got2)


#: one person's three visits: (0.1 + 0.2) + 0.7 = 1 + 2^-52 but (0.7 + 0.2) + 0.1 = 1 - 2^-53
#: (their contribution c_u, below every level >= 2, is Q(tau) itself)
TENTHS = [0.1, 0.2, 0.7]


@pytest.mark.parametrize("sql", ["SELECT SUM(v) FROM visits",
                                 "SELECT g, SUM(v) FROM visits GROUP BY g"],
                         ids=["r2t", "two_stage"])
def test_unit_sum_is_the_same_for_every_storage_order(tmp_path, sql):
    q = Query(sql, UNIT_MD)
    runs = [q.exact(make_db(tmp_path / f"p{k}.duckdb",
                            visits_db([(1, 1, v) for v in order])))
            for k, order in enumerate([TENTHS, TENTHS[::-1]])]
    assert same(runs), [[a.tolist() for a in r] for r in runs]

# ------------------------------------------------------------------ (d) two units: pairs
def test_pair_sum_is_the_same_for_every_storage_order():
    """One pair's psi is 1 + 2^-52 or 1 - 2^-53 by the storage order of its three rows, and the
    flow floors min(psi, tau) / delta_j: every level but the lowest flips by one step."""
    q = Query("SELECT SUM(v) FROM items", PAIR_MD)
    with q.in_memory() as run:
        runs = [run(items_db([(1, 1, v) for v in order])) for order in [TENTHS, TENTHS[::-1]]]
    assert same(runs), [[a.tolist() for a in r] for r in runs]


def test_pair_levels_move_at_most_tau_when_one_unit_goes():
    """HELD: a pair's psi is a function of its own rows in their storage order, which removing
    another unit does not change, and the flow's levels are exact multiples of delta_j
    (dpsql.noise.r2t_certify): UNIT_D's absorption (2^53 + 1.5 in one pair or two) moves no
    level by more than tau_j."""
    q = Query("SELECT SUM(v) FROM items", PAIR_MD)
    with q.in_memory() as run:
        for d, gone in [([(1, 1, B53), (2, 1, 1.5)], 1), ([(1, 1, 0.75), (1, 1, 0.75),
                                                           (1, 2, B53), (2, 2, 1.5)], 2)]:
            got, got2 = run(items_db(d)), run(items_db([r for r in d if r[0] != gone]))
            assert not excess(q, got, got2), excess(q, got, got2)

# ------------------------------------ (f) sample-and-aggregate: each block's answer in floats

SA_MD = loads_metadata("""
tables:
  t: {sample_aggregate: {blocks: 2, by: k},
      columns: {i: {type: INTEGER}, k: {type: INTEGER}, v: {type: DOUBLE}}}
""", "<float sums: sample-and-aggregate>")


def _block_answers(path: Path, sql: str, key: int = 12345) -> list[list[float]]:
    """The per-block exact answers of a SAMPLE_AGGREGATE query with a fixed block key, read as
    dpsql.sample_aggregate.prepared.compute reads them."""
    from dpsql.sample_aggregate.prepared import prepare_sample_aggregate
    from dpsql.sample_aggregate.release import block_answers

    with opened(path, SA_MD) as backend:
        prepared = prepare_sample_aggregate(sql, SA_MD, backend)
        rows, _ = backend.execute(prepared.compiled, prepared.bindings([], key))
        return block_answers(rows, prepared.plan.blocks, 1).tolist()


@pytest.mark.parametrize("sql", ["SELECT SAMPLE_AGGREGATE(SUM(v), 0, 1) FROM t",
                                 "SELECT SAMPLE_AGGREGATE(AVG(v), 0, 1) FROM t"],
                         ids=["sum", "avg"])
def test_sample_aggregate_block_answers_do_not_depend_on_the_storage_order(tmp_path, sql):
    """The block answers are the analyst's aggregates over each block, summed by the database
    in floating point (dpsql.sample_aggregate.rewrite): unclamped rows 1e30, 0.75, -1e30 in one
    block (one ``by`` value) summed to 0.75 in one storage order and 0 in another, the whole
    width [0, 1] of the clamp; the sensitivity argument (a changed row moves two blocks) holds
    for functions of the blocks' rows. Was a gap (main 93a88ef orders each block aggregate by
    its values: SUM(x ORDER BY x)); now a guard."""
    rows = [(0, 1, 1e30), (1, 1, 0.75), (2, 1, -1e30)]
    runs = [_block_answers(make_db(tmp_path / f"p{n}.duckdb",
                                   {"t": (["i INTEGER", "k INTEGER", "v DOUBLE"], order)}), sql)
            for n, order in enumerate([rows, [rows[0], rows[2], rows[1]]])]
    assert np.array_equal(np.array(runs[0]), np.array(runs[1]), equal_nan=True), runs


# ------------------------------- (g) aggregates below the top level (dpsql.rewrite.ordered)

#: 41 significant digits: DuckDB reads this literal as a DOUBLE (a DECIMAL holds 38 at most)
LONG_LITERAL = "0.12345678901234567890123456789012345678901"


def test_a_derived_tables_sum_is_the_same_for_every_storage_order():
    """The pass that orders floating-point aggregates below the top level (SUM(x ORDER BY x))
    skips arguments it proves exact: integer / DECIMAL columns, + - * and numeric literals
    without an exponent. y * 0.1234...(41 digits) passes that test but is DOUBLE
    arithmetic, so the derived table's SUM stays in scan order: rows y = 2^30, 3, 3 of one
    group sum to 132560718.56003994 or ...995 by their storage order, and the outer
    ``WHERE s > 132560718.56003994`` counts that group or not. The group's value is not a
    function of its rows; the stability argument assumes it is."""
    md = loads_metadata("tables:\n  t: {columns: {x: {type: INTEGER}, y: {type: INTEGER}}}\n",
                        "<float sums: ordered>")
    q = Query(f"SELECT COUNT(*) FROM (SELECT t.x, SUM(t.y * {LONG_LITERAL}) AS s FROM t "
              "GROUP BY t.x) AS g WHERE g.s > 132560718.56003994", md)
    rows = [(1, 2**30), (1, 3), (1, 3)]
    with q.in_memory() as run:
        runs = [run({"t": (["x INTEGER", "y INTEGER"], order)}) for order in (rows, rows[::-1])]
    assert same(runs), [r[0].tolist() for r in runs]


def test_a_derived_tables_sum_is_the_same_for_every_thread_count(parallel_db):
    """Held (rewrite.ordered): the derived table's per-group DOUBLE SUM runs as SUM(v ORDER BY
    v), so group 0's value is the same at 1, 2 and 4 threads, and ``WHERE s >= <its value>``
    counts it every time (unordered, this database's group sums differ between thread counts
    and runs in the 14th digit)."""
    con = duckdb.connect(str(parallel_db), read_only=True)
    try:
        [(target,)] = con.execute("SELECT SUM(v ORDER BY v) FROM t WHERE k = 0").fetchall()
        [(expected,)] = con.execute(
            "SELECT COUNT(*) FROM (SELECT k, SUM(v ORDER BY v) AS s FROM t GROUP BY k) "
            f"WHERE s >= {target!r}").fetchall()
    finally:
        con.close()
    q = Query("SELECT COUNT(*) FROM (SELECT t.k, SUM(t.v) AS s FROM t GROUP BY t.k) AS g "
              f"WHERE g.s >= {target!r}", PARALLEL_MD)
    runs = at_thread_counts(q, parallel_db)
    assert same(runs), [r[0].tolist() for r in runs]
    assert runs[0][0].tolist() == [expected]  # group 0 and those far above it
