"""The neighbouring-database test of partition selection under a privacy unit through the
WHOLE engine (unit analysis, two-stage groups query on DuckDB, selection and noise in Python),
with the production sampler.

Table ``t(pid, k)`` is its own unit table (every row one person, ``pid`` the unit; kappa =
max_groups = 1, C = 1), ``k`` partition-selected. ``SELECT k, COUNT(*) FROM t GROUP BY k`` at
epsilon 1, delta 1e-6: the COUNT(*) is the selection's own noisy count (C = 1), so the
selection has all of epsilon 1: scale b = kappa/eps = 1, tau = 15. Each group is kept
independently, so one run gives many independent samples:

* **epsilon part**: groups 0..B-1 hold N = tau - 2 units (world D), groups B..2B-1 hold N + 1
  (world D' = D plus one unit in that group). Adding a unit shifts ONE group by one, so each
  group's keep/drop loss must be at most epsilon = 1 -- twice what the change-one-row test
  allows per group; in the tail the "kept" bucket's loss is exactly 1, so the check is tight.
* **delta part**: M groups of ONE unit (present in D', absent in D, where it is never kept):
  (epsilon, delta)-DP needs P(kept) = P(Z >= tau - 1) <= delta. The kept count over
  T = M x N_RUNS trials is asserted at most the 1 - 1e-6 quantile of Binomial(T, delta). The
  SAME check with the threshold halved (``dpsql.noise.unit_partition.threshold`` patched) must
  fail: P(kept) is then about 1.7e-3, ~700 expected against a bound of 6.

False-failure rates: the epsilon assertions use ``empirical_privacy_loss`` at ALPHA = 1e-6
(normal approximation, Bonferroni over buckets), two of them; the delta assertion 1e-6 by
construction (the true rate is below delta): ~3e-6 for the file. The halved-threshold check
misses with probability far below 1e-12.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.metadata import loads_metadata
from dpsql.noise import unit_partition
from dpsql.session import Session
from tests.db_files import writing
from tests.statistical.privacy_loss import empirical_privacy_loss, integer_buckets

EPSILON, DELTA = 1.0, 1e-6
TAU = 15  # unit_partition.threshold(1, 1.0, 1e-6), asserted below
N = TAU - 2  # P(kept) = P(Z >= 2) ~ 0.1: ~4,000 kept per world
B = 2000
M = 20_000
N_RUNS = 20
ALPHA = 1e-6
SQL = "SELECT k, COUNT(*) AS n FROM t GROUP BY k"

METADATA = loads_metadata("""
privacy_unit: {table: t, column: pid, max_contribution: 2, max_groups: 1,
               max_rows_per_group: 1}
tables:
  t:
    columns:
      pid: {type: BIGINT}
      k: {releasable: true, partition_selection: true, type: INTEGER}
""")


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    path = tmp_path_factory.mktemp("unit_partition_loss") / "t.duckdb"
    with writing(path) as con:
        con.execute(f"""
            CREATE TABLE t AS
            SELECT row_number() OVER () AS pid, k FROM (
                SELECT g::INTEGER AS k FROM range(0, {2 * B}) a(g), range(0, {N + 1}) r(i)
                WHERE r.i < {N} OR a.g >= {B}
                UNION ALL SELECT ({2 * B} + g)::INTEGER FROM range(0, {M}) s(g))""")
    return path


def _kept(database, tau: int) -> np.ndarray:
    """Per run, per group: 1 if released (a fresh engine with the production sampler)."""
    backend = DuckDBBackend(database, METADATA)
    session = Session(METADATA, backend)
    out = np.zeros((N_RUNS, 2 * B + M), dtype=np.int8)
    try:
        for run in range(N_RUNS):
            result = session.run(SQL, epsilon=EPSILON, delta=DELTA)
            assert result.release.selection_threshold == tau
            assert result.release.privacy_unit == "t.pid"
            keys = np.fromiter((r[0] for r in result.rows), dtype=np.int64)
            out[run, keys] = 1
    finally:
        session.close()
        backend.close()
    return out


def test_threshold_is_as_documented():
    assert unit_partition.threshold(1, EPSILON, DELTA) == TAU


def test_selection_is_epsilon_delta_through_the_engine(database):
    kept = _kept(database, TAU)
    d, d_prime = kept[:, :B].ravel(), kept[:, B:2 * B].ravel()
    est = empirical_privacy_loss(d_prime, d, integer_buckets(0, 1), min_count=2000,
                                 alpha=ALPHA)
    target = EPSILON  # one added unit shifts one group by one
    assert est.consistent_with(target), est
    assert est.loss >= target - est.margin, est  # the tail is tight: not vacuous
    singles = int(kept[:, 2 * B:].sum())
    assert singles <= stats.binom.isf(ALPHA, M * N_RUNS, DELTA), singles


def test_a_halved_threshold_is_caught(database, monkeypatch):
    real = unit_partition.threshold
    monkeypatch.setattr(unit_partition, "threshold", lambda g, e, d: real(g, e, d) // 2)
    kept = _kept(database, TAU // 2)
    singles = int(kept[:, 2 * B:].sum())
    assert singles > stats.binom.isf(ALPHA, M * N_RUNS, DELTA), singles
