"""dpsql/execute/selection.py: the utilities computed by hand, and selection queries through
a real session on a tiny DuckDB file (noise effectively off at a huge epsilon: the mechanism
then picks the exact answer), the release record, the ledger charge and refusals before it."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pytest

from dpsql.analysis.explain import explain, explain_text
from dpsql.analysis.selection_grid import SelectionAggregate
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import NotSupportedError
from dpsql.execute.layout import Bins
from dpsql.execute.selection import cell_counts, quantile_utilities
from dpsql.metadata import loads_metadata
from dpsql.noise.selection import exponential_mechanism_rows, exponential_probabilities
from dpsql.session import Session
from tests.db_files import writing
from tests.ledgers import charged, ledger_session, open_ledger

MD = loads_metadata("""
tables:
  t:
    columns:
      id: {max_freq: 1, type: INTEGER}
      g: {max_freq: 10, releasable: true, domain: {values: [1, 2, 3]}, type: INTEGER}
      y: {max_freq: 10, bounds: [0, 10], type: INTEGER}
      v: {max_freq: 10, bounds: [0, 4], type: DOUBLE}
      d: {max_freq: 10, bounds: ['2020-01-01', '2020-12-31'], type: DATE}
""")

#: g = 1: y 1, 2, 2, 3, 7 (and a NULL); g = 2: y 5, 5, 6, 12 (12 is clamped to 10); g = 3: none
ROWS = [(1, 1, 1, 0.1), (2, 1, 2, 0.5), (3, 1, 2, 2.0), (4, 1, 3, None), (5, 1, 7, 1.0),
        (6, 1, None, 3.5), (7, 2, 5, 0.2), (8, 2, 5, 0.3), (9, 2, 6, 0.4), (10, 2, 12, 9.0)]
#: the date of each row (2019-12-25 lies before the bounds: clamped to 2020-01-01)
DATES = ["2020-03-01", "2020-02-29", None, "2020-07-04", "2020-12-31", "2020-01-15",
         "2019-12-25", "2020-05-05", "2020-05-06", "2020-11-11"]

HUGE = 1e6  # every utility below the maximum has weight exp(-HUGE / 4): never drawn


def aggregate(function: str, q: float, discrete: bool) -> SelectionAggregate:
    return SelectionAggregate(function, q, discrete)


def test_utilities_by_hand():
    counts = np.array([[0, 1, 2, 1]])  # values 1, 2, 2, 3 on the grid 0..3
    # CONT median: t = 0.5 * 3 + 1 = 2.5; L = 0 0 1 3, R = 0 1 3 4
    np.testing.assert_array_equal(quantile_utilities(counts, aggregate("MEDIAN", 0.5, False)),
                                  [[-2.5, -1.5, 0.0, -1.5]])
    # DISC median: t = floor(1.5) + 1 = 2
    np.testing.assert_array_equal(
        quantile_utilities(counts, aggregate("QUANTILE_DISC", 0.5, True)), [[-2, -1, 0, -2]])
    np.testing.assert_array_equal(quantile_utilities(counts, aggregate("MIN", 0.0, True)),
                                  [[-1, 0, -1, -3]])
    np.testing.assert_array_equal(quantile_utilities(counts, aggregate("MAX", 1.0, True)),
                                  [[-4, -3, -1, 0]])
    # an empty bin: every cell equally good (the draw is uniform)
    empty = quantile_utilities(np.zeros((1, 4)), aggregate("MEDIAN", 0.5, False))
    assert len(set(empty[0].tolist())) == 1


def test_selection_probabilities_of_the_median_by_hand():
    u = quantile_utilities(np.array([[0, 1, 2, 1]]), aggregate("MEDIAN", 0.5, False))[0]
    epsilon, sensitivity = 1.0, 1.0
    weights = np.exp(np.array([-2.5, -1.5, 0.0, -1.5]) * epsilon / (2 * sensitivity))
    np.testing.assert_allclose(exponential_probabilities(u, epsilon, sensitivity),
                               weights / weights.sum())


def test_cell_counts_puts_the_cell_last():
    bins = Bins([], [np.arange(6)], 6, [])
    np.testing.assert_array_equal(cell_counts(bins, 3), [[0, 1, 2], [3, 4, 5]])


def test_rows_follow_the_exponential_law():
    """20,000 independent rows of one utility vector: each frequency within 5 standard errors
    of exponential_probabilities (a false failure has probability about 6e-7 per cell)."""
    u = np.array([-3.0, -1.0, 0.0, -0.5])
    n = 20_000
    picks = exponential_mechanism_rows(np.tile(u, (n, 1)), 1.0, 1.0)
    p = exponential_probabilities(u, 1.0, 1.0)
    freq = np.bincount(picks, minlength=4) / n
    assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n))
    # with the sensitivity halved the law differs by far more than that (the test has power)
    wrong = exponential_probabilities(u, 1.0, 0.5)
    assert np.max(np.abs(wrong - p) / np.sqrt(p * (1 - p) / n)) > 20


def test_rows_validate_their_input():
    assert exponential_mechanism_rows(np.zeros((0, 3)), 1.0, 1.0).size == 0
    with pytest.raises(ValueError):
        exponential_mechanism_rows(np.zeros(3), 1.0, 1.0)
    with pytest.raises(ValueError):
        exponential_mechanism_rows(np.array([[np.nan]]), 1.0, 1.0)


# --------------------------------------------------------------------------- through a session


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    path = tmp_path_factory.mktemp("selection") / "t.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE t (id INTEGER, g INTEGER, y INTEGER, v DOUBLE, d DATE)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)",
                        [(*r, d) for r, d in zip(ROWS, DATES, strict=True)])
    return path


@pytest.fixture(scope="module")
def session(database):
    s = Session(MD, DuckDBBackend(database, MD))
    yield s
    s.close()


def reference(database, sql: str) -> list[tuple]:
    con = duckdb.connect(str(database), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_min_max_and_discrete_quantiles_are_exact_when_noise_is_negligible(session, database):
    sql = ("SELECT g, MIN(y) AS lo, MAX(y) AS hi, quantile_disc(y, 0.5) AS med, "
           "quantile(y, 0.25) AS q1 FROM t WHERE g < 3 GROUP BY g ORDER BY g")
    result = session.run(sql, epsilon=HUGE)
    clamped = "CASE WHEN y > 10 THEN 10 WHEN y < 0 THEN 0 ELSE y END"  # NULL stays NULL
    expected = reference(database, f"SELECT g, MIN({clamped}), MAX({clamped}), "
                         f"quantile_disc({clamped}, 0.5), quantile_disc({clamped}, 0.25) "
                         "FROM t WHERE g < 3 GROUP BY g ORDER BY g")
    assert result.rows == expected
    assert result.names == ("g", "lo", "hi", "med", "q1")
    assert result.types[1:] == ("BIGINT",) * 4  # an exact integer grid releases integers


def test_continuous_quantiles_pick_a_neighbouring_order_statistic(session):
    (row,) = session.run("SELECT MEDIAN(y) FROM t WHERE g = 1", epsilon=HUGE).rows
    assert row[0] == 2  # 1 2 2 3 7: the median is 2 itself
    (row,) = session.run("SELECT quantile_cont(y, 0.5) AS m FROM t WHERE g = 2",
                         epsilon=HUGE).rows
    assert row[0] in (5, 6)  # 5 5 6 10: CONT interpolates 5.5; the grid has 5 or 6


def test_dates_are_exact_when_noise_is_negligible(session, database):
    result = session.run("SELECT g, MIN(d) AS lo, MAX(d) AS hi, quantile_disc(d, 0.5) AS med "
                         "FROM t WHERE g < 3 GROUP BY g ORDER BY g", epsilon=HUGE)
    clamped = "CASE WHEN d < DATE '2020-01-01' THEN DATE '2020-01-01' ELSE d END"
    assert result.rows == reference(
        database, f"SELECT g, MIN({clamped}), MAX({clamped}), quantile_disc({clamped}, 0.5) "
        "FROM t WHERE g < 3 GROUP BY g ORDER BY g")
    assert result.types == ("INTEGER", "DATE", "DATE", "DATE")
    # post-processing on dates: DuckDB's date arithmetic and comparisons
    span = session.run("SELECT g, MAX(d) - MIN(d) AS days FROM t WHERE g = 1 GROUP BY g "
                       "HAVING MAX(d) > DATE '2020-06-01'", epsilon=HUGE)
    assert span.rows == [(1, 351)]  # 2020-01-15 to 2020-12-31
    record = session.run("SELECT MIN(d) FROM t", epsilon=1.0).release
    assert record.columns[0].grid_step == 1.0 and "every day" in (
        record.columns[0].post_processing or "")


def test_float_grid_releases_a_cell_midpoint(session):
    (row,) = session.run("SELECT MAX(v) AS m FROM t WHERE g = 1", epsilon=HUGE).rows
    step = 4 / 1024
    assert row[0] == pytest.approx((math.floor(3.5 / step) + 0.5) * step)
    assert session.run("SELECT MAX(v) FROM t", epsilon=HUGE).types == ("DOUBLE",)


def test_post_processing_of_chosen_values(session):
    result = session.run("SELECT g, MAX(y) - MIN(y) AS spread FROM t WHERE g < 3 GROUP BY g "
                         "HAVING MAX(y) > 6 ORDER BY spread DESC", epsilon=HUGE)
    assert result.rows == [(1, 6), (2, 5)]  # g = 2: 10 (12 clamped) - 5
    assert session.run("SELECT g, MAX(y) AS m FROM t WHERE g < 3 GROUP BY g "
                       "HAVING MAX(y) < 9 ORDER BY m", epsilon=HUGE).rows == [(1, 7)]


def test_top_k_is_the_largest_counts_when_noise_is_negligible(session):
    assert session.run("SELECT g FROM t GROUP BY g ORDER BY COUNT(*) DESC LIMIT 2",
                       epsilon=HUGE).rows == [(1,), (2,)]
    result = session.run("SELECT g, COUNT(*) AS n FROM t GROUP BY g ORDER BY n DESC LIMIT 5",
                         epsilon=HUGE)
    assert [r[0] for r in result.rows] == [1, 2, 3]  # k is capped at the 3 bins
    assert [r[1] for r in result.rows] == [6, 4, 0]
    assert result.release.mechanism == "discrete_laplace+report_noisy_max"
    key, count = result.release.columns
    assert (key.mechanism, key.epsilon, key.half_width_95) == ("report_noisy_max", HUGE / 2,
                                                               None)
    assert (count.mechanism, count.epsilon) == ("discrete_laplace", HUGE / 2)
    # the count's public scale, as any pure count's (QA round 6: the footer showed none): a
    # changed row (dpsql's relation) moves the histogram by 2 in L1, at epsilon HUGE / 2
    assert count.noise_scale == pytest.approx(2 / (HUGE / 2)) and key.noise_scale is None


def test_record_names_the_exponential_mechanism_and_the_grid(session):
    record = session.run("SELECT g, MEDIAN(v) AS m, MIN(v) FROM t GROUP BY g",
                         epsilon=0.8).release
    assert (record.epsilon, record.delta, record.mechanism) == (0.8, 0.0, "exponential")
    key, median, low = record.columns
    assert key.mechanism is None
    for column in (median, low):
        assert column.mechanism == "exponential" and column.epsilon == pytest.approx(0.4)
        assert column.grid_step == 4 / 1024 and column.half_width_95 is None
        assert "no 95% interval" in (column.post_processing or "")


def test_gaussian_is_refused_before_anything_is_charged(database, tmp_path):
    ledger = open_ledger(tmp_path / "ledger.db")
    s = ledger_session(MD, DuckDBBackend(database, MD), ledger)
    with pytest.raises(NotSupportedError, match="exponential mechanism"):
        s.run("SELECT MEDIAN(y) FROM t", epsilon=1.0, delta=1e-6, mechanism="gaussian")
    assert charged(s) == []
    result = s.run("SELECT MEDIAN(y) FROM t", epsilon=0.5, delta=1e-6)
    assert [(c.epsilon, c.delta) for c in charged(s)] == [(0.5, 0.0)]
    again = s.run("SELECT MEDIAN(y) FROM t", epsilon=0.5, delta=1e-6)  # the cache: free
    assert again.rows == result.rows and again.release.cached
    assert len(charged(s)) == 1
    s.close()


def test_explain_shows_the_mechanism():
    report = explain("SELECT g, MEDIAN(y) AS m FROM t GROUP BY g", MD, epsilon=1.0, delta=0.0)
    (key, median) = report["columns"]
    assert key == {"name": "g", "kind": "group_key"}
    assert median["mechanism"] == "exponential" and median["sensitivity"] == 2.0
    assert median["grid"]["cells"] == 11 and report["epsilon"] == 1.0
    top = explain("SELECT g, COUNT(*) AS n FROM t GROUP BY g ORDER BY n DESC LIMIT 1", MD,
                  epsilon=1.0, delta=0.0)
    assert [c["mechanism"] for c in top["columns"]] == ["report_noisy_max", "laplace"]
    text = explain_text("SELECT MAX(y) FROM t", MD, epsilon=1.0, delta=0.0)
    assert "exponential mechanism" in text and "utility sensitivity 1" in text
