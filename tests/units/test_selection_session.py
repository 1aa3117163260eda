"""Partition selection under a privacy unit through the whole session (real DuckDB file, real
ledger): noise off, the release is the SQL's groups with at least tau distinct units, the
record names the unit, the threshold and the charge; refusals come before the charge; explain
shows the unit relation's threshold and retention."""

from __future__ import annotations

import duckdb
import pytest

from dpsql.analysis.explain import explain
from dpsql.errors import NotSupportedError
from dpsql.metadata import Metadata, loads_metadata
from dpsql.noise import optimal_partition, unit_partition
from tests.db_files import writing
from tests.ledgers import charged, ledger_session, open_ledger
from tests.shop_fixture import ZeroNoise


def _metadata(kappa: int = 1, c: int = 1) -> Metadata:
    return loads_metadata(f"""
privacy_unit: {{table: people, column: pid, max_contribution: 8, max_groups: {kappa},
               max_rows_per_group: {c}}}
tables:
  people:
    columns:
      pid: {{type: INTEGER}}
  visits:
    unit: v_pid
    columns:
      v_pid: {{type: INTEGER}}
      city: {{type: VARCHAR, releasable: true, partition_selection: true}}
      amount: {{type: INTEGER, bounds: [0, 10]}}
""")


#: (city, units): each unit visits one city twice (amount 3 and 4); "rare" cities have fewer
#: units than any threshold below
CITIES = [("big", 60), ("mid", 30), ("edge", 13), ("rare", 3), ("one", 1)]


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    path = tmp_path_factory.mktemp("unit_selection") / "v.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE people (pid INTEGER)")
        con.execute("CREATE TABLE visits (v_pid INTEGER, city VARCHAR, amount INTEGER)")
        pid = 0
        for city, units in CITIES:
            for _ in range(units):
                pid += 1
                con.execute("INSERT INTO people VALUES (?)", [pid])
                con.executemany("INSERT INTO visits VALUES (?, ?, ?)",
                                [[pid, city, 3], [pid, city, 4]])
    return path


@pytest.fixture
def session_of(database, tmp_path, make_backend):
    """Sessions on DuckDB and on Spark (the two-stage's window and hash run on the backend)."""
    made = []

    def make(md: Metadata):
        backend = make_backend(database, md)
        ledger = open_ledger(tmp_path / f"ledger{len(made)}.sqlite", epsilon=10.0, delta=1e-3)
        made.append((backend, ledger))
        return ledger_session(md, backend, ledger, sampler=ZeroNoise())

    yield make
    for backend, ledger in made:
        backend.close()
        ledger.close()


def _sql(database, sql: str) -> list[tuple]:
    con = duckdb.connect(str(database), read_only=True)
    try:
        return sorted(con.execute(sql).fetchall())
    finally:
        con.close()


def test_histogram_is_the_groups_with_tau_units_and_the_count_is_shared(session_of, database):
    session = session_of(_metadata())
    result = session.run("SELECT city, COUNT(*) AS n FROM visits GROUP BY city",
                         epsilon=1.0, delta=1e-5)
    tau = unit_partition.threshold(1, 1.0, 1e-5)
    assert tau == 13
    # C = 1: the COUNT(*) is each city's number of units, released as the selection's count
    assert sorted(result.rows) == _sql(
        database, f"SELECT city, COUNT(DISTINCT v_pid) FROM visits GROUP BY city "
                  f"HAVING COUNT(DISTINCT v_pid) >= {tau}")
    record = result.release
    assert record.privacy_unit == "people.pid"
    assert record.selection_threshold == tau
    assert record.selection_mechanism == "laplace_thresholding"  # the shared COUNT(*)
    assert (record.epsilon, record.delta) == (1.0, 1e-5)  # the selection shares the COUNT's
    assert "partition_selection" in record.mechanism
    (charge,) = charged(session)
    assert (charge.epsilon, charge.delta) == (1.0, 1e-5)


def test_a_sum_with_c_2_is_the_sql_over_the_kept_groups(session_of, database):
    session = session_of(_metadata(kappa=2, c=2))
    result = session.run("SELECT city, SUM(amount) AS s FROM visits GROUP BY city",
                         epsilon=1.0, delta=1e-5)
    # the selection gets eps/2 (no shared COUNT): kappa 2, b = 4
    tau = unit_partition.threshold(2, 0.5, 1e-5)
    assert result.release.selection_threshold == tau
    assert result.release.selection_epsilon == 0.5
    assert sorted(result.rows) == _sql(
        database, f"SELECT city, SUM(amount) FROM visits GROUP BY city "
                  f"HAVING COUNT(DISTINCT v_pid) >= {tau}")


def test_key_only_releases_the_selected_keys(session_of, database):
    """kappa = 1, no COUNT(*) released: the optimal mechanism (noise off: the test words are
    U = 1/2, so a group is kept iff pi(n) > 1/2, n >= 12 at eps 1, delta 1e-5)."""
    session = session_of(_metadata())
    result = session.run("SELECT DISTINCT city FROM visits", epsilon=1.0, delta=1e-5)
    assert sorted(result.rows) == [("big",), ("edge",), ("mid",)]
    record = result.release
    assert record.selection_epsilon == 1.0 and record.selection_delta == 1e-5
    assert record.selection_mechanism == optimal_partition.MECHANISM
    assert record.selection_threshold is None
    assert (record.epsilon, record.delta) == (1.0, 1e-5)
    assert "partition_selection" in record.mechanism
    (charge,) = charged(session)
    assert (charge.epsilon, charge.delta) == (1.0, 1e-5)


def test_a_sum_at_kappa_1_is_selected_by_the_optimal_mechanism(session_of, database):
    session = session_of(_metadata())
    result = session.run("SELECT city, SUM(amount) AS s FROM visits GROUP BY city",
                         epsilon=1.0, delta=1e-5)
    record = result.release
    assert record.selection_mechanism == optimal_partition.MECHANISM
    assert record.selection_epsilon == 0.5  # one share of the even split, as thresholding
    table = optimal_partition.keep_table(0.5, 1e-5)
    assert table is not None
    least = next(n for n, p in enumerate(table) if p > 0.5)  # the median decision
    assert sorted(result.rows) == _sql(
        database, f"SELECT city, SUM(amount) FROM visits GROUP BY city "
                  f"HAVING COUNT(DISTINCT v_pid) >= {least}")


def test_refusals_come_before_any_charge(session_of, backend_name):
    if backend_name != "duckdb":
        pytest.skip("refusals come before the backend")
    session = session_of(_metadata())
    with pytest.raises(NotSupportedError, match="delta > 0"):
        session.run("SELECT city, COUNT(*) FROM visits GROUP BY city", epsilon=1.0, delta=0.0)
    with pytest.raises(NotSupportedError, match="mechanism='laplace'"):
        session.run("SELECT city, COUNT(*) FROM visits GROUP BY city", epsilon=1.0,
                    delta=1e-5, mechanism="gaussian")
    assert charged(session) == []


def test_explain_shows_the_unit_relation_and_its_retention():
    report = explain("SELECT city, COUNT(*) FROM visits GROUP BY city", _metadata(kappa=2),
                     epsilon=1.0, delta=1e-5)
    selection = report["partition_selection"]
    assert selection["neighbours"] == unit_partition.UNIT_RELATION
    assert selection["threshold"] == unit_partition.threshold(2, 1.0, 1e-5) == 25
    assert selection["noise_scale"] == 2.0 and selection["stability"] == 2
    assert selection["shares_count_measurement"] == 0  # C = 1: the COUNT(*) is __n
    assert report["privacy_unit"]["mechanism"] == "two-stage"
    assert 0 < selection["keep_probability"][20] < selection["keep_probability"][50]
    from dpsql.analysis.explain import explain_text
    text = explain_text("SELECT city, COUNT(*) FROM visits GROUP BY city", _metadata(kappa=2),
                        epsilon=1.0, delta=1e-5)
    assert "number of kept units" in text and "threshold tau = 25" in text
    assert "P(a group of n units is kept)" in text
