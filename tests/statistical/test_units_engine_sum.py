"""A SUM under a privacy unit through the WHOLE engine, on its value-unit levels
(dpsql.units.grid): the empirical privacy loss between a database with one unit and the same
database without it (tests/statistical/test_units_engine.py's harness and shop).

``SELECT SUM(qty) FROM items`` with ``max_sum: 2``: one level, tau = 2 value units (qty is
clamped into [0, 4]; every item has qty 1). Customer 1's six items sum to 6, so Q(2) is 20 on
D' and 22 on D -- the full move tau -- and R2T releases ``max(0, Q(2) + noise - shift)`` with
the noise snapped to a grid g ~ scale / 2^20 at scale (2 + g) / epsilon. The outer buckets (below
D''s shifted level, above D's) have loss 2 epsilon / (2 + g) ~ epsilon; a sampler that halves
every scale doubles it and must be caught (that the move is exactly tau for every level is
tests/bruteforce/test_r2t_value_levels.py's). False-failure rates as in test_units_engine.py
(~1e-6 per assertion); 4,000 runs, ~1 ms each on an idle core.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.backends.replay import ReplayBackend
from dpsql.noise import r2t
from dpsql.session import Session
from tests.statistical.privacy_loss import empirical_privacy_loss
from tests.statistical.test_units_engine import ALPHA, EPSILON, HalvedScale, _shop
from tests.units import tiny

N_RUNS = 1000
MAX_SUM = 2
SQL = "SELECT SUM(qty) AS s FROM items"


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory):
    folder = tmp_path_factory.mktemp("units_engine_sum")
    db = _shop()
    paths = {"d": folder / "d.duckdb", "d_prime": folder / "d_prime.duckdb"}
    tiny.write_file(paths["d"], db)
    tiny.write_file(paths["d_prime"], tiny.remove_unit(db, 1))
    return paths


def _values(path, sampler=None) -> np.ndarray:
    md = tiny.metadata(max_contribution=2, max_sum=MAX_SUM)
    inner = DuckDBBackend(path, md)
    engine = Session(md, ReplayBackend(inner), sampler=sampler)
    try:
        return np.array([engine.run(SQL, epsilon=EPSILON).rows[0][0] for _ in range(N_RUNS)],
                        dtype=np.float64)
    finally:
        inner.close()


@pytest.mark.parametrize(("sampler", "broken"), [(None, False), (HalvedScale(), True)],
                         ids=["secure", "halved"])
def test_r2t_sum_on_a_unit_and_its_removal(neighbours, sampler, broken):
    plan = r2t.plan_r2t(unit_bound=1.0, max_contribution=MAX_SUM, epsilon=EPSILON,
                        integer=False)
    assert plan.levels == (2,) and plan.scales[0] == pytest.approx(2 / EPSILON, rel=1e-5)
    shift = plan.shifts[0]
    edges = np.array([20 - shift, 22 - shift])
    d = _values(neighbours["d"], sampler)
    d_prime = _values(neighbours["d_prime"], sampler)
    est = empirical_privacy_loss(d, d_prime, edges, min_count=40, alpha=ALPHA)
    assert est.buckets_used == 3, est
    if broken:
        assert not est.consistent_with(EPSILON), est
    else:
        assert est.consistent_with(EPSILON), est
        assert est.loss >= EPSILON - est.margin, est
