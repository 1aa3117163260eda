"""The neighbouring-database test of partition selection through the WHOLE engine (analysis,
groups query on DuckDB, selection and noise in Python), with the production sampler.

``SELECT k, COUNT(*) FROM t GROUP BY k`` over a partition-selected ``k`` at epsilon 1,
delta 1e-6: the COUNT(*) is released as the selection's own noisy counts, so the selection has
all of epsilon 1 (scale b = 2, tau = 30). Each group is kept
independently, so one run gives many independent samples:

* **epsilon part**: groups 0..B-1 hold N = tau - 4 rows (world D), groups B..2B-1 hold N + 1
  (world D', one more row). One changed row shifts two groups by one each, so epsilon-DP of
  the selection needs each group's keep/drop loss at a shift of one to be at most
  epsilon_sel / 2 = 1/2; in the tail (tau - N >= 2) the "kept" bucket's loss is exactly 1/2,
  so the check is not vacuous (asserted both ways).
* **delta part**: M groups of ONE row (present in D, absent in D', where it is never kept):
  (epsilon, delta)-DP needs P(kept) <= delta. The kept count over T = M x N_RUNS trials is
  asserted at most the 1 - 1e-6 quantile of Binomial(T, delta). The SAME check with the
  threshold halved (``dpsql.noise.partition.threshold`` patched) must fail: P(kept) is then
  ~5.7e-4, about 230 expected against a bound of 6.

False-failure rates: the epsilon assertions use ``empirical_privacy_loss`` at ALPHA = 1e-6
(normal approximation, Bonferroni over buckets), two of them; the delta assertion 1e-6 by
construction (the true rate is below delta): ~3e-6 for the file. The halved-threshold check
misses with probability far below 1e-12 (Poisson(230) <= 6). Runtime ~2 s.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.metadata import loads_metadata
from dpsql.noise import partition
from dpsql.session import Session
from tests.db_files import writing
from tests.statistical.privacy_loss import empirical_privacy_loss, integer_buckets

EPSILON, DELTA = 1.0, 1e-6
TAU = 30  # threshold(1, 1.0, 1e-6), asserted below
N = TAU - 4
B = 2000
M = 20_000
N_RUNS = 20
ALPHA = 1e-6
SQL = "SELECT k, COUNT(*) AS n FROM t GROUP BY k"

METADATA = loads_metadata("""
tables:
  t:
    columns:
      k: {releasable: true, partition_selection: true, type: INTEGER}
""")


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    path = tmp_path_factory.mktemp("partition_loss") / "t.duckdb"
    with writing(path) as con:
        con.execute(f"""
            CREATE TABLE t AS
            SELECT g::INTEGER AS k FROM range(0, {2 * B}) a(g), range(0, {N + 1}) r(i)
            WHERE r.i < {N} OR a.g >= {B}
            UNION ALL SELECT ({2 * B} + g)::INTEGER FROM range(0, {M}) s(g)""")
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
            keys = np.fromiter((r[0] for r in result.rows), dtype=np.int64)
            out[run, keys] = 1
    finally:
        session.close()
        backend.close()
    return out


def test_threshold_is_as_documented():
    assert partition.threshold(1, EPSILON, DELTA) == TAU


def test_selection_is_epsilon_delta_through_the_engine(database):
    kept = _kept(database, TAU)
    d, d_prime = kept[:, :B].ravel(), kept[:, B:2 * B].ravel()
    est = empirical_privacy_loss(d_prime, d, integer_buckets(0, 1), min_count=2000,
                                 alpha=ALPHA)
    target = EPSILON / 2  # epsilon_sel / 2 per group at a shift of one
    assert est.consistent_with(target), est
    assert est.loss >= target - est.margin, est  # the tail is tight: not vacuous
    singles = int(kept[:, 2 * B:].sum())
    assert singles <= stats.binom.isf(ALPHA, M * N_RUNS, DELTA), singles


def test_a_halved_threshold_is_caught(database, monkeypatch):
    real = partition.threshold
    monkeypatch.setattr(partition, "threshold", lambda s, e, d: real(s, e, d) // 2)
    kept = _kept(database, TAU // 2)
    singles = int(kept[:, 2 * B:].sum())
    assert singles > stats.binom.isf(ALPHA, M * N_RUNS, DELTA), singles
