"""The neighbouring-database test of SAMPLE_AGGREGATE through the WHOLE engine (analysis,
rewrite, DuckDB, clamping, noise): ``Session.run`` with the production noise sampler.

The worst case of docs/privacy.md, "Sample-and-aggregate": ``MIN(v)`` in [0, 1] over m = 2
blocks keyed by ``k``; D = {(a, 0), (a, 1)}, D' = {(b, 1), (a, 1)}, with a block key (chosen
by the test sampler, found by :func:`separating_key`) that puts a and b in different blocks.
Block a's minimum rises from 0 to 1 and block b goes from empty (lo = 0) to 1: the clamped
sum S moves from 0 to 2 = 2 (hi - lo), the largest move the release allows. The noise is the
production sampler's (secure discrete Laplace on the snapped sum; the snapping grid is 2^-19,
so the output is continuous for these buckets).

Each run releases K = 40 outputs, all ``SAMPLE_AGGREGATE(MIN(v), 0, 1)``, at epsilon K in
total: each output gets epsilon_j = 1 and independent noise of scale 2 (hi - lo) / epsilon_j =
2 on S, so each run gives K independent samples of a one-output release at epsilon 1. Buckets
``(-inf, 0)``, ``[0, 1)``, ``[1, inf)`` of the released mean S' / 2: on the tails the
probability ratio between D and D' is exactly e^(2/2) = e (a loss of exactly epsilon), in the
middle 1. The test asserts the estimated loss is at most 1 + margin and not below 1 - margin
(not vacuous); the same harness with a sampler that halves the scale must report a loss above
1 + margin (its true loss is 2): it catches a factor-2 bug, for example a sensitivity of
hi - lo instead of 2 (hi - lo).

Sizes and false-failure rates: N_RUNS = 100 runs per database x K = 40 = 4,000 samples per
world; the tails hold ~18% and ~50% of them (~7% with the halved scale; min_count 200),
margin ~0.25-0.35. Each "consistent" or "not vacuous" assertion fails by chance with
probability about ALPHA = 1e-6 (normal approximation, Bonferroni over the 3 buckets); the
halved-scale loss (2) is more than 10 standard errors above 1 + margin, so a miss has
probability far below 1e-6. Runtime: ~2 s per sampler on an idle machine (one DuckDB read per
run).
"""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.metadata import loads_metadata
from dpsql.noise.mechanisms import discrete_laplace
from dpsql.sample_aggregate.analysis import analyze_sample_aggregate
from dpsql.sample_aggregate.rewrite import KEY_PARAM, block_expression
from dpsql.session import Session
from tests.db_files import writing
from tests.statistical.privacy_loss import empirical_privacy_loss

EPSILON_EACH = 1.0
K = 40
N_RUNS = 100
ALPHA = 1e-6
A, B = 1, 2  # the two customers

METADATA = loads_metadata("""
tables:
  s:
    sample_aggregate: {blocks: 2, by: k}
    columns:
      k: {type: INTEGER}
      v: {type: INTEGER}
""")
SQL = "SELECT " + ", ".join(f"SAMPLE_AGGREGATE(MIN(v), 0, 1) AS o{j}" for j in range(K)) + \
    " FROM s"


def separating_key() -> int:
    """The smallest key whose split puts customers A and B in different blocks (the engine's
    own block expression, evaluated on DuckDB)."""
    block = block_expression(analyze_sample_aggregate(SQL, METADATA), METADATA)
    con = duckdb.connect()
    con.execute(f"CREATE TABLE s AS SELECT * FROM (VALUES ({A}, 0), ({B}, 0)) v(k, v)")
    sql = f"SELECT COUNT(DISTINCT {block.sql(dialect='duckdb')}) FROM s AS s"
    key = next(k for k in range(100) if con.execute(sql, {KEY_PARAM: k}).fetchone()[0] == 2)
    con.close()
    return key


class Secure:
    """The production noise, with the test's block key."""

    def __init__(self, key: int) -> None:
        self.key = key

    def block_key(self) -> int:
        return self.key

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        return discrete_laplace(scale, size)


class HalvedScale(Secure):
    """A deliberately broken sampler: secure discrete Laplace with HALF the requested scale."""

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        return discrete_laplace(scale / 2.0, size)


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sa_privacy_loss")
    paths = []
    for name, rows in (("d", f"({A}, 0), ({A}, 1)"), ("d_prime", f"({B}, 1), ({A}, 1)")):
        path = folder / f"{name}.duckdb"
        with writing(path) as con:
            con.execute(f"CREATE TABLE s AS SELECT k::INTEGER AS k, v::INTEGER AS v "
                        f"FROM (VALUES {rows}) t(k, v)")
        paths.append(path)
    return paths


def samples(path, sampler) -> np.ndarray:
    session = Session(METADATA, DuckDBBackend(path, METADATA), sampler=sampler)
    out = np.array([session.run(SQL, epsilon=EPSILON_EACH * K).rows[0]
                    for _ in range(N_RUNS)], dtype=np.float64)
    session.close()
    return out.ravel()


@pytest.mark.slow
@pytest.mark.parametrize("broken", [False, True], ids=["secure", "halved"])
def test_worst_case_neighbours_lose_exactly_epsilon(worlds, broken):
    key = separating_key()
    sampler = HalvedScale(key) if broken else Secure(key)
    d, d_prime = (samples(path, sampler) for path in worlds)
    # the exact means are 0 and 1: the engine really moved S by 2 (hi - lo)
    assert abs(np.median(d)) < 0.2 and abs(np.median(d_prime) - 1.0) < 0.2
    est = empirical_privacy_loss(d, d_prime, np.array([0.0, 1.0]), min_count=200,
                                 alpha=ALPHA)
    assert est.buckets_used == 3
    if broken:
        assert est.loss > EPSILON_EACH + est.margin, est
    else:
        assert est.consistent_with(EPSILON_EACH), est
        assert est.loss >= EPSILON_EACH - est.margin, est  # not vacuous: the tails reach e
