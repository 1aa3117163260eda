"""The neighbouring-database test through the WHOLE engine (analysis, rewrite, DuckDB, noise).

It runs on DuckDB only: the noise is drawn in Python from the exact bins, and
tests/backends/test_spark.py shows that Spark's exact bins equal DuckDB's.

``tests/statistical/privacy_loss.py`` estimates ``max_B |ln(P[M(D) in B] / P[M(D') in B])|``
with a sampling margin. Here ``M`` is ``Session.run`` itself, with the production sampler.

Histograms, for speed. A GROUP BY query releases every bin with independent noise of the same
data-independent scale, so each bin is an independent copy of a one-bin experiment: bins
``0 .. B-1`` hold the world D, bins ``B .. 2B-1`` the world D' that differs from D in ONE row
(one more visit; one more payment, of 10000, clamped to the bound 1000; one more item joining a
public catalog row 3 times; one more customer row that 40 orders join). One run of the query
yields B samples of a bin's release on D and B on D'. What must hold per bin: one changed row
moves between two bins, shifting each by at most the per-bin shift, and the noise is
independent, so the release is epsilon-DP exactly when one bin's loss at that shift is at most
epsilon / 2 (pure releases, scale 2 * shift / epsilon). A smoothed release (scale 2S/epsilon,
S >= ES(0) = 2 * shift here) spends half of that on the shift and keeps the other half for the
change of S between neighbours, so its per-bin loss at the shift is at most epsilon / 4. Each
scenario asserts the loss is at most that target plus the margin, and not below target minus
margin (buckets outside the shifted region have loss exactly the target, so the check is not
vacuous). The SAME harness, fed by an engine whose sampler halves every noise scale, must
report a loss above target + margin: it catches a factor-2 bug.

Scalar release, with real neighbouring databases: ``SELECT COUNT(*)`` on D (50 rows) and D'
(51 rows), one engine per database, N_SCALAR runs each; buckets split at the midpoint, where
both halves have loss exactly epsilon.

Sizes and false-failure rates: 2B = 4000 bins x N_RUNS = 50 runs = 100,000 samples per world and
scenario, MIN_COUNT = 5,000 per bucket (margin ~0.05-0.1); scalar: N_SCALAR = 1,000 runs per
database, SCALAR_MIN_COUNT = 50 per bucket (margin ~0.29, ~0.44 for the halved scale). Each
"consistent" and "not vacuous" assertion fails by chance with probability about ALPHA = 1e-6
(normal approximation, Bonferroni over buckets); 10 of them: ~1e-5 for the file. Each "bug
detected" assertion has the halved-scale loss (2 x target) more than 10 standard errors of the
best bucket above target + margin: a miss has probability far below 1e-6; for the scalar one at
N_SCALAR = 1,000, simulated with discrete Laplace noise over 3,000 repetitions: loss - (epsilon
+ margin) has mean 0.60 and sd 0.06, ~10 standard deviations above 0 (at 2,000 runs: 17; the
cost is one engine run per sample). The scalar buckets' mass: at the halved scale (0.5) each
world puts P[noise >= 1] = e^-2 / (1 + e^-2) = 0.119 of its runs on the far side of the
midpoint, ~119 of 1,000 (sd 10): a minimum of 100 would drop a bucket in ~5% of runs (a false
failure of ``buckets_used == 2``); 50 is 6.8 sd below, P = 3e-14 (binomial, both buckets). At
the secure scale the far side holds ~269.
Runtime: ~3 s for the histograms, ~3 s for the scalar runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.backends.replay import ReplayBackend
from dpsql.budget import Budget
from dpsql.metadata import loads_metadata
from dpsql.noise.mechanisms import discrete_laplace
from dpsql.noise.plan import plan_noise
from dpsql.session import Session
from tests.db_files import writing
from tests.statistical.privacy_loss import empirical_privacy_loss, integer_buckets

EPSILON = 1.0
DELTA = 1e-6
ALPHA = 1e-6
B = 2000  # bins per world
N_RUNS = 50
MIN_COUNT = 5_000
N_SCALAR = 1_000
SCALAR_MIN_COUNT = 50  # see the module docstring: ~119 expected at the halved scale
R = 40  # orders per customer in the smoothed join; R >= 1/beta = 2 ln(2/delta)/epsilon ~ 29

METADATA = loads_metadata(f"""
tables:
  bins:
    public: true
    columns:
      g: {{max_freq: 1, type: INTEGER}}
  visits:
    columns:
      g: {{max_freq: 11, releasable: true, type: INTEGER, domain: {{table: bins, column: g}}}}
  payments:
    columns:
      g: {{max_freq: 6, releasable: true, type: INTEGER, domain: {{table: bins, column: g}}}}
      amount: {{bounds: [0, 1000], type: DOUBLE}}
  catalog:
    public: true
    columns:
      product_id: {{max_freq: 3, type: INTEGER}}
  items:
    columns:
      g: {{max_freq: 5, releasable: true, type: INTEGER, domain: {{table: bins, column: g}}}}
      product_id: {{max_freq: {2 * B}, type: INTEGER}}
  orders:
    columns:
      g: {{max_freq: {2 * R}, releasable: true, type: INTEGER,
          domain: {{table: bins, column: g}}}}
      customer_id: {{max_freq: {R}, type: INTEGER}}
  customers:
    columns:
      customer_id: {{max_freq: 1, type: INTEGER}}
  people:
    columns:
      id: {{max_freq: 1, type: INTEGER}}
""")

SCHEMA = [
    f"CREATE TABLE bins AS SELECT range::INTEGER AS g FROM range(0, {2 * B})",
    # visits: 10 per bin in D, 11 in D' (one more row)
    "CREATE TABLE visits AS SELECT b.g FROM bins b, range(0, 11) r(i) "
    f"WHERE r.i < 10 OR b.g >= {B}",
    # payments: 5 x 3.0 per bin; D' has one more payment of 10000, clamped to 1000
    "CREATE TABLE payments AS SELECT b.g, 3.0::DOUBLE AS amount FROM bins b, range(0, 5) r(i) "
    f"UNION ALL SELECT g, 10000.0 FROM bins WHERE g >= {B}",
    # catalog: products 1..5, three rows each (public, mf 3)
    "CREATE TABLE catalog AS SELECT p.i::INTEGER AS product_id FROM range(1, 6) p(i), "
    "range(0, 3) r(j)",
    # items: products 1..4 per bin in D (join count 12); D' adds product 5 (join count 15)
    "CREATE TABLE items AS SELECT b.g, (r.i + 1)::INTEGER AS product_id FROM bins b, "
    f"range(0, 5) r(i) WHERE r.i < 4 OR b.g >= {B}",
    # orders: R orders of customer 2g and R of customer 2g + 1 in bin g
    "CREATE TABLE orders AS SELECT b.g, (2 * b.g + s.i)::INTEGER AS customer_id FROM bins b, "
    f"range(0, 2) s(i), range(0, {R}) k(j)",
    # customers: 2g always; 2g + 1 only in D' (one more row, which R orders join)
    "CREATE TABLE customers AS SELECT 2 * g AS customer_id FROM bins "
    f"UNION ALL SELECT 2 * g + 1 FROM bins WHERE g >= {B}",
]


class HalvedScale:
    """A deliberately broken sampler: secure discrete Laplace with HALF the requested scale."""

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        return discrete_laplace(scale / 2.0, size)


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    path = tmp_path_factory.mktemp("privacy_loss") / "bins.duckdb"
    with writing(path) as con:
        for statement in SCHEMA:
            con.execute(statement)
    return path


@pytest.fixture(scope="module")
def engines(database, make_backend):
    return {
        "secure": Session(METADATA, make_backend(database, METADATA)),
        "halved": Session(METADATA, make_backend(database, METADATA), sampler=HalvedScale()),
    }


# (sql, true value on D, true value on D', per-bin target loss, bucket edges, pure release?)
SCENARIOS = [
    pytest.param("SELECT v.g, COUNT(*) AS n FROM visits v GROUP BY v.g",
                 10, 11, EPSILON / 2, integer_buckets(-5, 26), True,
                 id="count"),
    pytest.param("SELECT p.g, SUM(p.amount) AS s FROM payments p GROUP BY p.g",
                 15.0, 1015.0, EPSILON / 2, 15.0 + 1000.0 * np.arange(-8, 10), True,
                 id="clamped_sum"),
    pytest.param("SELECT i.g, COUNT(*) AS n FROM items i JOIN catalog c "
                 "ON i.product_id = c.product_id GROUP BY i.g",
                 12, 15, EPSILON / 2, 12 + 3 * np.arange(-10, 12) - 0.5, True,
                 id="join_count_pure"),
    pytest.param("SELECT o.g, COUNT(*) AS n FROM orders o JOIN customers c "
                 "ON o.customer_id = c.customer_id GROUP BY o.g",
                 R, 2 * R, EPSILON / 4, R + R * np.arange(-8, 10) - 0.5, False,
                 id="join_count_smoothed"),
]


def _samples(engine: Session, sql: str, d_value, d_prime_value):
    """Noisy bins of N_RUNS runs, split into the D copies and the D' copies."""
    d, d_prime = [], []
    for _ in range(N_RUNS):
        result = engine.run(sql, epsilon=EPSILON, delta=DELTA)
        assert len(result.rows) == 2 * B
        keys = np.array([row[0] for row in result.rows])
        values = np.array([row[1] for row in result.rows], dtype=np.float64)
        d.append(values[keys < B])
        d_prime.append(values[keys >= B])
    d, d_prime = np.concatenate(d), np.concatenate(d_prime)
    assert d.size == d_prime.size == B * N_RUNS
    # The noise is centred on the exact answers of the two worlds (sanity of the setup).
    assert abs(np.median(d) - d_value) <= abs(d_prime_value - d_value) / 2
    assert abs(np.median(d_prime) - d_prime_value) <= abs(d_prime_value - d_value) / 2
    return d, d_prime


def _estimate(engine, sql, d_value, d_prime_value, edges):
    d, d_prime = _samples(engine, sql, d_value, d_prime_value)
    return empirical_privacy_loss(d, d_prime, edges, min_count=MIN_COUNT, alpha=ALPHA)


# Every scenario on DuckDB. Not on Spark: the noise is drawn in Python from the exact bins,
# and tests/backends/test_spark.py shows Spark's exact bins (domain and bins queries) equal
# DuckDB's for rewrite cases executing every translation rule, so a Spark run would repeat
# this test at ~1 s per draw.
BACKEND_SCENARIOS = [
    pytest.param("duckdb", *s.values, id=f"duckdb-{s.id}") for s in SCENARIOS
]


@pytest.mark.slow
@pytest.mark.parametrize(("backend_name", "sql", "d_value", "d_prime_value", "target", "edges",
                          "pure"), BACKEND_SCENARIOS, scope="module")
def test_engine_histogram_release_keeps_its_privacy_loss(engines, sql, d_value, d_prime_value,
                                                         target, edges, pure):
    engine = engines["secure"]
    release = engine.run(sql, epsilon=EPSILON, delta=DELTA).release
    assert release.epsilon == EPSILON
    assert (release.delta == 0.0) == pure and ("smoothed" in release.mechanism) != pure
    est = _estimate(engine, sql, d_value, d_prime_value, edges)
    assert est.buckets_used >= 4, est
    assert est.loss <= target + est.margin, est
    assert est.loss >= target - est.margin, est  # not vacuous: the shift is visible


@pytest.mark.slow
@pytest.mark.parametrize("backend_name", ["duckdb"], scope="module")
@pytest.mark.parametrize(("sql", "d_value", "d_prime_value", "target", "edges", "pure"),
                         SCENARIOS)
def test_same_harness_catches_a_halved_noise_scale(engines, sql, d_value, d_prime_value,
                                                   target, edges, pure):
    est = _estimate(engines["halved"], sql, d_value, d_prime_value, edges)
    assert est.loss > target + est.margin, est


@pytest.mark.parametrize("backend_name", ["duckdb"], scope="module")
def test_smoothed_scenario_has_the_scale_the_targets_assume(engines):
    # S = max_k e^(-beta k) * 2 (R + k) = 2R because R >= 1/beta, so the scale is 2S/eps = 4R/eps
    # and a bin's shift of R costs exactly eps/4; the pure join's scale is 2 * 3 / eps.
    smoothed = SCENARIOS[3].values[0]
    (plan,) = plan_noise(engines["secure"].prepare(smoothed).analysis, Budget(EPSILON, DELTA))
    assert not plan.pure and plan.scale == pytest.approx(4 * R / EPSILON, rel=1e-12)
    pure_join = SCENARIOS[2].values[0]
    (plan,) = plan_noise(engines["secure"].prepare(pure_join).analysis, Budget(EPSILON, DELTA))
    assert plan.pure and plan.scale == pytest.approx(6 / EPSILON, rel=1e-12)


# --------------------------------------------------------------------------- scalar neighbours


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory):
    folder = tmp_path_factory.mktemp("neighbours")
    paths = {}
    for name, rows in (("d", 50), ("d_prime", 51)):
        path = folder / f"{name}.duckdb"
        with writing(path) as con:
            con.execute(f"CREATE TABLE people AS SELECT range::INTEGER AS id FROM range({rows})")
        paths[name] = path
    return paths


def _scalar_samples(path, sampler=None) -> np.ndarray:
    # the exact read runs once on the file and is replayed (as `dpsql audit` does): every run
    # still plans, draws, post-processes and releases through the Session
    inner = DuckDBBackend(path, METADATA)
    engine = Session(METADATA, ReplayBackend(inner), sampler=sampler)
    try:
        return np.array([engine.run("SELECT COUNT(*) AS n FROM people",
                                    epsilon=EPSILON).rows[0][0]
                         for _ in range(N_SCALAR)], dtype=np.float64)
    finally:
        inner.close()


@pytest.mark.slow
@pytest.mark.parametrize(("sampler", "broken"), [(None, False), (HalvedScale(), True)],
                         ids=["secure", "halved"])
def test_scalar_count_on_neighbouring_databases(neighbours, sampler, broken):
    d = _scalar_samples(neighbours["d"], sampler)
    d_prime = _scalar_samples(neighbours["d_prime"], sampler)
    # One edge at the midpoint: P[X <= 50] vs P[X' <= 50] has loss exactly epsilon, and so
    # does the upper half.
    est = empirical_privacy_loss(d, d_prime, np.array([50.5]), min_count=SCALAR_MIN_COUNT,
                                 alpha=ALPHA)
    assert est.buckets_used == 2, est
    if broken:
        assert est.loss > EPSILON + est.margin, est
    else:
        assert EPSILON - est.margin <= est.loss <= EPSILON + est.margin, est
