"""Privacy units through the WHOLE engine (analysis, rewrite, DuckDB, noise): the empirical
privacy loss between a database with one unit and the same database without it (issue #17).

``tests/statistical/privacy_loss.py`` estimates ``max_B |ln(P[M(D) in B] / P[M(D') in B])|``
with a sampling margin (its docstring: mass rule, margin, false-alarm rate). ``M`` is
``Session.run`` with the production (secure) sampler and no ledger; the metadata is the tiny
shop of ``tests/units/tiny.py`` (customer is the unit; orders reach it directly, items through
orders).

* **R2T COUNT** on two real DuckDB files: D (20 customers with one order and one item each,
  plus customer 1 with three orders and six items) and D' = D without customer 1 and every row
  linked to it (FK cascade). ``SELECT COUNT(*) FROM items`` (the unit looked up through orders)
  with GS = 2: one level, tau = 2 rows, so Q(2) is 20 on D' and 22 on D -- the full move tau *
  b -- and R2T releases ``max(0, Q(2) + X - shift)``, X discrete Laplace of scale 2 / epsilon.
  Buckets split half a step above D''s value and half a step below D's: the two outer buckets
  have loss exactly epsilon (discrete Laplace tails), the middle one less. N_R2T runs per file.
* **Two-stage GROUP BY** (``SELECT c.region, COUNT(*) .. JOIN orders .. GROUP BY c.region``,
  kappa = 1, C = 3), with the histogram style of ``test_engine_privacy_loss.py`` for speed: one
  file whose regions 0..B-1 each hold two customers with one order, and whose regions B+g hold
  the same plus ONE more customer with five orders. With kappa = 1 and every customer's orders
  in one region, a region's release depends on its own customers only, so region B+g is
  region g's release on the database with that one unit added: a neighbour pair per region,
  released with independent noise of the public scale kappa * C / epsilon = 3 / epsilon, and
  the extra unit moves its region by min(5, C) = 3 = kappa * C (clamped). Outer buckets: loss
  exactly epsilon. B regions x N_RUNS runs samples per world.

The SAME harness on an engine whose sampler halves every noise scale (equivalently: halved R2T
scales, or a kappa * C claimed at half the value the SQL enforces) must report a loss above
epsilon + margin: the test catches a factor-2 bug in either mechanism.

False-failure rates (normal approximation, Bonferroni over the buckets; ALPHA = 1e-6 per
assertion): each "consistent" and "not vacuous" assertion fails by chance with probability
about 1e-6; four of them, ~4e-6 for the file. The "caught" assertions: R2T's halved loss is 2
epsilon = 2 in each outer bucket (standard error ~0.1 at N_R2T = 1000; measured 1.94-2.11)
against a threshold epsilon + margin of ~1.5 (margin measured 0.50-0.57): both outer buckets
would have to fall ~5 standard errors short, a miss below 1e-10; the histogram's margin is
~0.05 at B x N_RUNS samples per world: a miss is negligible. Runtime: ~4,000 R2T runs
(~1 ms each on an idle core) and 2 x N_RUNS histogram runs.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.backends.replay import ReplayBackend
from dpsql.metadata import Metadata
from dpsql.noise import r2t
from dpsql.noise.mechanisms import discrete_laplace
from dpsql.session import Session
from tests.db_files import writing
from tests.statistical.privacy_loss import empirical_privacy_loss
from tests.units import tiny

EPSILON = 1.0
ALPHA = 1e-6
N_R2T = 1000
GS = 2
B = 1000  # regions per world of the histogram
N_RUNS = 40
KAPPA, C = 1, 3

R2T_SQL = "SELECT COUNT(*) AS n FROM items"
GROUPED_SQL = ("SELECT c.region, COUNT(*) AS n FROM customer c JOIN orders o "
               "ON o.o_cust = c.c_id GROUP BY c.region")


class HalvedScale:
    """A deliberately broken sampler: secure discrete Laplace with HALF the requested scale."""

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        return discrete_laplace(scale / 2.0, size)


def _metadata() -> Metadata:
    return tiny.metadata(max_contribution=GS, max_groups=KAPPA, max_rows_per_group=C)


def _shop() -> tiny.Database:
    """Customers 2..21 with one order (and one item) each; customer 1 with three orders and
    six items."""
    customers = [(c, 1) for c in range(1, 22)]
    orders = [(c, c, 1) for c in range(2, 22)] + [(100, 1, 1), (101, 1, 1), (102, 1, 1)]
    items = [(c, 1, 1) for c in range(2, 22)] + [(o, 1, 1) for o in (100, 100, 101, 101, 102,
                                                                     102)]
    return {"customer": customers, "orders": orders, "items": items, "regions": [(1,), (2,)]}


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory):
    """D (with customer 1) and D' (customer 1 and its cascade removed): two DuckDB files."""
    folder = tmp_path_factory.mktemp("units_engine")
    db = _shop()
    paths = {"d": folder / "d.duckdb", "d_prime": folder / "d_prime.duckdb"}
    tiny.write_file(paths["d"], db)
    tiny.write_file(paths["d_prime"], tiny.remove_unit(db, 1))
    return paths


def _r2t_values(path, sampler=None) -> np.ndarray:
    md = _metadata()
    # the exact read runs once on the real file and is replayed (as `dpsql audit` does):
    # every run still plans, draws, post-processes and releases through the Session
    inner = DuckDBBackend(path, md)
    engine = Session(md, ReplayBackend(inner), sampler=sampler)
    try:
        return np.array([engine.run(R2T_SQL, epsilon=EPSILON).rows[0][0]
                         for _ in range(N_R2T)], dtype=np.float64)
    finally:
        inner.close()


def _r2t_edges() -> np.ndarray:
    """Half a step above D''s and below D's shifted level: the outer buckets' loss is
    exactly epsilon."""
    plan = r2t.plan_r2t(unit_bound=1, max_contribution=GS, epsilon=EPSILON, integer=True)
    assert plan.scales == (2 / EPSILON,)  # L = 1 level, tau = 2: L * tau * b / epsilon
    shift = plan.shifts[0]
    q_prime, q = 20, 22
    return np.array([q_prime - shift + 0.5, q - shift - 0.5])


def test_r2t_count_setup_moves_the_level_by_tau(neighbours):
    truth = {}
    for name, path in neighbours.items():
        con = duckdb.connect(str(path), read_only=True)
        try:
            truth[name] = con.execute(
                "SELECT SUM(LEAST(n, 2)) FROM (SELECT o.o_cust, COUNT(*) AS n FROM items i "
                "JOIN orders o ON o.o_id = i.i_order GROUP BY o.o_cust)").fetchone()[0]
        finally:
            con.close()
    assert (truth["d_prime"], truth["d"]) == (20, 22)


@pytest.mark.parametrize(("sampler", "broken"), [(None, False), (HalvedScale(), True)],
                         ids=["secure", "halved"])
def test_r2t_count_on_a_unit_and_its_removal(neighbours, sampler, broken):
    d = _r2t_values(neighbours["d"], sampler)
    d_prime = _r2t_values(neighbours["d_prime"], sampler)
    # (an outer bucket holds ~10% of one world's runs at the halved scale: min_count 40)
    est = empirical_privacy_loss(d, d_prime, _r2t_edges(), min_count=40, alpha=ALPHA)
    assert est.buckets_used == 3, est
    if broken:
        assert not est.consistent_with(EPSILON), est
    else:
        assert est.consistent_with(EPSILON), est
        assert est.loss >= EPSILON - est.margin, est  # not vacuous: the move is visible


# --------------------------------------------------------------------------- two-stage


@pytest.fixture(scope="module")
def regions(tmp_path_factory):
    """One file: regions 0..2B-1; each holds two customers with one order each, and region
    B+g one more customer (id 10^6 + g) with five orders."""
    path = tmp_path_factory.mktemp("units_regions") / "regions.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE regions AS SELECT range::INTEGER AS r "
                    f"FROM range(0, {2 * B})")
        con.execute("CREATE TABLE customer AS SELECT (2 * r + k)::INTEGER AS c_id, r AS region "
                    "FROM regions, range(0, 2) t(k) UNION ALL SELECT (1000000 + r)::INTEGER, r "
                    f"FROM regions WHERE r >= {B}")
        con.execute("CREATE TABLE orders AS SELECT row_number() OVER ()::INTEGER AS o_id, "
                    "c_id AS o_cust, 1 AS amount FROM customer, range(0, 5) t(k) "
                    "WHERE k = 0 OR c_id >= 1000000")
        con.execute("CREATE TABLE items (i_order INTEGER, qty INTEGER, kind INTEGER)")
    return path


def _grouped_samples(path, sampler=None) -> tuple[np.ndarray, np.ndarray]:
    md = _metadata()
    engine = Session(md, DuckDBBackend(path, md), sampler=sampler)
    d, d_prime = [], []
    try:
        for _ in range(N_RUNS):
            result = engine.run(GROUPED_SQL, epsilon=EPSILON)
            assert len(result.rows) == 2 * B
            keys = np.array([row[0] for row in result.rows])
            values = np.array([row[1] for row in result.rows], dtype=np.float64)
            d.append(values[keys < B])
            d_prime.append(values[keys >= B])
    finally:
        engine.backend.close()
    return np.concatenate(d), np.concatenate(d_prime)


@pytest.mark.parametrize(("sampler", "broken"), [(None, False), (HalvedScale(), True)],
                         ids=["secure", "halved"])
def test_two_stage_group_by_on_a_unit_and_its_removal(regions, sampler, broken):
    md = _metadata()
    engine = Session(md, DuckDBBackend(regions, md))
    try:
        column = engine.run(GROUPED_SQL, epsilon=EPSILON).release.columns[1]
        assert column.mechanism == "discrete_laplace"
        prepared = engine.prepare(GROUPED_SQL)
        assert prepared.analysis.measurements[0].sensitivity.at(0) == KAPPA * C
    finally:
        engine.backend.close()
    d, d_prime = _grouped_samples(regions, sampler)
    # the noise is centred on the exact answers: 2 orders, and 2 + min(5, C) with the unit
    assert abs(np.median(d) - 2) <= 1 and abs(np.median(d_prime) - 5) <= 1
    est = empirical_privacy_loss(d, d_prime, np.array([2.5, 4.5]), min_count=1000,
                                 alpha=ALPHA)
    assert est.buckets_used == 3, est
    if broken:
        assert not est.consistent_with(EPSILON), est
    else:
        assert est.consistent_with(EPSILON), est
        assert est.loss >= EPSILON - est.margin, est
