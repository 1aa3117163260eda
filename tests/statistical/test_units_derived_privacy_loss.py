"""A derived table grouped by the privacy unit (dpsql.units.derived; TPC-H Q13's shape) through
the WHOLE engine: the empirical privacy loss between a shop with one unit and the same shop
without it (``tests/statistical/privacy_loss.py``; the harness of ``test_units_engine.py``).

D: customers 1..10 with three orders each, 11..20 with one, and customer 99 with three; D' = D
without customer 99 and its orders (FK cascade). The query histograms each customer's clamped
order count, ``LEAST(COUNT(o.o_id), 5)``, bins 0..5: bin 3 holds 11 customers on D and 10 on
D', the full move the rule claims (sensitivity 1: one unit is one row of the derived table,
whatever ``max_groups`` and ``max_rows_per_group`` say -- 3 and 4 here). Released with discrete
Laplace noise of scale 1/epsilon, split at 10.5 the two buckets have loss exactly epsilon. The
same harness with a sampler halving every scale (a claimed sensitivity of 1/2) reports 2 epsilon
and is caught. The exact read runs once per file and is replayed (``ReplayBackend``, as
``dpsql audit`` does): every run plans, draws, post-processes and releases through the Session.

False failures: ALPHA = 1e-6 per assertion (Bonferroni over the buckets inside the harness).
Caught: the halved loss is 2 per bucket against a threshold epsilon + margin ~1.5 at N = 1000
runs per world (as test_units_engine.py's R2T case): a miss is ~5 standard errors away.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.backends.replay import ReplayBackend
from dpsql.session import Session
from tests.statistical.privacy_loss import empirical_privacy_loss
from tests.statistical.test_units_engine import HalvedScale
from tests.units import tiny

EPSILON = 1.0
ALPHA = 1e-6
N = 1000
SQL = ("SELECT n, COUNT(*) AS k FROM (SELECT c.c_id, LEAST(COUNT(o.o_id), 5) AS n FROM customer c "
       "LEFT JOIN orders o ON o.o_cust = c.c_id GROUP BY c.c_id) d GROUP BY n")


def _shop() -> tiny.Database:
    customers = [(c, 1) for c in [*range(1, 21), 99]]
    owners = [c for c in range(1, 11) for _ in range(3)] + list(range(11, 21)) + [99] * 3
    orders = [(o, c, 1) for o, c in enumerate(owners, start=1)]
    return {"customer": customers, "orders": orders, "items": [], "regions": [(1,), (2,)]}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("units_derived")
    out = {}
    for name, db in (("d", _shop()), ("d_prime", tiny.remove_unit(_shop(), 99))):
        out[name] = tiny.write_file(folder / f"{name}.duckdb", db)
    return out


def _bin3(path, sampler=None) -> np.ndarray:
    md = tiny.metadata(max_groups=3, max_rows_per_group=4)
    inner = DuckDBBackend(path, md)
    engine = Session(md, ReplayBackend(inner), sampler=sampler)
    try:
        out = []
        for _ in range(N):
            rows = dict(engine.run(SQL, epsilon=EPSILON).rows)
            out.append(rows[3])
        return np.array(out, dtype=np.float64)
    finally:
        inner.close()


def test_the_setup_moves_bin_three_by_one(files):
    truth = {}
    for name, path in files.items():
        con = duckdb.connect(str(path), read_only=True)
        truth[name] = dict(con.execute(SQL).fetchall())[3]
        con.close()
    assert (truth["d_prime"], truth["d"]) == (10, 11)


@pytest.mark.parametrize(("sampler", "broken"), [(None, False), (HalvedScale(), True)],
                         ids=["secure", "halved"])
def test_one_unit_of_the_derived_table_costs_epsilon(files, sampler, broken):
    d, d_prime = _bin3(files["d"], sampler), _bin3(files["d_prime"], sampler)
    est = empirical_privacy_loss(d, d_prime, np.array([10.5]), min_count=40, alpha=ALPHA)
    assert est.buckets_used == 2, est
    if broken:
        assert not est.consistent_with(EPSILON), est
    else:
        assert est.consistent_with(EPSILON), est
        assert est.loss >= EPSILON - est.margin, est  # not vacuous: the move is visible
