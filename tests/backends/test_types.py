"""Column types filled from a real DuckDB database (dpsql.backends.types, Backend.table_schema),
and what that means for a query that joins keys of different types: rejected before anything
is charged or executed."""

from __future__ import annotations

import duckdb
import pytest

import dpsql
from dpsql.accounting import Ledger
from dpsql.analysis.explain import explain
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.backends.types import fill_column_types
from dpsql.errors import MissingMetricError, ProgrammingError
from dpsql.metadata import load_metadata, loads_metadata
from dpsql.session import Session
from tests.db_files import writing
from tests.ledgers import charged, ledger_session, open_ledger
from tests.recording import RecordingDuckDBBackend

UNTYPED = """
tables:
  a:
    columns:
      k: {max_freq: 1}
      n: {max_freq: 2}
  b:
    columns:
      k: {max_freq: 1}
      n: {max_freq: 3}
  ghost:
    columns:
      k: {max_freq: 1}
"""

JOIN_TEXT_INT = "SELECT COUNT(*) FROM a JOIN b ON a.k = b.k"
JOIN_INT_BIGINT = "SELECT COUNT(*) FROM a JOIN b ON a.n = b.n"


@pytest.fixture
def database(tmp_path):
    """a.k VARCHAR holds '1', '01', ' 1' (mf 1); b.k INTEGER; a.n INTEGER, b.n BIGINT."""
    path = tmp_path / "keys.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE a (k VARCHAR, n INTEGER)")
        con.execute("INSERT INTO a VALUES ('1', 1), ('01', 1), (' 1', 2)")
        con.execute("CREATE TABLE b (K INTEGER, n BIGINT)")  # upper-case column name on purpose
        con.execute("INSERT INTO b VALUES (1, 1), (2, 2), (3, 2)")
    return path


def test_table_schema_reads_duckdbs_types(database):
    backend = DuckDBBackend(database)
    try:
        assert backend.table_schema("a") == {"k": "VARCHAR", "n": "INTEGER"}
        assert backend.table_schema("b") == {"K": "INTEGER", "n": "BIGINT"}
        with pytest.raises(ProgrammingError, match="'ghost' is not in the database"):
            backend.table_schema("ghost")
    finally:
        backend.close()


def test_table_schemas_read_at_once_equal_each_table_schema(tmp_path):
    """One collation probe for every table gives what each table's own probe gives, a table
    the database lacks is None, and a view's expression collation is seen too."""
    path = tmp_path / "collated.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE a (k VARCHAR COLLATE nocase, n INTEGER, s VARCHAR)")
        con.execute("CREATE TABLE b (t VARCHAR COLLATE noaccent, u VARCHAR COLLATE nocase)")
        con.execute("CREATE TABLE c (x INTEGER)")
        con.execute("CREATE VIEW v AS SELECT s COLLATE nocase AS s FROM a")
    backend = DuckDBBackend(path)
    try:
        together = backend.table_schemas(["a", "b", "c", "v", "ghost"])
        assert together == {t: backend.table_schema(t) for t in ("a", "b", "c", "v")} | {
            "ghost": None}
        assert together["a"] == {"k": "VARCHAR COLLATE nocase", "n": "INTEGER", "s": "VARCHAR"}
        assert together["b"]["u"] == "VARCHAR COLLATE nocase"
        assert together["b"]["t"].startswith("VARCHAR COLLATE noaccent")
        assert together["v"] == {"s": "VARCHAR COLLATE nocase"}
        assert backend.table_schemas([]) == {}
    finally:
        backend.close()


def test_table_schema_of_a_declared_csv_source(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("k,price\n1,2.5\n2,3.0\n")
    md = loads_metadata(f"tables:\n  t:\n    source: {csv}\n    columns:\n      k: {{}}\n")
    backend = DuckDBBackend(None, md)
    try:
        assert backend.table_schema("t") == {"k": "BIGINT", "price": "DOUBLE"}
    finally:
        backend.close()


def test_missing_types_are_filled_and_declared_ones_kept(database):
    md = loads_metadata(UNTYPED)
    backend = DuckDBBackend(database, md)
    try:
        filled = fill_column_types(md, backend)
    finally:
        backend.close()
    assert filled.tables["a"].columns["k"].type == "VARCHAR"
    assert filled.tables["a"].columns["n"].type == "INTEGER"
    assert filled.tables["b"].columns["k"].type == "INTEGER"  # matched case-insensitively
    assert filled.tables["b"].columns["n"].type == "BIGINT"
    assert filled.tables["ghost"].columns["k"].type is None  # not in the database: untouched
    assert md.tables["a"].columns["k"].type is None  # the input is not modified
    # everything else is unchanged
    assert filled.tables["a"].columns["k"].max_freq == 1
    assert filled.ledger == md.ledger


def test_declared_types_equal_up_to_aliases_are_accepted(database):
    md = loads_metadata(UNTYPED.replace("k: {max_freq: 1}\n      n: {max_freq: 2}",
                                        "k: {max_freq: 1, type: TEXT}\n"
                                        "      n: {max_freq: 2, type: INT4}"))
    backend = DuckDBBackend(database, md)
    try:
        filled = fill_column_types(md, backend)
    finally:
        backend.close()
    assert filled.tables["a"].columns["k"].type == "TEXT"
    assert filled.tables["a"].columns["n"].type == "INT4"


def test_a_declared_type_the_database_contradicts_is_an_error(database):
    md = loads_metadata(UNTYPED.replace("k: {max_freq: 1}\n      n: {max_freq: 2}",
                                        "k: {max_freq: 1, type: INTEGER}\n"
                                        "      n: {max_freq: 2}"))
    backend = DuckDBBackend(database, md)
    try:
        with pytest.raises(ProgrammingError, match=r"a\.k as type INTEGER.*stores it as VARCHAR"):
            Session(md, backend)
    finally:
        backend.close()


def test_the_engine_rejects_a_mismatched_join_before_charging_or_running(database):
    md = loads_metadata(UNTYPED)
    backend = RecordingDuckDBBackend(database, md)
    ledger = open_ledger(database.parent / "ledger.sqlite")
    try:
        engine = ledger_session(md, backend, ledger)
        with pytest.raises(MissingMetricError,
                           match=r"a\.k \(VARCHAR\) = b\.k \(INTEGER\).*same type"):
            engine.run(JOIN_TEXT_INT, epsilon=1.0, delta=1e-6)
        assert charged(engine) == [] and backend.executed == []
        # an INTEGER key joined with a BIGINT one is fine
        result = engine.run(JOIN_INT_BIGINT, epsilon=1.0, delta=1e-6)
        assert len(result.rows) == 1 and len(charged(engine)) == 1
    finally:
        backend.close()
        ledger.close()
    # what the rejection prevents: '1', '01', ' 1' all match b's 1 (mf(a.k) promised 1)
    con = duckdb.connect(str(database), read_only=True)
    assert con.execute(JOIN_TEXT_INT).fetchone() == (3,)
    con.close()


def test_dbapi_connection_fills_types_from_the_database(database, tmp_path):
    md = loads_metadata(UNTYPED)
    ledger = tmp_path / "ledger.sqlite"
    with Ledger(ledger) as book:
        book.set_budget(str(database), "ann", 10.0, 1e-3)
    with dpsql.connect(database, md, analyst="ann", ledger=ledger, epsilon=1.0,
                       delta=1e-6) as conn:
        cur = conn.cursor()
        with pytest.raises(MissingMetricError, match="same type"):
            cur.execute(JOIN_TEXT_INT)
        cur.execute(JOIN_INT_BIGINT)
        assert len(cur.fetchall()) == 1
    with Ledger(ledger) as book:  # only the accepted query was charged: epsilon 1.0
        assert book.status(str(database), "ann").epsilon_spent == pytest.approx(1.0)


def test_flex_format_metadata_gets_types_too(tmp_path):
    # FLEX's schema.yaml has no types at all
    path = tmp_path / "flex.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE orders (order_id INTEGER, customer_id INTEGER, product_id "
                    "INTEGER, quantity INTEGER, order_cost DOUBLE, order_date DATE)")
        con.execute("CREATE TABLE recommendations (customer_id VARCHAR, product_id INTEGER)")
    md = load_metadata("tests/fixtures/flex_schema.yaml")
    backend = DuckDBBackend(path, md)
    try:
        engine = Session(md, backend)
        assert engine.metadata.tables["orders"].columns["customer_id"].type == "INTEGER"
        with pytest.raises(MissingMetricError, match=r"\(INTEGER\).*\(VARCHAR\)"):
            engine.prepare("SELECT COUNT(*) FROM orders o JOIN recommendations r "
                           "ON o.customer_id = r.customer_id")
    finally:
        backend.close()


def test_explain_without_a_database_lists_unchecked_key_types():
    # docs/design.md's worked example on FLEX's untyped schema: same numbers, and a warning
    md = load_metadata("tests/fixtures/flex_schema.yaml")
    report = explain("SELECT COUNT(*) AS n FROM orders JOIN recommendations ON "
                     "orders.customer_id = recommendations.customer_id", md,
                     epsilon=0.1, delta=1e-8)
    assert report["columns"][0]["elastic_sensitivity"] == 250.0
    assert report["unchecked_key_types"] == [
        "orders.customer_id (type unknown) = recommendations.customer_id (type unknown)"
    ]
    single = explain("SELECT COUNT(*) FROM orders", md, epsilon=0.1, delta=1e-8)
    assert single["unchecked_key_types"] == []


def test_a_declared_type_a_csv_source_contradicts_names_the_file(tmp_path):
    # QA round 5: whole numbers in a CSV read as BIGINT; the error spoke of a database
    csv = tmp_path / "patients.csv"
    csv.write_text("pid,age\n1,30\n2,41\n", encoding="utf-8")
    md = loads_metadata(f"tables:\n  patients:\n    source: {csv}\n    columns:\n"
                        "      pid: {type: INTEGER}\n")
    backend = DuckDBBackend(":memory:", md)
    try:
        with pytest.raises(ProgrammingError) as info:
            Session(md, backend)
    finally:
        backend.close()
    message = str(info.value)
    assert f"DuckDB reads it from {csv} as BIGINT" in message
    assert "write type: BIGINT for it in the metadata (or remove its type: to use the file's)" \
        in message and "database" not in message
