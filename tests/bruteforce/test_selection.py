"""Selection queries by brute force over every neighbour of tiny databases, on real DuckDB.

For random tiny databases D (2-3 rows of private table ``a``, values from {1, 2, 3} and, for
``y``, NULL; public ``p`` fixed with a key of max frequency 2) and each template, this runs
the plan's exact queries (the domain query, then the histogram of (bin, grid cell) counts the
engine reads, dpsql.execute.selection) on D and on EVERY neighbour D' (one row of ``a``
replaced by any other tuple), computes each aggregate's utility vectors exactly as the engine
does (dpsql.execute.selection.quantile_utilities) and checks what the exponential mechanism's
privacy needs (docs/privacy.md, "Selection: quantiles and top-k"):

* quantiles: in every bin, every utility moves by at most S (the constant stability), and the
  sum over bins of each bin's largest move is at most the claimed sensitivity (S without GROUP
  BY, 2 S with): one draw per bin at ``epsilon / sensitivity`` then loses at most epsilon;
* top-k: every count moves by at most S (Report Noisy Max's sensitivity).

Distance one (neighbours of neighbours) is covered by the same check run from every
neighbour of the first database of two templates: the claimed sensitivity does not depend on
k. Each database's exact read is a real DuckDB evaluation; a database and all its neighbours
share one statement (tests/bruteforce/batch.py).

A failure prints the database, the neighbour and both utility matrices: a counterexample is
a privacy bug.
"""

from __future__ import annotations

import itertools
import random

import duckdb
import numpy as np
import pytest

from dpsql.analysis.selection_aggregates import QuantileQuery, TopKQuery, analyze_selection
from dpsql.execute import layout
from dpsql.execute.selection import cell_counts, quantile_utilities
from dpsql.metadata import loads_metadata
from dpsql.rewrite.plan import plan_execution
from tests.bruteforce.batch import run_many

X_VALUES = (1, 2, 3)
Y_VALUES = (1, 2, 3, None)

METADATA = loads_metadata("""
tables:
  a:
    columns:
      x: {max_freq: 4, releasable: true, domain: {values: [1, 2, 3]}, type: INTEGER}
      y: {max_freq: 4, bounds: [0, 3], type: INTEGER}
  p:
    public: true
    columns:
      x: {max_freq: 2, type: INTEGER}
      g: {type: INTEGER}
""")

#: p: x = 1 twice, 2 once (mf 2): a public join has stability 2
PUBLIC_ROWS = [(1, 10), (1, 11), (2, 10)]

#: (sql, its constant stability S, databases drawn, check distance one too)
QUANTILES = [
    ("SELECT MIN(y), MAX(y), MEDIAN(y) FROM a", 1, 3, True),
    ("SELECT quantile_disc(y, 0.25), quantile_cont(y, 0.75) FROM a WHERE x <> 3", 1, 3, True),
    ("SELECT x, MIN(y), MEDIAN(y), MAX(y) FROM a GROUP BY x", 1, 3, True),
    ("SELECT x, quantile(y, 0.3) FROM a WHERE y <> 2 GROUP BY x", 1, 3, False),
    ("SELECT MEDIAN(y * 1.5) FROM a", 1, 3, False),  # a float grid of 1024 cells
    ("SELECT MAX(a.y), MIN(a.y) FROM a JOIN p ON a.x = p.x", 2, 3, True),
    ("SELECT p.g, MEDIAN(a.y) FROM a JOIN p ON a.x = p.x GROUP BY p.g", 2, 3, True),
]

TOP_K = [
    ("SELECT x FROM a GROUP BY x ORDER BY COUNT(*) DESC LIMIT 2", 1),
    ("SELECT x, COUNT(*) AS n FROM a WHERE y > 1 GROUP BY x ORDER BY n DESC LIMIT 1", 1),
    ("SELECT a.x FROM a JOIN p ON a.y = p.x GROUP BY a.x ORDER BY COUNT(*) DESC LIMIT 2", 2),
]


def _databases(seed: int, n: int):
    rng = random.Random(seed)
    for _ in range(n):
        yield [(rng.choice(X_VALUES), rng.choice(Y_VALUES)) for _ in range(rng.randint(2, 3))]


def _neighbours(rows):
    for i, new in itertools.product(range(len(rows)), itertools.product(X_VALUES, Y_VALUES)):
        if rows[i] != new:
            yield [*rows[:i], new, *rows[i + 1:]]


@pytest.fixture(scope="module")
def con():
    c = duckdb.connect(config={"threads": 1})
    c.execute("CREATE TABLE a (x INTEGER, y INTEGER)")
    c.execute("CREATE TABLE p (x INTEGER, g INTEGER)")
    c.executemany("INSERT INTO p VALUES (?, ?)", PUBLIC_ROWS)
    yield c
    c.close()


class Exact:
    """The plan's exact reads on the in-memory database: the domain query once (public), the
    bins query on many databases in one statement (tests/bruteforce/batch.py)."""

    def __init__(self, con, plan) -> None:
        assert not plan.exact_params
        self.con, self.plan = con, plan
        result = con.execute(plan.domain_sql)
        types = [str(d[1]) for d in result.description]
        self.domains = layout.read_domains(plan.n_keys, result.fetchall(), types)

    def bins(self, dbs) -> list[layout.Bins]:
        results = run_many(self.con, self.plan.exact_sql, [{"a": rows} for rows in dbs],
                           {"a": ("x", "y")})
        out = []
        for result in results:
            columns = [np.array(c, dtype=object) for c in zip(*result, strict=True)] if result \
                else [np.zeros(0, dtype=object) for _ in range(1 + self.plan.n_measurements)]
            out.append(layout.read_bins(self.domains, self.plan.integer_measurements, columns))
        return out


def _utilities(exact: Exact, query: QuantileQuery, dbs) -> list[list[np.ndarray]]:
    """Per database of ``dbs``: each aggregate's utility matrix (bins x cells)."""
    return [[quantile_utilities(cell_counts(bins, query.grid.cells), a)
             for a in query.aggregates] for bins in exact.bins(dbs)]


def _check_quantiles(query: QuantileQuery, here, there, stability: float, context) -> None:
    for u, v in zip(here, there, strict=True):
        per_bin = np.abs(u - v).max(axis=1)
        assert per_bin.max() <= stability + 1e-9, (context, u, v)
        assert per_bin.sum() <= query.sensitivity + 1e-9, (context, u, v)


@pytest.mark.parametrize(("sql", "stability", "n_databases", "distance_one"), QUANTILES,
                         ids=[q[0] for q in QUANTILES])
def test_quantile_utilities_move_within_the_sensitivity(con, sql, stability, n_databases,
                                                         distance_one):
    query = analyze_selection(sql, METADATA)
    assert isinstance(query, QuantileQuery)
    grouped = len(query.histogram.group_keys) > 1
    assert query.sensitivity == (2 if grouped else 1) * stability
    exact = Exact(con, plan_execution(query.histogram, METADATA))
    for index, rows in enumerate(_databases(len(sql), n_databases)):
        others = list(_neighbours(rows))
        here, *there = _utilities(exact, query, [rows, *others])
        for other, answer in zip(others, there, strict=True):
            _check_quantiles(query, here, answer, stability, (rows, other))
            if distance_one and index == 0:  # distance one: the neighbour's neighbours
                fars = list(_neighbours(other))
                for far, far_answer in zip(fars, _utilities(exact, query, fars), strict=True):
                    _check_quantiles(query, answer, far_answer, stability, (other, far))


def test_the_quantile_bound_is_attained(con):
    """The bound is not loose: adding one row to a group moves the MAX utility by exactly 1."""
    query = analyze_selection("SELECT x, MAX(y) FROM a GROUP BY x", METADATA)
    assert isinstance(query, QuantileQuery)
    exact = Exact(con, plan_execution(query.histogram, METADATA))
    (here,), (there,) = _utilities(exact, query, [[(1, 3), (2, 1)],
                                                  [(1, 3), (1, 3)]])  # (2, 1) -> (1, 3)
    assert np.abs(here - there).max(axis=1).sum() == 2.0  # both bins move by 1: 2 S


@pytest.mark.parametrize(("sql", "stability"), TOP_K, ids=[q[0] for q in TOP_K])
def test_top_k_counts_move_within_s(con, sql, stability):
    query = analyze_selection(sql, METADATA)
    assert isinstance(query, TopKQuery) and query.sensitivity == stability
    exact = Exact(con, plan_execution(query.analysis, METADATA))
    for rows in _databases(len(sql), 3):
        others = list(_neighbours(rows))
        here, *theirs = (b.exact[0] for b in exact.bins([rows, *others]))
        for other, there in zip(others, theirs, strict=True):
            assert np.abs(here - there).max() <= stability, (rows, other, here, there)
