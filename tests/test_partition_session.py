"""The session's single-release path with a partition-selected key, on a real DuckDB file and a
real ledger: one charge of the whole (epsilon, delta), refusals before it, the audit log and the
answer cache, and the record's selection fields (dpsql/session.py, dpsql/noise/partition.py)."""

from __future__ import annotations

import pytest

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import NotSupportedError, ProtectedBinError
from dpsql.metadata import loads_metadata
from tests.db_files import writing
from tests.ledgers import charged, ledger_session, open_ledger
from tests.shop_fixture import ZeroNoise

METADATA = loads_metadata("""
tables:
  visits:
    columns:
      person: {max_freq: 1, type: INTEGER}
      city: {max_freq: 200, releasable: true, partition_selection: true, type: VARCHAR}
      spend: {bounds: [0, 100], type: DOUBLE}
""")

SQL = "SELECT city, COUNT(*) AS n, SUM(spend) AS s FROM visits GROUP BY city ORDER BY city"


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    path = tmp_path_factory.mktemp("partition_session") / "visits.duckdb"
    with writing(path) as con:
        # big: 200 rows each; rare: 1 row
        con.execute("""CREATE TABLE visits AS SELECT i::INTEGER AS person,
                       CASE WHEN i < 200 THEN 'big' WHEN i < 400 THEN 'also' ELSE 'rare' END
                       AS city,
                       (i % 50)::DOUBLE AS spend FROM range(401) r(i)""")
    return path


@pytest.fixture
def backend(database):
    backend = DuckDBBackend(database, METADATA)
    yield backend
    backend.close()


def test_one_charge_of_the_whole_budget_audited_and_cached(backend, tmp_path):
    with open_ledger(tmp_path / "ledger.sqlite") as ledger:
        session = ledger_session(METADATA, backend, ledger, sampler=ZeroNoise())
        result = session.run(SQL, epsilon=0.9, delta=1e-6)
        assert [r[0] for r in result.rows] == ["also", "big"]  # 'rare' (1 row) is not kept
        assert [r[1] for r in result.rows] == [200, 200]
        (charge,) = charged(session)
        assert charge.epsilon == pytest.approx(0.9) and charge.delta == pytest.approx(1e-6)
        rel = result.release
        # the COUNT(*) shares the selection's noisy counts: one share of 0.9 / 2, charged once
        assert rel.selection_epsilon == pytest.approx(0.45) and rel.selection_delta == 1e-6
        assert rel.selection_threshold is not None and rel.selection_threshold > 1
        (entry,) = ledger.audit()
        assert entry.released["rows"] == [list(r) for r in result.rows]
        again = session.run(SQL, epsilon=0.9, delta=1e-6)
        assert again.rows == result.rows and again.release.cached
        assert again.release.selection_threshold == rel.selection_threshold
        assert len(charged(session)) == 1


@pytest.mark.parametrize(("sql", "delta", "error", "match"), [
    (SQL, 0.0, NotSupportedError, "delta > 0"),
    ("SELECT v.city, COUNT(*) FROM visits v JOIN visits w ON v.person = w.person "
     "GROUP BY v.city", 1e-6, ProtectedBinError, "joins private tables"),
])
def test_refusals_charge_nothing(backend, tmp_path, sql, delta, error, match):
    with open_ledger(tmp_path / "ledger.sqlite") as ledger:
        session = ledger_session(METADATA, backend, ledger)
        with pytest.raises(error, match=match):
            session.run(sql, epsilon=1.0, delta=delta)
        assert charged(session) == []


def test_production_noise_keeps_big_groups_and_never_invents_one(backend):
    from dpsql.session import Session

    session = Session(METADATA, backend)
    for _ in range(20):
        rows = session.run(SQL, epsilon=1.0, delta=1e-6).rows
        assert {r[0] for r in rows} <= {"big", "also", "rare"}
        # tau 30 at eps 1/2, scale 4: a group of 200 is dropped w.p. < e^-40
        assert {"big", "also"} <= {r[0] for r in rows}


class PlusThree:
    """Noise +3 on every draw, recording each request's size."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def discrete_laplace(self, scale: float, size: int):
        import numpy as np

        self.sizes.append(size)
        return np.full(size, 3, dtype=np.int64)


def test_the_count_released_is_the_selections_noisy_count(backend):
    """COUNT(*) shares the selection's draw: one draw over every group (3 here) for both,
    then one for the SUM over the kept groups; the released count is the thresholded one."""
    from dpsql.session import Session

    sampler = PlusThree()
    result = Session(METADATA, backend, sampler=sampler).run(SQL, epsilon=1.0, delta=1e-6)
    assert [r[:2] for r in result.rows] == [("also", 203), ("big", 203)]
    assert sampler.sizes[0] == 3  # the selection: every non-empty group, 'rare' included
    assert len(sampler.sizes) == 2  # and the SUM's draw (over the kept groups); no other
