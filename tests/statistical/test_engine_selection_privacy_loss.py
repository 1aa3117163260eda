"""The neighbouring-database test of a quantile release through the WHOLE engine (analysis,
rewrite, DuckDB, the exponential mechanism), on DuckDB only (tests/rewrite/test_selection.py
shows Spark's exact cell counts equal DuckDB's).

As in test_engine_privacy_loss.py, a GROUP BY releases every bin independently, so bins
``0 .. B-1`` hold world D and bins ``B .. 2B-1`` world D', which differs in ONE row (one more
``y = 3``): one run of ``SELECT g, MAX(y) ... GROUP BY g`` yields B draws on each world.
The grid is the exact integer grid 0..3; the claimed sensitivity is 2S = 2 (a changed row
touches two bins), so one bin with one added row may lose at most epsilon / 2.

What is checked, per world, with N_RUNS * B = 20,000 draws:

1. each output's frequency is within 5 standard errors of the exponential mechanism's exact
   law at the engine's claimed parameters (u = -max(L + 1 - t, t - R, 0), t = n: MAX), which
   also shows a factor-2 error in the sensitivity or the epsilon share would be caught (that
   law is more than 20 standard errors away);
2. the empirical privacy loss between the worlds (tests/statistical/privacy_loss.py) is at
   most epsilon / 2 + margin and within the margin of the exact law's loss (not vacuous).

False-failure rate: 8 frequency checks at 5 SE (~6e-7 each, normal approximation) plus two
loss checks at alpha = 1e-6: about 1e-5 for the file. Runtime: ~2 s.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.metadata import loads_metadata
from dpsql.noise.selection import exponential_probabilities
from dpsql.session import Session
from tests.db_files import writing
from tests.statistical.privacy_loss import empirical_privacy_loss, integer_buckets

EPSILON = 2.0
B = 1000
N_RUNS = 20
ALPHA = 1e-6

METADATA = loads_metadata("""
tables:
  bins:
    public: true
    columns:
      g: {max_freq: 1, type: INTEGER}
  obs:
    columns:
      g: {max_freq: 2, releasable: true, type: INTEGER, domain: {table: bins, column: g}}
      y: {max_freq: 4000, bounds: [0, 3], type: INTEGER}
""")

SQL = "SELECT o.g, MAX(o.y) AS m FROM obs o GROUP BY o.g"

#: the utilities the engine must use: D holds one 3 (n = 1), D' two (n = 2)
U_D = np.array([-1.0, -1.0, -1.0, 0.0])
U_D_PRIME = np.array([-2.0, -2.0, -2.0, 0.0])


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = tmp_path_factory.mktemp("selection_loss") / "obs.duckdb"
    with writing(path) as con:
        con.execute(f"CREATE TABLE bins AS SELECT range::INTEGER AS g FROM range(0, {2 * B})")
        con.execute("CREATE TABLE obs AS SELECT g, 3 AS y FROM bins "
                    f"UNION ALL SELECT g, 3 FROM bins WHERE g >= {B}")
    session = Session(METADATA, DuckDBBackend(path, METADATA))
    yield session
    session.close()


@pytest.fixture(scope="module")
def samples(engine):
    d, d_prime = [], []
    for _ in range(N_RUNS):
        result = engine.run(SQL, epsilon=EPSILON)
        assert len(result.rows) == 2 * B
        keys = np.array([r[0] for r in result.rows])
        values = np.array([r[1] for r in result.rows], dtype=np.float64)
        d.append(values[keys < B])
        d_prime.append(values[keys >= B])
    return np.concatenate(d), np.concatenate(d_prime)


def test_engine_claims_sensitivity_two_s_and_the_whole_epsilon(engine):
    prepared = engine.prepare(SQL)
    assert prepared.query.sensitivity == 2.0 and prepared.query.grid.cells == 4
    assert engine.run(SQL, epsilon=EPSILON).release.epsilon == EPSILON


@pytest.mark.parametrize("world", [0, 1], ids=["D", "D_prime"])
def test_each_world_follows_the_exponential_law(samples, world):
    values = samples[world]
    u = (U_D, U_D_PRIME)[world]
    law = exponential_probabilities(u, EPSILON, 2.0)
    n = values.size
    se = np.sqrt(law * (1 - law) / n)
    freq = np.bincount(values.astype(np.int64), minlength=4) / n
    assert np.all(np.abs(freq - law) <= 5 * se), (freq, law)
    wrong = exponential_probabilities(u, EPSILON, 1.0)  # the sensitivity halved
    assert np.max(np.abs(wrong - law) / se) > 20


def test_privacy_loss_between_the_worlds(samples):
    est = empirical_privacy_loss(samples[0], samples[1], integer_buckets(0, 3),
                                 min_count=1000, alpha=ALPHA)
    p, q = (exponential_probabilities(u, EPSILON, 2.0) for u in (U_D, U_D_PRIME))
    exact = float(np.max(np.abs(np.log(p / q))))
    assert exact <= EPSILON / 2
    assert est.buckets_used == 4, est
    assert est.loss <= EPSILON / 2 + est.margin, est
    assert abs(est.loss - exact) <= est.margin, (est, exact)
