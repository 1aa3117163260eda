"""The session passes each release's privacy curve to the ledger, whose budget filter charges it
(dpsql/session.py's hook, dpsql/accounting/curves.py and filters.py), on real DuckDB and a real
ledger file: what the curve is for Laplace, Gaussian and multi-release queries, and which
releases a Rényi budget refuses before anything is charged."""

from __future__ import annotations

import sqlite3

import pytest

from dpsql.accounting.curves import PrivacyCurve, pure_dp_rdp
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import BudgetExhaustedError, NotSupportedError
from dpsql.metadata import loads_metadata
from tests.db_files import writing
from tests.ledgers import ANALYST, DATABASE, charged, ledger_session
from tests.shop_fixture import ZeroNoise

METADATA = """\
tables:
  visits:
    columns:
      person: {max_freq: 3, type: INTEGER, releasable: true, partition_selection: true}
      spend: {bounds: [0, 100], type: DOUBLE}
      day: {releasable: true, type: INTEGER, domain: {values: [0, 1, 2]}}
  people:
    columns:
      person: {max_freq: 1, type: INTEGER}
"""


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    path = tmp_path_factory.mktemp("filters") / "visits.duckdb"
    with writing(path) as con:
        con.execute("""CREATE TABLE visits AS SELECT (i % 30)::INTEGER AS person,
                       (i % 50)::DOUBLE AS spend, (i % 3)::INTEGER AS day FROM range(70) r(i)""")
        con.execute("CREATE TABLE people AS SELECT i::INTEGER AS person FROM range(30) r(i)")
    return path


@pytest.fixture
def session(database, tmp_path):
    from dpsql.accounting import Ledger

    metadata = loads_metadata(METADATA)
    backend = DuckDBBackend(database, metadata)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    made = ledger_session(metadata, backend, ledger, sampler=ZeroNoise())
    yield made
    made.close()
    backend.close()
    ledger.close()


def curves(session) -> list[PrivacyCurve | None]:
    conn = sqlite3.connect(session.ledger.path)
    rows = conn.execute("SELECT curve FROM charges ORDER BY id").fetchall()
    conn.close()
    return [None if r[0] is None else PrivacyCurve.from_json(r[0]) for r in rows]


def test_laplace_releases_are_charged_by_their_curve(session):
    session.ledger.set_budget(DATABASE, ANALYST, 1.0, 1e-6, filter="renyi")
    session.run("SELECT day, COUNT(*), SUM(spend) FROM visits GROUP BY day", epsilon=0.2)
    (curve,) = curves(session)
    assert curve is not None
    assert curve.at(22.0) == pytest.approx(min(2 * pure_dp_rdp(22.0, 0.1),
                                               pure_dp_rdp(22.0, 0.2)), rel=1e-8)
    status = session.ledger.status(DATABASE, ANALYST)
    assert status.filter_spent == curve.at(22.0)
    # a multi-release query: one charge, one curve over every release's measurements
    session.run("SELECT COUNT(*) FROM visits WHERE spend > (SELECT AVG(spend) FROM visits)",
                epsilon=0.3)
    last = curves(session)[-1]
    assert last is not None and last.at(2.0) == pytest.approx(
        min(3 * pure_dp_rdp(2.0, 0.1), pure_dp_rdp(2.0, 0.3)), rel=1e-8)


def test_releases_without_a_curve_are_refused_before_the_charge(session):
    session.ledger.set_budget(DATABASE, ANALYST, 1.0, 1e-6, filter="renyi")
    for sql in ("SELECT COUNT(*) FROM visits v JOIN people p ON v.person = p.person",
                "SELECT person, COUNT(*) FROM visits GROUP BY person"):
        with pytest.raises(NotSupportedError, match="Nothing was charged"):
            session.run(sql, epsilon=0.1, delta=1e-7)
    assert charged(session) == []
    session.ledger.set_budget(DATABASE, ANALYST, 1.0, 1e-6)  # basic takes them, curve NULL
    session.run("SELECT COUNT(*) FROM visits v JOIN people p ON v.person = p.person",
                epsilon=0.1, delta=1e-7)
    assert curves(session) == [None]


def test_gaussian_releases_under_the_zcdp_filter(session):
    session.ledger.set_budget(DATABASE, ANALYST, 1.0, 1e-6, filter="zcdp")
    result = session.run("SELECT COUNT(*) FROM visits", epsilon=0.5, delta=1e-7,
                         mechanism="gaussian")
    (curve,) = curves(session)
    assert curve is not None
    sigma = result.release.columns[0].sigma
    assert curve.rho == pytest.approx(1 / (2 * sigma ** 2), rel=1e-8)  # a count moves by 1
    with pytest.raises(BudgetExhaustedError, match="zCDP filter"):
        for _ in range(100):
            session.run("SELECT COUNT(*) FROM visits WHERE spend > ?", [float(_)],
                        epsilon=0.5, delta=1e-7, mechanism="gaussian")


def test_the_release_record_carries_the_curves_rho(session):
    session.ledger.set_budget(DATABASE, ANALYST, 1.0, 1e-6)
    result = session.run("SELECT COUNT(*), SUM(spend) FROM visits", epsilon=0.4)
    assert result.release.rho == pytest.approx(2 * 0.2 ** 2 / 2, rel=1e-8)
    (curve,) = curves(session)
    assert curve is not None and result.release.rho == curve.rho
    again = session.run("SELECT COUNT(*), SUM(spend) FROM visits", epsilon=0.4)  # cached
    assert again.release.cached and again.release.rho == result.release.rho
    joined = session.run("SELECT COUNT(*) FROM visits v JOIN people p ON v.person = p.person",
                         epsilon=0.1, delta=1e-7)
    assert joined.release.rho is None
