"""dpsql.privacy_audit.audit end to end on real DuckDB files: it passes the engine as built and
catches a deliberately under-noised one (a test sampler with a quarter of the scale).

Confidence 1 - 1e-6: a correct mechanism fails a test once per million runs, at any number of
releases (Clopper-Pearson holds for every n). The under-noised case has a true loss of 4
epsilon on the audited statistic (3.6 on the neighbour found: SUM moves by 9 at scale 2.5); at
RUNS = 400 releases per database its lower bound measured at least 1.72 over 16 audits
(change and remove neighbours: means 1.92 and 1.85, sd <= 0.11; a simulation of the statistic
agrees: mean 1.87, sd 0.11), so a miss (bound <= 1) needs a fall of ~8 standard deviations:
far rarer than 1e-6. (600 releases gave ~2.15; 300
would leave ~5 sd, too close.) The passing cases use the same count: their false failure
rate is the confidence's, and a quarter-scale engine would fail them with the same power.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dpsql.errors import NotSupportedError, ProgrammingError, UnsupportedQueryError
from dpsql.metadata import loads_metadata
from dpsql.noise.mechanisms import discrete_laplace
from dpsql.privacy_audit import audit
from tests.db_files import writing

CONFIDENCE = 1 - 1e-6
RUNS = 400  # releases per database: the power computation above
METADATA = """
tables:
  t:
    rows: 40
    columns:
      id: {type: INTEGER, max_freq: 1}
      g: {type: VARCHAR, releasable: true, domain: {values: [a, b]}}
      v: {type: DOUBLE, bounds: [0, 10]}
  p:
    public: true
    columns:
      k: {type: INTEGER}
"""


class QuarterScale:
    """An under-noised mechanism: discrete Laplace at a quarter of the scale asked for."""

    def discrete_laplace(self, scale: float, size: int):
        return discrete_laplace(scale / 4, size)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> tuple[Path, object]:
    folder = tmp_path_factory.mktemp("audit")
    with writing(folder / "t.duckdb") as con:
        con.execute("CREATE TABLE t (id INTEGER, g VARCHAR, v DOUBLE)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?)",
                        [(i, "ab"[i % 2], float(i % 10)) for i in range(40)])
        con.execute("CREATE TABLE p (k INTEGER)")
        con.execute("INSERT INTO p VALUES (1), (2)")
    return folder / "t.duckdb", loads_metadata(METADATA)


@pytest.mark.parametrize("sql", ["SELECT SUM(v) FROM t",
                                 "SELECT g, COUNT(*) AS n, AVG(v) AS a FROM t GROUP BY g"])
def test_the_engine_passes(world, sql):
    database, metadata = world
    report = audit(database, metadata, sql, epsilon=1.0, neighbours=2, runs=RUNS,
                   confidence=CONFIDENCE)
    assert report.verdict == "pass"
    assert report.bounds.max_divergence <= 1.0
    assert report.exact_change > 0 and report.neighbours_tried == 2


def test_an_under_noised_mechanism_fails(world):
    database, metadata = world
    report = audit(database, metadata, "SELECT SUM(v) FROM t", epsilon=1.0, neighbours=2,
                   runs=RUNS, confidence=CONFIDENCE, sampler=QuarterScale())
    assert report.verdict == "fail"
    assert report.bounds.max_divergence > 1.0


def test_the_neighbour_moving_the_answer_most_is_kept(world):
    database, metadata = world
    report = audit(database, metadata, "SELECT SUM(v) FROM t", epsilon=1.0, neighbours=6,
                   runs=50, confidence=CONFIDENCE)
    # among the spread rows (v = 0, 3 or 9 ...), the largest move of SUM is between v=0 and v=9
    assert report.exact_change == 9.0
    assert report.neighbour.table == "t"


def test_queries_with_nothing_to_audit_are_refused(world):
    database, metadata = world
    with pytest.raises(ProgrammingError, match="no private table"):
        audit(database, metadata, "SELECT COUNT(*) FROM p", epsilon=1.0)
    with pytest.raises(UnsupportedQueryError):
        audit(database, metadata, "SELECT v FROM t", epsilon=1.0)
    with pytest.raises(NotSupportedError, match="exponential mechanism"):
        audit(database, metadata, "SELECT MEDIAN(v) FROM t", epsilon=1.0)
    with pytest.raises(ProgrammingError, match="unknown neighbouring relation"):
        audit(database, metadata, "SELECT SUM(v) FROM t", epsilon=1.0, relation="units")
    with pytest.raises(ProgrammingError, match="needs a privacy unit"):
        audit(database, metadata, "SELECT SUM(v) FROM t", epsilon=1.0, relation="unit")


@pytest.mark.parametrize("sampler", [None, QuarterScale()], ids=["engine", "under-noised"])
def test_remove_one_row_neighbours(world, sampler):
    database, metadata = world
    report = audit(database, metadata, "SELECT SUM(v) FROM t", epsilon=1.0, neighbours=3,
                   runs=RUNS, confidence=CONFIDENCE, relation="remove", sampler=sampler)
    assert report.neighbour.replacement is None and report.neighbour.relation == "remove"
    assert report.exact_change == 9.0  # removing a row with v = 9
    assert report.verdict == ("pass" if sampler is None else "fail")


@pytest.mark.parametrize("sampler", [None, QuarterScale()], ids=["engine", "under-noised"])
def test_a_query_of_several_releases_is_audited_as_one_mechanism(world, sampler):
    # the CTE's COUNT and the outer SUM are two releases of one request (each epsilon 1/2)
    database, metadata = world
    sql = ("WITH c AS (SELECT g, COUNT(*) AS n FROM t GROUP BY g) "
           "SELECT g, n * 2 AS twice FROM c")
    # (fewer runs than above: each draw runs the blocks and their post-processing)
    report = audit(database, metadata, sql, epsilon=1.0, neighbours=2,
                   runs=200 if sampler is None else 400, confidence=CONFIDENCE, sampler=sampler)
    assert report.exact_change == 4.0  # a row moves between the groups: each n by 1, doubled
    assert report.verdict == ("pass" if sampler is None else "fail")


@pytest.mark.parametrize("sql, spent", [
    ("SELECT SUM(v) FROM t", 0.0),  # Laplace: pure, whatever delta is allowed
    ("SELECT COUNT(*) FROM t a JOIN t b ON a.id = b.id", 1e-6),  # a smoothed join spends it
])
def test_the_claimed_delta_is_what_the_release_plan_spends(world, sql, spent):
    database, metadata = world
    report = audit(database, metadata, sql, epsilon=1.0, delta=1e-6, neighbours=1, runs=100,
                   confidence=CONFIDENCE)
    assert report.delta == spent and report.requested_delta == 1e-6
    assert report.verdict == "pass"


def test_decimal_sums_are_audited_cells() -> None:
    """A DECIMAL column's sum is released as a Decimal (dpsql.execute.typed): still a cell."""
    from decimal import Decimal

    from dpsql.privacy_audit import _cells

    draws = [{("a",): (Decimal("1.25"), 3, "text")}, {("a",): (Decimal("2.50"), 4, "text")}]
    cells = _cells(draws)
    assert sorted(cells) == [(("a",), 0), (("a",), 1)]
    assert cells[(("a",), 0)].tolist() == [1.25, 2.5]


def test_a_cell_missing_from_a_later_release_counts_as_the_midpoint() -> None:
    """A cell every pilot release had can be NULL in a measured one (an AVG over a noisy count
    <= 0): it scores 0, the statistic stays a fixed function of the release (this raised
    KeyError in about one full-suite run in three)."""
    import numpy as np

    from dpsql.privacy_audit import LikelihoodRatio, _cells

    pilot = _cells([{("a",): (1.0,)}, {("a",): (3.0,)}])
    statistic = LikelihoodRatio.fit(pilot, _cells([{("a",): (10.0,)}, {("a",): (12.0,)}]))
    assert statistic is not None
    measured = [{("a",): (2.0,)}, {("a",): (None,)}, {}, {("a",): (11.0,)}]
    assert _cells(measured) == {}  # a complete-only read loses the cell
    scores = statistic(_cells(measured, complete=False), 4)
    assert scores[1] == scores[2] == 0.0 and scores[0] > 0 > scores[3]
    assert np.array_equal(statistic({}, 2), np.zeros(2))
