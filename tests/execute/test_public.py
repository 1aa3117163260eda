"""dpsql.execute.public: a query of public tables only that the private pipeline refuses (no
bounds, MIN / MAX beside COUNT, a public scalar subquery) runs as written -- exact, free, no
epsilon needed (QA round 7: the README promised it, the pipeline refused them). A query that
reads any private table keeps its refusal, whatever the data."""

from __future__ import annotations

import pytest

from dpsql.errors import (
    MissingMetricError,
    ProgrammingError,
    UnsupportedConstructError,
    UnsupportedQueryError,
)
from dpsql.metadata import loads_metadata
from tests.db_files import writing
from tests.ledgers import charged, ledger_session, open_ledger
from tests.recording import RecordingDuckDBBackend
from tests.shop_fixture import ZeroNoise

METADATA = loads_metadata("""
tables:
  visits:
    columns:
      region: {type: VARCHAR, max_freq: 3}
      spend: {bounds: [0, 100], type: DOUBLE}
  regions:
    public: true
    columns:
      region: {type: VARCHAR}
      population: {type: INTEGER}
""")


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    path = tmp_path_factory.mktemp("public") / "db.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE visits AS SELECT * FROM (VALUES ('north', 5.0::DOUBLE), "
                    "('south', 7.0::DOUBLE)) v(region, spend)")
        con.execute("CREATE TABLE regions AS SELECT * FROM (VALUES ('north', 10), "
                    "('south', 32), ('east', NULL)) v(region, population)")
    return path


@pytest.fixture
def session(database, tmp_path):
    backend = RecordingDuckDBBackend(database, METADATA)
    ledger = open_ledger(tmp_path / "ledger.sqlite", epsilon=10.0, delta=1e-3)
    yield ledger_session(METADATA, backend, ledger, sampler=ZeroNoise())
    backend.close()
    ledger.close()


@pytest.mark.parametrize(("sql", "params", "rows"), [
    ("SELECT AVG(population) AS a FROM regions", [], [(21.0,)]),  # no bounds declared
    ("SELECT MAX(population) AS m, COUNT(*) AS n FROM regions", [], [(32, 3)]),
    ("SELECT region, MIN(population) AS m FROM regions WHERE population > ? GROUP BY region "
     "ORDER BY region", [0], [("north", 10), ("south", 32)]),
    ("SELECT (SELECT MAX(population) FROM regions) AS m", [], [(32,)]),
    ("SELECT region FROM regions ORDER BY region LIMIT 1", [], [("east",)]),
])
def test_a_refused_public_query_is_answered_exactly_for_free(session, sql, params, rows):
    result = session.run(sql, params)  # no epsilon: nothing is spent
    assert result.rows == rows
    assert result.release.free and (result.release.epsilon, result.release.delta) == (0, 0)
    assert charged(session) == []


def test_the_names_and_types_are_the_databases(session):
    result = session.run("SELECT AVG(population) AS a, MAX(region) AS r FROM regions")
    assert result.names == ("a", "r") and result.types == ("DOUBLE", "VARCHAR")


def test_what_the_pipeline_answers_is_unchanged(session):
    # accepted by the private pipeline (public, exact): it still answers it, as before
    assert session.prepare("SELECT COUNT(*) AS n FROM regions").__class__.__name__ == "Prepared"


@pytest.mark.parametrize(("sql", "error"), [
    # a private table anywhere: the private pipeline's own refusal, unchanged
    ("SELECT MAX(v.spend) AS m, COUNT(*) AS n FROM visits v", UnsupportedQueryError),
    ("SELECT AVG(r.population) AS a FROM regions r JOIN visits v ON v.region = r.region",
     MissingMetricError),
    ("SELECT (SELECT MAX(spend) FROM visits) AS m", UnsupportedConstructError),
    # the allow-list and name hygiene still apply to public queries
    ("SELECT COUNT(*) FROM read_csv('/etc/passwd')", UnsupportedConstructError),
    ("WITH regions AS (SELECT * FROM visits) SELECT MAX(spend) FROM regions",
     ProgrammingError),
    ("SELECT random() FROM regions", UnsupportedConstructError),
])
def test_a_query_reading_a_private_table_keeps_its_refusal(session, sql, error):
    with pytest.raises(error):
        session.run(sql, epsilon=1.0)
    assert charged(session) == [] and session.backend.executed == []


def test_parameters_are_counted(session):
    with pytest.raises(ProgrammingError, match="1 parameter marker"):
        session.run("SELECT MAX(population) FROM regions WHERE region = ?", [])


@pytest.mark.spark
def test_the_public_path_runs_on_spark_too(spark, database, tmp_path):
    # compiled by the Spark backend (DuckDB SQL translated), parameters bound there
    from dpsql.backends.spark import SparkBackend
    from dpsql.session import Session
    from tests.recording import export_parquet, with_sources

    backend = SparkBackend(with_sources(METADATA, export_parquet(database, tmp_path / "pq")),
                           spark)
    try:
        session = Session(METADATA, backend, sampler=ZeroNoise())
        result = session.run("SELECT MAX(population) AS m, COUNT(*) AS n FROM regions "
                             "WHERE population > ?", [0])
        assert result.rows == [(32, 2)] and result.release.free
        with pytest.raises(UnsupportedQueryError):  # a private table keeps its refusal
            session.run("SELECT MAX(v.spend) AS m, COUNT(*) AS n FROM visits v", epsilon=1.0)
    finally:
        backend.close()
