"""dpsql.units.execute: the truncated sums read from the executed R2T query -- the levels of a
counts-only release evaluated exactly from the histogram of the units' contributions (the
database side and its equivalence with the per-unit reference: tests/units/test_rewrite.py,
tests/units/test_backends.py), and a malformed result an error, never a count."""

from __future__ import annotations

import random

import numpy as np
import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.errors import ProgrammingError
from dpsql.units.execute import levels_from_histogram, truncated_levels, truncated_parts
from tests.units import tiny


def test_the_histogram_of_several_counts_keeps_each_part_apart():
    md = tiny.metadata(max_contribution=8)
    release = analyze_request("SELECT COUNT(*), COUNT(i.kind) FROM items i", md).unit
    assert release is not None
    # part 0: 2 units of 3 rows and 1 of 9; part 1: 3 units of 1 row (levels 2, 4, 8)
    rows = [(3, None, 2, 0), (9, None, 1, 0), (None, 1, 3, 0)]
    got = levels_from_histogram(rows, release)
    assert [list(g) for g in got] == [[2 * 2 + 2, 3 * 2 + 4, 3 * 2 + 8],
                                      [3, 3, 3]]
    assert [list(g) for g in levels_from_histogram([], release)] == [[0, 0, 0], [0, 0, 0]]


def test_the_rows_of_no_unit_are_added_in_full_at_every_level():
    """``__z`` = 1: the rows of no unit (``__u`` NULL) contribute c too; they are the same in
    both neighbours, so never truncated (before, they were one more unit, cut at tau_j)."""
    md = tiny.metadata(max_contribution=8)
    release = analyze_request("SELECT COUNT(*), COUNT(i.kind) FROM items i", md).unit
    assert release is not None
    # part 0: 2 units of 3 rows, and 20 rows of no unit; part 1: 1 unit of 9 rows, and 9
    # rows of no unit (the same c: one histogram row, n = 1 and z = 1); levels 2, 4, 8
    rows = [(3, None, 2, 0), (20, None, 0, 1), (None, 9, 1, 1)]
    got = levels_from_histogram(rows, release)
    assert [list(g) for g in got] == [[2 * 2 + 20, 3 * 2 + 20, 3 * 2 + 20],
                                      [2 + 9, 4 + 9, 8 + 9]]


@pytest.mark.parametrize("rows", [
    [(3, 1, 2, 0)],  # two parts in one row
    [(None, None, 2, 0)],  # no part
    [(3, None, 0, 0)],  # no unit
    [(-1, None, 1, 0)],  # a negative count
    [(3.5, None, 1, 0)],  # not an integer
    [(True, None, 1, 0)],
    [(3, None, 1)],  # a column short
    [(3, None, 1, 2)],  # two groups of no unit
    [(3, None, 1, -1)],
    [(3, None, 0, 1), (4, None, 0, 1)],  # the rows of no unit in two rows of one part
])
def test_a_malformed_histogram_is_an_error_not_a_count(rows):
    md = tiny.metadata(max_contribution=8)
    release = analyze_request("SELECT COUNT(*), COUNT(i.kind) FROM items i", md).unit
    assert release is not None
    with pytest.raises(ProgrammingError, match="malformed"):
        levels_from_histogram(rows, release)


def test_the_rows_of_a_sum_are_summed_per_level_exactly():
    md = tiny.metadata(max_contribution=8)
    release = analyze_request("SELECT SUM(qty) FROM items", md).unit
    assert release is not None and len(release.parts) == 1
    # value units 2, 4, 8, 16, 32 (8 rows x 4); steps of 2^-1 (k = 1): per unit min(c, 32)
    # in steps (__q), c_NULL in full on the row of no unit (__z), k (__k)
    rows = [(False, 3, None, 1), (False, 64, None, 1), (False, 10, None, 1),
            (True, 999, 7.5, 1)]
    parts = truncated_parts(rows, release)
    # level tau: sum over units of min(q, 2 tau) steps, halved
    assert parts.levels[0].tolist() == [(3 + 4 + 4) / 2, (3 + 8 + 8) / 2, (3 + 16 + 10) / 2,
                                        (3 + 32 + 10) / 2, (3 + 64 + 10) / 2]
    assert parts.no_unit == [7.5]
    got = truncated_levels(rows, release)
    assert got[0].tolist() == [v + 7.5 for v in parts.levels[0].tolist()]
    assert truncated_parts([], release).levels[0].tolist() == [0.0] * 5  # no row at all
    for bad in ([(False, 3, None)],                      # a column short
                [(True, 1, 2.0, 1), (True, 1, 3.0, 1)],  # two rows of no unit
                [(False, -1, None, 1)],                  # a negative contribution
                [(False, 2**62 + 1, None, 1)],           # past every top level
                [(False, 3, None, 1), (False, 3, None, 2)],  # two exponents
                [(None, 3, None, 1)]):                   # no flag
        with pytest.raises(ProgrammingError, match="malformed"):
            truncated_parts(bad, release)


def test_an_exact_sum_past_2_63_is_exact_before_its_one_conversion():
    # four units at 2^62 steps (k = 0), one at 1: 2^64 + 1 steps at a level of 2^62, past
    # int64, summed exactly, then converted once (2^64 + 1 rounds to 2^64 as a double)
    md = tiny.metadata(max_contribution=8)
    release = analyze_request("SELECT SUM(qty) FROM items", md).unit
    assert release is not None
    rows = [(False, 2**62, None, 0)] * 4 + [(False, 1, None, 0)]
    parts = truncated_parts(rows, release)
    assert parts.levels[0].tolist() == [4 * t + 1.0 for t in (2, 4, 8, 16, 32)]
    from dpsql.units.execute import _sum_of_min

    q = np.array([2**62] * 4 + [1], dtype=np.int64)
    assert _sum_of_min(q, 2**62) == 2**64 + 1  # int64 would wrap


def test_a_backend_that_is_not_columnar_reads_a_sums_levels_as_one_row(monkeypatch, tmp_path):
    """A SUM under one unit is read per unit (one row each) by DuckDB; a backend that is not
    columnar (Spark: a row per unit collected to its driver, whose result size is limited)
    reads the compiled one-row query (dpsql.units.rewrite.one_row_levels): the same levels."""
    from dpsql.backends.duckdb import DuckDBBackend
    from dpsql.execute.exact import compile_plan
    from dpsql.rewrite.plan import plan_execution
    from dpsql.units.execute import read_truncated_parts

    md = tiny.metadata(max_contribution=8)
    path = tiny.write_file(tmp_path / "shop.duckdb", tiny.random_database(random.Random(4)))
    backend = DuckDBBackend(str(path), md)
    try:
        for sql in ("SELECT SUM(qty) FROM items", "SELECT COUNT(*), SUM(amount) FROM orders",
                    "SELECT AVG(qty) FROM items"):
            analysis = analyze_request(sql, md)
            assert analysis.unit is not None
            plan = compile_plan(backend, plan_execution(analysis, md))
            assert plan.fallback is not None and len(plan.fallback) == 1
            per_unit = read_truncated_parts(backend, plan, [], analysis.unit)
            monkeypatch.setattr(type(backend), "columnar", False)
            one_row = read_truncated_parts(backend, plan, [], analysis.unit)
            monkeypatch.undo()
            assert [lv.tolist() for lv in one_row.levels] == [
                lv.tolist() for lv in per_unit.levels]
            assert one_row.no_unit == per_unit.no_unit
        counts = analyze_request("SELECT COUNT(*) FROM items", md)
        # a count: the histogram, and its flat read over many units (a columnar backend's)
        (flat,) = compile_plan(backend, plan_execution(counts, md)).fallback
        assert "GROUP BY" not in flat
    finally:
        backend.close()
