"""The Gaussian mechanism through the session, a real ledger and DuckDB: what the record says,
what the ledger charges, what is refused (before the charge) and what is cached apart."""

from __future__ import annotations

import math

import pytest

import dpsql
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget import Budget
from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.metadata import loads_metadata
from dpsql.noise import gaussian
from dpsql.noise.plan import plan_noise
from tests.db_files import writing
from tests.ledgers import charged, ledger_session, open_ledger
from tests.shop_fixture import ZeroNoise

METADATA = """\
tables:
  visits:
    columns:
      person: {max_freq: 3, type: INTEGER, releasable: true, partition_selection: true}
      spend: {bounds: [0, 100], type: DOUBLE}
      day: {releasable: true, type: INTEGER, domain: {values: [0, 1, 2, 3, 4, 5, 6]}}
"""


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    path = tmp_path_factory.mktemp("gaussian") / "visits.duckdb"
    with writing(path) as con:
        con.execute("""CREATE TABLE visits AS SELECT (i % 300)::INTEGER AS person,
                       (i % 50)::DOUBLE + 0.3 AS spend, (i % 7)::INTEGER AS day
                       FROM range(700) r(i)""")
    return path


@pytest.fixture
def make_session(database, tmp_path):
    opened = []

    def make(sampler=None):
        metadata = loads_metadata(METADATA)
        backend = DuckDBBackend(database, metadata)
        ledger = open_ledger(tmp_path / f"ledger{len(opened)}.sqlite", epsilon=10.0, delta=1e-3)
        opened.append((backend, ledger))
        return ledger_session(metadata, backend, ledger, sampler=sampler)

    yield make
    for backend, ledger in opened:
        backend.close()
        ledger.close()


def test_record_and_charge_of_a_gaussian_histogram(make_session):
    session = make_session(ZeroNoise())
    sql = "SELECT day, COUNT(*) AS n, SUM(spend) AS s FROM visits GROUP BY day"
    result = session.run(sql, epsilon=1.0, delta=1e-6, mechanism="gaussian")
    assert [r[1] for r in result.rows] == [100] * 7  # noise off: the exact counts
    release = result.release
    assert (release.epsilon, release.delta) == (1.0, 1e-6)
    assert release.mechanism == "discrete_gaussian+snapped_gaussian"
    _, n, s = release.columns
    sigma = gaussian.discrete_sigma(2, 1, 0.5, 5e-7)  # histogram: l2^2 = 2 S^2
    assert (n.mechanism, n.calibration, n.sigma) == ("discrete_gaussian", "analytic", sigma)
    assert (n.epsilon, n.delta) == (0.5, 5e-7)
    assert n.accuracy_beta == 0.05
    assert n.accuracy_alpha == pytest.approx(sigma * math.sqrt(2 * math.log(2 / 0.05)))
    assert n.half_width_95 == pytest.approx(sigma * math.sqrt(2 * math.log(2 * 7 / 0.05)))
    (plan,) = [p for p in plan_noise(session.prepare(sql).analysis,
                                     Budget(1.0, 1e-6, "gaussian")) if p.granularity]
    assert s.mechanism == "snapped_gaussian" and s.sigma == plan.sigma * plan.granularity
    assert s.half_width_95 > s.accuracy_alpha > s.sigma
    (charge,) = charged(session)
    assert (charge.epsilon, charge.delta, charge.mechanism) == (
        1.0, 1e-6, "discrete_gaussian+snapped_gaussian")


def test_secure_gaussian_sums_are_on_the_grid(make_session):
    session = make_session()
    sql = "SELECT day, SUM(spend) AS s FROM visits GROUP BY day"
    result = session.run(sql, epsilon=1.0, delta=1e-6, mechanism="gaussian")
    (plan,) = plan_noise(session.prepare(sql).analysis, Budget(1.0, 1e-6, "gaussian"))
    g = plan.granularity
    assert g is not None
    assert all(r[1] / g == math.floor(r[1] / g) for r in result.rows)


@pytest.mark.parametrize("sql, kwargs, error, message", [
    ("SELECT COUNT(*) FROM visits", {"delta": 0.0}, NotSupportedError, "delta > 0"),
    ("SELECT COUNT(*) FROM visits a JOIN visits b ON a.person = b.person", {},
     NotSupportedError, "joins private tables"),
    ("SELECT COUNT(*) FROM visits", {"calibration": "classical"}, NotSupportedError,
     "epsilon < 1"),
    ("SELECT COUNT(*) FROM visits", {"mechanism": "gauss"}, ProgrammingError, "mechanism"),
    ("SELECT COUNT(*) FROM visits", {"calibration": "exact"}, ProgrammingError, "calibration"),
    # partition selection's threshold is proved for Laplace noise: not silently Laplace
    ("SELECT person, COUNT(*) FROM visits GROUP BY person", {}, NotSupportedError,
     "mechanism='laplace'"),
])
def test_refusals_charge_nothing(make_session, sql, kwargs, error, message):
    session = make_session()
    args = {"epsilon": 1.0, "delta": 1e-6, "mechanism": "gaussian", **kwargs}
    with pytest.raises(error, match=message):
        session.run(sql, **args)
    assert charged(session) == []


def test_classical_calibration_below_one(make_session):
    session = make_session(ZeroNoise())
    result = session.run("SELECT COUNT(*) AS n FROM visits", epsilon=0.5, delta=1e-6,
                         mechanism="gaussian", calibration="classical")
    (col,) = result.release.columns
    assert col.calibration == "classical"
    assert col.sigma == pytest.approx(math.sqrt(2 * math.log(1.25e6)) / 0.5)


def test_gaussian_and_laplace_answers_are_cached_apart(make_session):
    session = make_session(ZeroNoise())
    sql = "SELECT COUNT(*) AS n FROM visits"
    session.run(sql, epsilon=0.5, delta=1e-6)
    gaussian_answer = session.run(sql, epsilon=0.5, delta=1e-6, mechanism="gaussian")
    assert not gaussian_answer.release.cached
    assert gaussian_answer.release.mechanism == "discrete_gaussian"
    again = session.run(sql, epsilon=0.5, delta=1e-6, mechanism="gaussian")
    assert again.release.cached and again.release.mechanism == "discrete_gaussian"
    assert again.release.columns[0].sigma == gaussian_answer.release.columns[0].sigma
    laplace_again = session.run(sql, epsilon=0.5, delta=1e-6)
    assert laplace_again.release.cached and laplace_again.release.mechanism == "discrete_laplace"
    assert [c.mechanism for c in charged(session)] == ["discrete_laplace", "discrete_gaussian"]


def test_connection_default_and_per_query_override(database):
    conn = dpsql.connect(str(database), loads_metadata(METADATA), analyst="a", ledger=None,
                         epsilon=1.0, delta=1e-6, mechanism="gaussian")
    try:
        cur = conn.execute("SELECT COUNT(*) FROM visits")
        assert cur.release.mechanism == "discrete_gaussian"
        cur = conn.execute("SELECT COUNT(*) FROM visits", mechanism="laplace")
        assert cur.release.mechanism == "discrete_laplace"
        with pytest.raises(NotSupportedError, match="delta > 0"):
            conn.execute("SELECT COUNT(*) FROM visits", delta=0.0)
    finally:
        conn.close()
    with pytest.raises(ProgrammingError, match="mechanism"):
        dpsql.connect(str(database), loads_metadata(METADATA), analyst="a", ledger=None,
                      mechanism="laplacian")


def test_a_query_of_several_releases_splits_epsilon_and_delta(make_session):
    session = make_session(ZeroNoise())
    sql = ("WITH t AS (SELECT day, COUNT(*) AS n FROM visits GROUP BY day) "
           "SELECT day, n FROM t WHERE n > (SELECT COUNT(*) FROM visits) / 10")
    result = session.run(sql, epsilon=1.0, delta=1e-6, mechanism="gaussian")
    by_name = {c.name: c for c in result.release.columns}
    scalar, bins = by_name["subquery1._col_0"], by_name["t.n"]
    assert (scalar.epsilon, scalar.delta, bins.epsilon, bins.delta) == (0.5, 5e-7, 0.5, 5e-7)
    assert scalar.sigma == gaussian.discrete_sigma(1, 1, 0.5, 5e-7)
    assert bins.sigma == gaussian.discrete_sigma(2, 1, 0.5, 5e-7)
    (charge,) = charged(session)
    assert (charge.epsilon, charge.delta) == (1.0, 1e-6)
    with pytest.raises(NotSupportedError, match="delta > 0"):
        session.run(sql, epsilon=1.0, delta=0.0, mechanism="gaussian")
    assert len(charged(session)) == 1
