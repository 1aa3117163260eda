"""The neighbouring-database test of the OPTIMAL partition selection (kappa = 1, a key-only
query: dpsql.noise.optimal_partition) through the WHOLE engine (unit analysis, two-stage
groups query on DuckDB, the Bernoulli draws from os.urandom).

Table ``t(pid, k)`` is its own unit table (every row one person; kappa = max_groups = 1),
``k`` partition-selected. ``SELECT DISTINCT k FROM t`` at epsilon 1, delta 1e-6: the
selection has all of the budget and keeps a group of n units with probability pi(n)
(pi(7) ~ 6e-4, pi(8) ~ 1.7e-3, pi(12) ~ 0.095, pi(13) ~ 0.257). Each group is kept
independently, so one run gives many independent samples:

* **epsilon part**: B groups of each of 7, 8, 12 and 13 units; adding a unit to a group of n
  gives one of n + 1, so the pairs (7, 8) and (12, 13) are neighbours and each one's
  keep/drop loss must be at most epsilon = 1. At (12, 13) the "kept" bucket's loss is
  exactly 1 (pi is e^eps pi + delta there): the check is tight, not vacuous.
* **delta part**: M groups of ONE unit (present in D', absent in D, where they are never
  kept): P(kept) = pi(1) <= delta. The kept count over T = M x N_RUNS trials is asserted at
  most the 1 - 1e-6 quantile of Binomial(T, delta).
* **a weakened pi**: the SAME epsilon check with the table computed at 2 epsilon
  (``optimal_partition.keep_table`` patched) must fail: at (7, 8) its pi is 0.19 against 0.89,
  a loss of about 2 on both buckets (~7,500 and ~35,600 kept of 40,000).

False-failure rates: the epsilon assertions use ``empirical_privacy_loss`` at ALPHA = 1e-6
(normal approximation, Bonferroni over buckets), two pairs and a tightness check; the delta
assertion 1e-6 by construction: ~4e-6 for the file. The weakened check misses with
probability far below 1e-12 (its loss exceeds 1 by ~1, the margin is ~0.05).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.metadata import loads_metadata
from dpsql.noise import optimal_partition
from dpsql.session import Session
from tests.db_files import writing
from tests.statistical.privacy_loss import empirical_privacy_loss, integer_buckets

EPSILON, DELTA = 1.0, 1e-6
SIZES = (7, 8, 12, 13)
B = 2000
M = 20_000
N_RUNS = 20
ALPHA = 1e-6
SQL = "SELECT DISTINCT k FROM t"

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
    """Groups j*B .. (j+1)*B - 1 hold SIZES[j] units; then M groups of one unit."""
    path = tmp_path_factory.mktemp("optimal_partition_loss") / "t.duckdb"
    parts = [f"SELECT ({j * B} + g)::INTEGER AS k FROM range(0, {B}) a(g), range(0, {n}) r(i)"
             for j, n in enumerate(SIZES)]
    parts.append(f"SELECT ({len(SIZES) * B} + g)::INTEGER FROM range(0, {M}) s(g)")
    with writing(path) as con:
        con.execute("CREATE TABLE t AS SELECT row_number() OVER () AS pid, k FROM ("
                    + " UNION ALL ".join(parts) + ")")
    return path


def _kept(database) -> np.ndarray:
    """Per run, per group: 1 if released (a fresh engine, the production draws)."""
    backend = DuckDBBackend(database, METADATA)
    session = Session(METADATA, backend)
    out = np.zeros((N_RUNS, len(SIZES) * B + M), dtype=np.int8)
    try:
        for run in range(N_RUNS):
            result = session.run(SQL, epsilon=EPSILON, delta=DELTA)
            assert result.release.selection_mechanism == optimal_partition.MECHANISM
            keys = np.fromiter((r[0] for r in result.rows), dtype=np.int64)
            out[run, keys] = 1
    finally:
        session.close()
        backend.close()
    return out


def _size(kept: np.ndarray, n: int) -> np.ndarray:
    j = SIZES.index(n)
    return kept[:, j * B:(j + 1) * B].ravel()


def _losses(kept: np.ndarray) -> list:
    """The empirical keep/drop loss of the neighbouring pairs (7, 8) and (12, 13)."""
    return [empirical_privacy_loss(_size(kept, n + 1), _size(kept, n), integer_buckets(0, 1),
                                   min_count=2000, alpha=ALPHA) for n in (7, 12)]


def test_selection_is_epsilon_delta_through_the_engine(database):
    kept = _kept(database)
    losses = _losses(kept)
    for est in losses:
        assert est.consistent_with(EPSILON), est
    tight = losses[1]
    assert tight.loss >= EPSILON - tight.margin, tight  # the (12, 13) keep bucket is tight
    singles = int(kept[:, len(SIZES) * B:].sum())
    assert singles <= stats.binom.isf(ALPHA, M * N_RUNS, DELTA), singles


def test_a_table_at_twice_epsilon_is_caught(database, monkeypatch):
    real = optimal_partition.keep_table
    monkeypatch.setattr(optimal_partition, "keep_table", lambda e, d: real(2 * e, d))
    kept = _kept(database)
    weak = _losses(kept)[0]  # the (7, 8) pair
    assert not weak.consistent_with(EPSILON), weak
