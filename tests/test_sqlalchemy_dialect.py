"""dpsql/sqlalchemy_dialect.py: ``create_engine("dpsql:///...")`` in-process, pandas.read_sql
with no warning (plain, with parameters, with chunksize), reflection from the metadata, and
the URL's rules (its keys, the ledger, a host refused with the advice to use the server).

Real DuckDB files and a real ledger file; no mocks.
"""

from __future__ import annotations

import warnings
from decimal import Decimal

import pytest

from dpsql.accounting import Ledger
from dpsql.errors import UnsupportedQueryError
from tests.analyst_world import EXACT, build


# Imported by fixtures, not at collection: every worker collects this module, one runs it
# (tests/conftest.py, ONE_WORKER_MODULES), and the two imports are ~0.6 CPU-s.
@pytest.fixture(scope="module")
def sqlalchemy():
    return pytest.importorskip("sqlalchemy")


@pytest.fixture(scope="module")
def pd():
    return pytest.importorskip("pandas")

BY_G = "SELECT g, COUNT(*) AS n, SUM(i) AS si, SUM(d) AS sd FROM t GROUP BY g ORDER BY g"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build(tmp_path_factory.mktemp("sqlalchemy"))


def url(db, md, **query) -> str:
    params = {"metadata": str(md), "analyst": "alice", **query}
    text = "&".join(f"{k}={v}" for k, v in params.items())
    return f"dpsql:///{db}?{text}"


@pytest.fixture(scope="module")
def engine(world, sqlalchemy):
    db, md = world
    engine = sqlalchemy.create_engine(url(db, md, no_ledger="true", epsilon=EXACT))
    yield engine
    engine.dispose()


@pytest.fixture(autouse=True)
def _warnings_are_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def test_pandas_read_sql_on_an_engine_gives_typed_columns_without_warning(engine, pd):
    frame = pd.read_sql(BY_G, engine)
    assert list(frame.columns) == ["g", "n", "si", "sd"]
    assert frame["g"].tolist() == ["a", "b", "empty"]
    assert frame["n"].tolist() == [2, 1, 0]
    assert str(frame["n"].dtype) == "int64" and str(frame["si"].dtype) == "int64"
    assert str(frame["sd"].dtype) == "float64"  # pandas' coerce_float=True, its default
    exact = pd.read_sql(BY_G, engine, coerce_float=False)
    assert all(isinstance(v, Decimal) and v.as_tuple().exponent == -2 for v in exact["sd"])


def test_read_sql_with_qmark_parameters_and_with_text_parameters(engine, sqlalchemy, pd):
    sql = "SELECT COUNT(*) AS n FROM t WHERE i >= ?"
    assert pd.read_sql(sql, engine, params=(4,))["n"].tolist() == [2]
    text = sqlalchemy.text("SELECT COUNT(*) AS n FROM t WHERE i >= :low")
    assert pd.read_sql(text, engine, params={"low": 5})["n"].tolist() == [1]


def test_read_sql_in_chunks(engine, pd):
    chunks = list(pd.read_sql(BY_G, engine, chunksize=2))
    assert [len(c) for c in chunks] == [2, 1]
    assert pd.concat(chunks)["g"].tolist() == ["a", "b", "empty"]


def test_reflection_answers_from_the_metadata(engine, sqlalchemy):
    inspector = sqlalchemy.inspect(engine)
    assert inspector.get_table_names() == ["t"]
    assert inspector.has_table("t") and not inspector.has_table("SELECT 1")
    columns = {c["name"]: c["type"] for c in inspector.get_columns("t")}
    assert list(columns) == ["g", "i", "d", "x"]
    assert isinstance(columns["g"], sqlalchemy.String)
    assert isinstance(columns["i"], sqlalchemy.Integer)
    assert isinstance(columns["d"], sqlalchemy.Numeric)
    assert (columns["d"].precision, columns["d"].scale) == (15, 2)
    assert isinstance(columns["x"], sqlalchemy.Float)
    assert inspector.get_pk_constraint("t")["constrained_columns"] == []
    assert inspector.get_foreign_keys("t") == [] and inspector.get_indexes("t") == []
    with pytest.raises(sqlalchemy.exc.NoSuchTableError):
        inspector.get_columns("nope")
    meta = sqlalchemy.MetaData()
    meta.reflect(engine)
    assert list(meta.tables) == ["t"]


def test_sqlalchemy_core_select_compiles_to_dpsql(engine, sqlalchemy):
    meta = sqlalchemy.MetaData()
    t = sqlalchemy.Table("t", meta, autoload_with=engine)
    query = (sqlalchemy.select(t.c.g, sqlalchemy.func.count().label("n"))
             .where(t.c.i >= 4).group_by(t.c.g).order_by(t.c.g))
    with engine.connect() as conn:
        assert conn.execute(query).all() == [("a", 1), ("b", 1), ("empty", 0)]


def test_the_engine_charges_the_ledger_and_caches(world, tmp_path, sqlalchemy, pd):
    db, md = world
    ledger_path = tmp_path / "ledger.sqlite"
    with Ledger(ledger_path, create=True) as ledger:
        from dpsql.backends import ledger_identity
        from dpsql.metadata import load_metadata

        database = ledger_identity("duckdb", db, load_metadata(md))
        ledger.set_budget(database, "alice", 10.0, 0.0)
    engine = sqlalchemy.create_engine(url(db, md, ledger=ledger_path, epsilon=0.5))
    try:
        first = pd.read_sql("SELECT COUNT(*) AS n FROM t", engine)
        again = pd.read_sql("SELECT COUNT(*) AS n FROM t", engine)  # cached: free
        assert first.equals(again)
    finally:
        engine.dispose()
    with Ledger(ledger_path) as ledger:
        status = ledger.status(database, "alice")
    assert status.epsilon_spent == pytest.approx(0.5)


def test_url_without_a_ledger_choice_is_refused_by_dpsql(world, sqlalchemy):
    db, md = world
    engine = sqlalchemy.create_engine(url(db, md))
    try:
        with pytest.raises(sqlalchemy.exc.ProgrammingError, match="no privacy ledger"), \
                engine.connect():
            pass
    finally:
        engine.dispose()


@pytest.mark.parametrize(("bad", "message"), [
    ("dpsql://alice@host:5433/shop", "postgresql\\+psycopg"),
    ("dpsql:///x.duckdb?metadata=m.yaml&analyst=a&epsilon=lots", "not a number"),
    ("dpsql:///x.duckdb?metadata=m.yaml&analyst=a&no_ledger=maybe", "true or false"),
    ("dpsql:///x.duckdb?metadata=m.yaml&analyst=a&colour=red", "unknown key 'colour'"),
    ("dpsql:///x.duckdb?metadata=m.yaml&analyst=a&ledger=l.sqlite&no_ledger=1", "give one"),
])
def test_bad_urls_say_what_to_change(bad, message, sqlalchemy):
    with pytest.raises(sqlalchemy.exc.ArgumentError, match=message):
        sqlalchemy.create_engine(bad)


def test_connect_kwargs_from_the_url(world, sqlalchemy):
    from dpsql.sqlalchemy_dialect import connect_kwargs

    db, md = world
    got = connect_kwargs(sqlalchemy.engine.make_url(
        url(db, md, epsilon="0.5", delta="1e-8", raw_counts="true", mechanism="gaussian",
            no_ledger="yes")))
    assert got == {"database": str(db), "metadata": str(md), "analyst": "alice",
                   "epsilon": 0.5, "delta": 1e-8, "raw_counts": True, "mechanism": "gaussian",
                   "ledger": None}
    memory = connect_kwargs(sqlalchemy.engine.make_url("dpsql://?metadata=m.yaml&analyst=a"))
    assert memory["database"] is None


def test_raw_counts_reaches_the_connection(world, sqlalchemy):
    db, md = world
    engine = sqlalchemy.create_engine(url(db, md, no_ledger="1", raw_counts="true",
                                          epsilon=EXACT))
    try:
        with engine.connect() as conn:
            assert conn.connection.dbapi_connection.raw_counts is True
    finally:
        engine.dispose()


def test_dpsql_errors_arrive_as_sqlalchemy_wrapped_dbapi_errors(engine, sqlalchemy):
    with pytest.raises(sqlalchemy.exc.DBAPIError) as info, engine.connect() as conn:
        conn.exec_driver_sql("SELECT * FROM t")
    assert isinstance(info.value, sqlalchemy.exc.NotSupportedError)
    assert isinstance(info.value.orig, UnsupportedQueryError)
    assert "aggregate queries only" in str(info.value.orig)
