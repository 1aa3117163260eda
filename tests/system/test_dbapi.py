"""The PEP 249 driver (dpsql.dbapi) end to end: real DuckDB files and real ledger files.

Conformance checks follow DuckDB's own DB-API tests (description shape, fetch after exhaustion,
fetchmany sizes, rowcount, arraysize, iteration, use after close); then the privacy contract:
charge before release, exact charge amounts, nothing spent on rejection or exhaustion, the
metadata's ledger cannot be bypassed, and the answer cache defeats averaging (also across
connections and processes).

Exact answers: at epsilon=1000 a count's discrete Laplace noise is nonzero with probability
about 2e^-1000, so counts equal the true counts; tests that need visible noise use epsilon 0.01
(scale 100 per count).
"""

from __future__ import annotations

import atexit
import datetime as dt
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

import dpsql
from dpsql import dbapi
from dpsql.accounting import Ledger, advanced_composition, database_identity, kov_bound
from dpsql.errors import (
    BudgetExhaustedError,
    DatabaseError,
    DataError,
    Error,
    InterfaceError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    ProtectedBinError,
    UnsupportedQueryError,
)
from dpsql.metadata import load_metadata

EXACT = 1000.0  # epsilon at which counts are exact (see module docstring)
REGIONS = ("north", "south", "east")

COUNT = "SELECT COUNT(*) AS n FROM people"
BY_REGION = "SELECT region, COUNT(*) AS n FROM people GROUP BY region ORDER BY region"
OLDER = "SELECT COUNT(*) AS n FROM people WHERE age > ?"
JOIN = "SELECT COUNT(*) AS n FROM people JOIN visits ON people.id = visits.person_id"
# Passes the analysis (UPPER is allow-listed) but DuckDB cannot bind UPPER(INTEGER): it fails
# inside the database whatever the rows are (TRY does not help at bind time).
FAILS_IN_DB = "SELECT COUNT(*) AS n FROM people WHERE UPPER(age) = 'A'"

METADATA = """\
{ledger_line}tables:
  people:
    columns:
      id: {{max_freq: 1, type: INTEGER}}
      region: {{max_freq: 100, releasable: true, type: VARCHAR,
                domain: {{values: [east, north, south, west]}}}}
      age: {{bounds: [0, 120], type: INTEGER}}
  visits:
    columns:
      person_id: {{max_freq: 3, type: INTEGER}}
      minutes: {{bounds: [0, 60], type: INTEGER}}
"""


@dataclass(frozen=True)
class World:
    """A tiny database (300 people, 100 per region, ages 20..69; 900 visits), its metadata
    files (one naming a ledger, one not), and a ledger granting alice a budget."""

    db: Path
    metadata: Path  # names the ledger
    plain_metadata: Path  # names no ledger
    ledger: Path

    def true_count(self, sql: str, params: list | None = None) -> int:
        con = duckdb.connect(str(self.db), read_only=True)
        try:
            return con.execute(sql, params or []).fetchone()[0]
        finally:
            con.close()

    def status(self, analyst: str = "alice"):
        with Ledger(self.ledger) as book:
            return book.status(str(self.db), analyst)


#: the database written once in this process (a private template no test opens)
_TEMPLATE: list[Path] = []


def _people_template() -> Path:
    if not _TEMPLATE:
        folder = Path(tempfile.mkdtemp(prefix="dpsql-people-template-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        db = folder / "people.duckdb"
        con = duckdb.connect(str(db))
        con.execute("CREATE TABLE people (id INTEGER, region VARCHAR, age INTEGER)")
        con.execute("INSERT INTO people SELECT i, ['north', 'south', 'east'][i % 3 + 1], "
                    "20 + i % 50 FROM range(300) t(i)")
        con.execute("CREATE TABLE visits (person_id INTEGER, minutes INTEGER)")
        con.execute("INSERT INTO visits SELECT i % 300, i % 60 FROM range(900) t(i)")
        con.close()  # closed and checkpointed: the one file holds everything
        assert [p.name for p in folder.iterdir()] == ["people.duckdb"]
        _TEMPLATE.append(db)
    return _TEMPLATE[0]


def build_world(tmp_path: Path, *, epsilon: float = 100.0, delta: float = 1e-3) -> World:
    """A new world in ``tmp_path``: a byte copy of this process's database template (written
    once, closed: DuckDB shares one instance per file in a process, so dpsql opens the copy
    as a file no one else holds), its metadata files and a new ledger."""
    db = tmp_path / "people.duckdb"
    shutil.copyfile(_people_template(), db)
    ledger = tmp_path / "ledger.sqlite"
    metadata = tmp_path / "people.yaml"
    metadata.write_text(METADATA.format(ledger_line="ledger: ledger.sqlite\n"))
    plain = tmp_path / "people-no-ledger.yaml"
    plain.write_text(METADATA.format(ledger_line=""))
    with Ledger(ledger) as book:
        book.set_budget(str(db), "alice", epsilon, delta)
    return World(db, metadata, plain, ledger)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return build_world(tmp_path)


@pytest.fixture
def conn(world: World):
    """A connection without a ledger (nothing charged), exact counts by default."""
    with dpsql.connect(world.db, world.plain_metadata, analyst="alice",
                       ledger=None, epsilon=EXACT) as c:
        yield c


# ---------------------------------------------------------------------------------------------
# Module interface
# ---------------------------------------------------------------------------------------------


def test_module_globals_and_exception_tree():
    assert dpsql.apilevel == "2.0"
    assert dpsql.threadsafety == 1
    assert dpsql.paramstyle == "qmark"
    assert dpsql.connect.__doc__ and dbapi.connect.__doc__
    for name in ("Warning", "Error", "InterfaceError", "DatabaseError", "DataError",
                 "OperationalError", "IntegrityError", "InternalError", "ProgrammingError",
                 "NotSupportedError"):
        assert issubclass(getattr(dpsql, name), Exception)
    assert issubclass(dpsql.InterfaceError, dpsql.Error)
    assert issubclass(dpsql.BudgetExhaustedError, dpsql.OperationalError)
    assert issubclass(dpsql.UnsupportedQueryError, dpsql.NotSupportedError)


def test_type_objects_compare_equal_to_duckdb_type_names():
    assert dbapi.NUMBER == "BIGINT" and dbapi.NUMBER == "DOUBLE" and dbapi.NUMBER == "DECIMAL(18,3)"
    assert dbapi.STRING == "VARCHAR" and dbapi.STRING != "BIGINT"
    assert dbapi.DATETIME == "DATE" and dbapi.BINARY == "BLOB"
    type_code = "INTEGER"
    assert type_code == dbapi.NUMBER  # description[i][1] == NUMBER, as PEP 249 writes it
    assert dbapi.Date(2024, 1, 2) == dt.date(2024, 1, 2)
    assert dbapi.TimestampFromTicks(0) == dt.datetime.fromtimestamp(0)


# ---------------------------------------------------------------------------------------------
# Cursor conformance
# ---------------------------------------------------------------------------------------------


def test_description_shape_names_and_types(conn):
    cur = conn.cursor()
    assert cur.description is None and cur.rowcount == -1 and cur.release is None
    cur.execute(BY_REGION)
    assert cur.description == (
        ("region", "VARCHAR", None, None, None, None, None),
        ("n", "BIGINT", None, None, None, None, None),
    )
    cur.execute("SELECT COUNT(*) AS n, AVG(age) AS mean_age, SUM(age) AS total FROM people")
    assert [d[0] for d in cur.description] == ["n", "mean_age", "total"]
    # the SUM of an INTEGER column is an integer (dpsql.execute.typed)
    assert [d[1] for d in cur.description] == ["BIGINT", "DOUBLE", "BIGINT"]
    assert all(len(d) == 7 and d[2:] == (None,) * 5 for d in cur.description)


def test_fetchone_and_fetch_after_exhaustion(conn, world):
    cur = conn.cursor().execute(BY_REGION)
    # every declared bin is present, the empty one ('west') too
    assert cur.rowcount == 4
    assert cur.fetchone() == ("east", 100)
    assert cur.fetchone() == ("north", 100)
    assert cur.fetchone() == ("south", 100)
    assert cur.fetchone() == ("west", 0)
    assert cur.fetchone() is None
    assert cur.fetchone() is None
    assert cur.fetchall() == []
    assert cur.fetchmany() == [] and cur.fetchmany(3) == []
    assert cur.rowcount == 4  # rowcount is the result's size, not what is left


def test_fetchmany_sizes_and_arraysize(conn):
    cur = conn.cursor()
    assert cur.arraysize == 1
    cur.execute(BY_REGION)
    assert cur.fetchmany() == [("east", 100)]  # default: arraysize rows
    cur.arraysize = 2
    assert cur.fetchmany() == [("north", 100), ("south", 100)]
    assert cur.fetchmany(0) == []
    assert cur.fetchmany(10) == [("west", 0)]  # fewer than asked when fewer remain
    assert cur.fetchmany(10) == []
    cur.execute(BY_REGION)
    assert cur.fetchmany(size=3) == [("east", 100), ("north", 100), ("south", 100)]
    assert cur.fetchall() == [("west", 0)]
    with pytest.raises(ProgrammingError, match="size"):
        cur.fetchmany(-1)


def test_fetchall_and_iteration(conn):
    cur = conn.cursor()
    expected = [("east", 100), ("north", 100), ("south", 100), ("west", 0)]
    assert cur.execute(BY_REGION).fetchall() == expected
    assert list(cur.execute(BY_REGION)) == expected
    cur.execute(BY_REGION)
    assert cur.fetchone() == expected[0]
    assert [row for row in cur] == expected[1:]  # iteration continues where fetching stopped
    assert next(iter(cur), "done") == "done"
    assert list(conn.execute(COUNT)) == [(300,)]  # the connection shortcut returns a cursor


def test_fetch_before_execute_is_an_error(conn):
    cur = conn.cursor()
    for call in (cur.fetchone, cur.fetchall, cur.fetchmany, lambda: iter(cur)):
        with pytest.raises(ProgrammingError, match="execute"):
            call()


def test_parameters_pass_through(conn, world):
    cur = conn.cursor()
    for age in (20, 45, 69):
        assert cur.execute(OLDER, [age]).fetchone() == (world.true_count(
            "SELECT COUNT(*) FROM people WHERE age > ?", [age]),)
    assert cur.execute(OLDER, (45,)).fetchone() == (world.true_count(
        "SELECT COUNT(*) FROM people WHERE age > 45"),)
    assert cur.execute(
        "SELECT COUNT(*) AS n FROM people WHERE region = ? AND age < ?", ["east", 30]
    ).fetchone() == (world.true_count(
        "SELECT COUNT(*) FROM people WHERE region = 'east' AND age < 30"),)
    with pytest.raises(ProgrammingError, match="1 parameter marker"):
        cur.execute(OLDER)
    with pytest.raises(ProgrammingError, match="1 parameter marker"):
        cur.execute(OLDER, [1, 2])
    with pytest.raises(ProgrammingError, match="sequence"):
        cur.execute(OLDER, {"age": 3})
    cur.execute(OLDER, [30])
    with pytest.raises(ProgrammingError, match="sequence"):
        cur.execute(OLDER, "3")
    # a failed execute leaves no stale result behind
    assert cur.description is None and cur.rowcount == -1 and cur.release is None


def test_setinputsizes_setoutputsize_commit_rollback_are_noops(conn):
    cur = conn.cursor()
    assert cur.setinputsizes([None]) is None
    assert cur.setoutputsize(10) is None and cur.setoutputsize(10, 0) is None
    cur.execute(COUNT)
    assert conn.commit() is None and conn.rollback() is None
    assert cur.fetchall() == [(300,)]  # results survive commit/rollback


def test_executemany_is_not_supported_and_spends_nothing(world):
    with dpsql.connect(world.db, world.metadata, analyst="alice", epsilon=0.5) as c:
        cur = c.cursor()
        with pytest.raises(NotSupportedError, match="executemany"):
            cur.executemany(OLDER, [[20], [30]])
        assert c.budget.history == ()


def test_use_after_cursor_close(conn):
    cur = conn.cursor().execute(COUNT)
    cur.close()
    cur.close()  # idempotent
    calls = [lambda: cur.execute(COUNT), cur.fetchone, cur.fetchall, cur.fetchmany,
             lambda: iter(cur), lambda: cur.executemany(COUNT, []),
             lambda: cur.setinputsizes([]), lambda: cur.setoutputsize(1), cur.fetchdf]
    for call in calls:
        with pytest.raises(InterfaceError, match="cursor is closed"):
            call()
    assert conn.cursor().execute(COUNT).fetchone() == (300,)  # the connection is unaffected


def test_use_after_connection_close(world):
    c = dpsql.connect(world.db, world.metadata, analyst="alice", epsilon=0.5)
    cur = c.cursor().execute(COUNT)
    c.close()
    c.close()  # idempotent
    assert c.closed
    calls = [c.cursor, c.commit, c.rollback, lambda: c.budget, c.budget_report,
             lambda: c.execute(COUNT), lambda: cur.execute(COUNT), cur.fetchone, cur.fetchall,
             lambda: cur.fetchmany(2), lambda: list(cur)]
    for call in calls:
        with pytest.raises(InterfaceError, match="closed"):
            call()


def test_context_manager_closes_the_connection(world):
    with dpsql.connect(world.db, world.plain_metadata, analyst="alice",
                       ledger=None, epsilon=EXACT) as c:
        assert not c.closed
        with c.cursor() as cur:
            assert cur.execute(COUNT).fetchone() == (300,)
        with pytest.raises(InterfaceError):
            cur.fetchone()  # the cursor's own context manager closed it
        assert c.cursor().execute(COUNT).fetchone() == (300,)
    assert c.closed
    with pytest.raises(InterfaceError):
        c.cursor()
    with (pytest.raises(UnsupportedQueryError),
          dpsql.connect(world.db, world.plain_metadata, analyst="alice",
                        ledger=None, epsilon=EXACT) as c2):
        c2.cursor().execute("SELECT * FROM people")
    assert c2.closed  # closed on an exception too
    # after closing, the same database file can be opened again
    with dpsql.connect(world.db, world.plain_metadata, analyst="alice",
                       ledger=None, epsilon=EXACT) as c3:
        assert c3.execute(COUNT).fetchone() == (300,)


def test_errors_are_pep249_classes(world, conn):
    cur = conn.cursor()
    cases = [
        ("SELECT * FROM people", UnsupportedQueryError),
        ("SELECT id, COUNT(*) AS n FROM people GROUP BY id", ProtectedBinError),
        ("SELECT COUNT(*) AS n FROM nowhere", ProgrammingError),
        ("SELEC COUNT(*)", ProgrammingError),
    ]
    for sql, cls in cases:
        with pytest.raises(cls) as info:
            cur.execute(sql)
        assert isinstance(info.value, DatabaseError) and isinstance(info.value, Error)
    with pytest.raises(NotSupportedError, match="delta"):  # a private join needs delta > 0
        cur.execute(JOIN)
    with pytest.raises(ProgrammingError, match="while planning"):  # a DuckDB bind error
        cur.execute(FAILS_IN_DB)
    with pytest.raises(ProgrammingError, match="epsilon"):
        cur.execute(COUNT, epsilon=-1.0)
    with pytest.raises(ProgrammingError, match="delta"):
        cur.execute(COUNT, delta=1.5)
    with pytest.raises(OperationalError, match="does not exist"):
        dpsql.connect(world.db.with_name("missing.duckdb"), world.plain_metadata, analyst="a",
                      ledger=None)
    with pytest.raises(ProgrammingError, match="does not exist"):
        dpsql.connect(world.db, world.db.with_name("missing.yaml"), analyst="a")
    with pytest.raises(ProgrammingError, match="analyst"):
        dpsql.connect(world.db, world.plain_metadata, analyst="", ledger=None)
    with pytest.raises(ProgrammingError, match="epsilon"):
        dpsql.connect(world.db, world.plain_metadata, analyst="a", ledger=None, epsilon=0)


def test_epsilon_comes_from_execute_or_connection(world):
    with dpsql.connect(world.db, world.metadata, analyst="alice") as c:
        with pytest.raises(ProgrammingError, match=r"epsilon=") as info:
            c.cursor().execute(COUNT)
        assert "dpsql.connect(" in str(info.value) and "execute(" in str(info.value)
        assert c.budget.history == ()
        assert c.cursor().execute(COUNT, epsilon=0.25).release.epsilon == 0.25
    with dpsql.connect(world.db, world.metadata, analyst="alice", epsilon=0.5,
                       delta=1e-6) as c:
        cur = c.cursor()
        assert cur.execute(COUNT).release.epsilon == 0.5  # connection default
        # pure release: the default delta is accepted and nothing of it is spent
        assert cur.release.delta == 0.0
        assert cur.execute(COUNT, epsilon=0.125).release.epsilon == 0.125  # override
        assert cur.execute(JOIN).release.delta == 1e-6  # default delta reaches the engine
        assert cur.execute(JOIN, delta=2e-6).release.delta == 2e-6


def test_fetchdf_without_pandas_says_how_to_install(conn, monkeypatch):
    cur = conn.cursor().execute(BY_REGION)
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now raises ImportError
    with pytest.raises(NotSupportedError, match=r"dpsql\[pandas\]"):
        cur.fetchdf()


def test_fetchdf_with_pandas(conn):
    pandas = pytest.importorskip("pandas")
    cur = conn.cursor().execute(BY_REGION)
    assert cur.fetchone() == ("east", 100)
    frame = cur.fetchdf()  # the remaining rows, like fetchall
    assert isinstance(frame, pandas.DataFrame)
    assert list(frame.columns) == ["region", "n"]
    assert frame.to_records(index=False).tolist() == [("north", 100), ("south", 100),
                                                      ("west", 0)]


# ---------------------------------------------------------------------------------------------
# Ledger integration
# ---------------------------------------------------------------------------------------------


def test_charges_equal_the_release_record_exactly(world):
    with dpsql.connect(world.db, world.metadata, analyst="alice") as c:
        cur = c.cursor()
        releases = [
            cur.execute(COUNT, epsilon=0.5).release,
            cur.execute("SELECT COUNT(*) AS n, SUM(age) AS s FROM people",
                        epsilon=0.75).release,
            cur.execute(JOIN, epsilon=0.5, delta=1e-6).release,
        ]
        history = c.budget.history
    assert [r.cached for r in releases] == [False, False, False]
    assert [(h.epsilon, h.delta) for h in history] == [(r.epsilon, r.delta) for r in releases]
    assert [(h.epsilon, h.delta) for h in history] == [(0.5, 0.0), (0.75, 0.0), (0.5, 1e-6)]
    assert [h.fingerprint for h in history] == [r.fingerprint for r in releases]
    assert [h.mechanism for h in history] == [r.mechanism for r in releases]
    assert {h.analyst for h in history} == {"alice"}
    assert {h.database for h in history} == {database_identity(world.db)}
    status = world.status()
    assert status.epsilon_spent == 1.75 and status.delta_spent == 1e-6


def test_budget_exhausted_before_execution_spends_nothing(tmp_path):
    world = build_world(tmp_path, epsilon=1.0, delta=0.0)
    with dpsql.connect(world.db, world.metadata, analyst="alice") as c:
        cur = c.cursor()
        cur.execute(COUNT, epsilon=0.75)
        with pytest.raises(BudgetExhaustedError, match="Nothing was charged") as info:
            cur.execute(OLDER, [30], epsilon=0.5)
        assert isinstance(info.value, OperationalError)
        assert cur.description is None and cur.release is None
        # Refusals come before the database runs anything: age > 'abc' fails in DuckDB (a
        # conversion error once a row reaches it), and the analyst sees 'abc' refused as a
        # value age cannot read (dpsql.rewrite.literal_casts), charged nothing either
        with pytest.raises(DataError, match="parameter 1"):
            cur.execute(OLDER, ["abc"], epsilon=0.5)
        status = c.budget
        assert status.epsilon_spent == 0.75 and len(status.history) == 1
        assert status.epsilon_remaining == 0.25
        # a delta-spending query against a delta budget of 0 is refused, epsilon or not
        with pytest.raises(BudgetExhaustedError, match="delta=1e-06"):
            cur.execute(JOIN, epsilon=0.125, delta=1e-6)
        # what remains can still be spent, exactly
        assert cur.execute(OLDER, [30], epsilon=0.25).release.epsilon == 0.25
        assert c.budget.epsilon_remaining == 0.0
        assert len(c.budget.history) == 2
    assert world.status().epsilon_spent == 1.0


def test_the_failing_query_fails_whatever_the_rows():
    # FAILS_IN_DB is a bind error: DuckDB raises on an empty table as on a full one, so its
    # failure says nothing about the data.
    con = duckdb.connect()
    try:
        con.execute("CREATE TABLE people (id INTEGER, region VARCHAR, age INTEGER)")
        with pytest.raises(duckdb.BinderException):
            con.execute(FAILS_IN_DB).fetchall()
    finally:
        con.close()


def test_a_binder_error_is_refused_before_the_charge(world):
    # DuckDB's binder (EXPLAIN, which reads no row) runs before the charge: the query is
    # refused whatever the data, and refused for free, every time.
    with dpsql.connect(world.db, world.metadata, analyst="alice") as c:
        for _ in range(2):
            with pytest.raises(ProgrammingError, match=r"while planning.*Nothing was charged"):
                c.cursor().execute(FAILS_IN_DB, epsilon=0.5)
        assert c.budget.history == ()


def test_analyst_without_a_budget_is_refused(world):
    with dpsql.connect(world.db, world.metadata, analyst="mallory", epsilon=0.1) as c:
        with pytest.raises(BudgetExhaustedError, match="no privacy budget"):
            c.cursor().execute(COUNT)
        assert c.budget.history == () and c.budget.epsilon_total == 0.0


def test_rejected_queries_spend_nothing(world):
    with dpsql.connect(world.db, world.metadata, analyst="alice", epsilon=0.5) as c:
        cur = c.cursor()
        for sql, params, exc in [
            ("SELECT * FROM people", None, UnsupportedQueryError),
            ("SELECT id, COUNT(*) AS n FROM people GROUP BY id", None, ProtectedBinError),
            ("SELECT COUNT(*) AS n FROM nowhere", None, ProgrammingError),
            (JOIN, None, NotSupportedError),  # needs delta
            (OLDER, None, ProgrammingError),  # missing parameter
            (OLDER, {"a": 1}, ProgrammingError),
        ]:
            with pytest.raises(exc):
                cur.execute(sql, params)
        with pytest.raises(ProgrammingError):
            cur.execute(COUNT, epsilon=float("inf"))
        with pytest.raises(NotSupportedError):
            cur.executemany(OLDER, [[1]])
        assert c.budget.history == ()
    assert world.status().epsilon_spent == 0.0


def test_metadata_ledger_cannot_be_bypassed(world, tmp_path):
    other = tmp_path / "other-ledger.sqlite"
    with Ledger(other) as book:
        book.set_budget(str(world.db), "alice", 100.0, 0.0)
    with pytest.raises(ProgrammingError, match="names the privacy ledger") as info:
        dpsql.connect(world.db, world.metadata, analyst="alice", ledger=other)
    assert "Omit" in str(info.value)
    # ledger=None (run uncharged) cannot bypass it either
    with pytest.raises(ProgrammingError, match="ledger=None cannot bypass"):
        dpsql.connect(world.db, world.metadata, analyst="alice", ledger=None)
    # the same holds for an already loaded Metadata object
    with pytest.raises(ProgrammingError, match="names the privacy ledger"):
        dpsql.connect(world.db, load_metadata(world.metadata), analyst="alice", ledger=other)
    # without ledger=, or with the same file spelled differently, the metadata's ledger is used
    os.symlink(world.ledger, tmp_path / "alias.sqlite")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        spellings = [dbapi.UNSET, world.ledger, "ledger.sqlite", "./ledger.sqlite",
                     "alias.sqlite"]
        for i, spelling in enumerate(spellings):
            with dpsql.connect(world.db, load_metadata(world.metadata) if i % 2 else
                               world.metadata, analyst="alice", ledger=spelling) as c:
                c.cursor().execute(OLDER, [i], epsilon=0.5)
    finally:
        os.chdir(cwd)
    assert len(world.status().history) == len(spellings)
    with Ledger(other) as book:
        assert book.status(str(world.db), "alice").history == ()


def test_ledger_argument_applies_when_metadata_names_none(world):
    with dpsql.connect(world.db, world.plain_metadata, analyst="alice", ledger=world.ledger,
                       epsilon=0.5) as c:
        assert c.ledger_path == str(world.ledger)
        c.cursor().execute(COUNT)
    assert world.status().epsilon_spent == 0.5


def test_missing_or_foreign_ledger_fails_closed(world, tmp_path):
    missing = tmp_path / "nope.sqlite"
    with pytest.raises(OperationalError, match="does not exist"):
        dpsql.connect(world.db, world.plain_metadata, analyst="alice", ledger=missing)
    assert not missing.exists()  # connecting never creates a ledger
    foreign = tmp_path / "foreign.sqlite"
    sqlite3.connect(foreign).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(OperationalError, match="not a dpsql privacy ledger"):
        dpsql.connect(world.db, world.plain_metadata, analyst="alice", ledger=foreign)


def test_without_a_ledger_nothing_is_charged_or_cached(world):
    with dpsql.connect(world.db, world.plain_metadata, analyst="alice",
                       ledger=None, epsilon=0.01) as c:
        assert c.ledger_path is None
        cur = c.cursor()
        answers = {cur.execute(COUNT).fetchone()[0] for _ in range(20)}
        assert cur.release.cached is False
        # fresh noise every time (scale 100: 20 equal draws have probability < 1e-30)
        assert len(answers) > 1
        with pytest.raises(ProgrammingError, match="no privacy ledger"):
            _ = c.budget
        with pytest.raises(ProgrammingError, match="no privacy ledger"):
            c.budget_report()
    assert world.status().history == ()


# ---------------------------------------------------------------------------------------------
# The answer cache
# ---------------------------------------------------------------------------------------------


def test_fifty_identical_queries_one_charge_one_answer(world):
    with dpsql.connect(world.db, world.metadata, analyst="alice", epsilon=0.01) as c:
        cur = c.cursor()
        first = cur.execute(BY_REGION).fetchall()
        first_release = cur.release
        answers, releases = [], []
        for _ in range(49):
            answers.append(cur.execute(BY_REGION).fetchall())
            releases.append(cur.release)
        assert all(a == first for a in answers)
        assert first_release.cached is False and all(r.cached for r in releases)
        # the cached record is the original one, only marked cached
        assert {(r.epsilon, r.delta, r.mechanism, r.fingerprint, r.columns) for r in releases} == {
            (first_release.epsilon, first_release.delta, first_release.mechanism,
             first_release.fingerprint, first_release.columns)}
        assert len(c.budget.history) == 1 and c.budget.epsilon_spent == 0.01
        # a new cursor on the same connection hits the same entry
        assert c.cursor().execute(BY_REGION).fetchall() == first


def test_cache_survives_reconnect_and_a_new_process(world):
    with dpsql.connect(world.db, world.metadata, analyst="alice", epsilon=0.01) as c:
        first = c.execute(OLDER, [30]).fetchall()
        mean = c.execute("SELECT AVG(age) AS a FROM people").fetchall()
    with dpsql.connect(world.db, world.metadata, analyst="alice", epsilon=0.01) as c:
        for _ in range(25):
            cur = c.execute(OLDER, [30])
            assert cur.fetchall() == first and cur.release.cached
        assert c.execute("SELECT AVG(age) AS a FROM people").fetchall() == mean
    script = textwrap.dedent(f"""
        import json, dpsql
        with dpsql.connect({str(world.db)!r}, {str(world.metadata)!r}, analyst="alice",
                           epsilon=0.01) as c:
            out = []
            for _ in range(25):
                cur = c.execute({OLDER!r}, [30])
                out.append([cur.fetchall(), cur.release.cached])
            print(json.dumps(out))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True, timeout=120)
    out = json.loads(proc.stdout)
    assert all([tuple(r) for r in rows] == first and cached for rows, cached in out)
    status = world.status()
    assert len(status.history) == 2 and status.epsilon_spent == 0.02


def test_cache_key_normalises_text_and_an_unused_delta_but_not_parameters_or_epsilon(world):
    with dpsql.connect(world.db, world.metadata, analyst="alice", epsilon=0.01) as c:
        base = c.execute(COUNT).fetchall()
        # same query after qualification: same entry, no charge
        for spelling in ("select count(*) as n from PEOPLE",
                         "SELECT   COUNT(*)  AS n\nFROM people",
                         "SELECT COUNT(*) AS n FROM people AS people"):
            cur = c.execute(spelling)
            assert cur.fetchall() == base and cur.release.cached, spelling
        assert len(c.budget.history) == 1
        # anything that changes the release is a new, charged entry
        assert not c.execute(COUNT, epsilon=0.02).release.cached
        # ... but a delta this pure count never reads does not (tests/release/test_cache_delta)
        assert c.execute(COUNT, epsilon=0.01, delta=1e-9).release.cached
        assert not c.execute(OLDER, [30]).release.cached
        assert not c.execute(OLDER, [31]).release.cached
        assert not c.execute(OLDER, [30.0]).release.cached  # typed: 30 and 30.0 differ
        assert c.execute(OLDER, [30]).release.cached
        assert c.execute(OLDER, (30,)).release.cached  # list or tuple: same parameters
        assert len(c.budget.history) == 5


def test_cache_is_per_analyst(world):
    with Ledger(world.ledger) as book:
        book.set_budget(str(world.db), "bob", 1.0, 0.0)
    with dpsql.connect(world.db, world.metadata, analyst="alice", epsilon=0.01) as c:
        c.execute(COUNT)
    with dpsql.connect(world.db, world.metadata, analyst="bob", epsilon=0.01) as c:
        assert not c.execute(COUNT).release.cached  # bob pays for his own answer
        assert c.budget.epsilon_spent == 0.01
    assert world.status().epsilon_spent == 0.01


def test_cached_answer_is_free_after_the_budget_is_exhausted(tmp_path):
    world = build_world(tmp_path, epsilon=0.5, delta=0.0)
    with dpsql.connect(world.db, world.metadata, analyst="alice", epsilon=0.5) as c:
        first = c.execute(BY_REGION).fetchall()
        with pytest.raises(BudgetExhaustedError):
            c.execute(COUNT)
        assert c.execute(BY_REGION).fetchall() == first  # already paid for
        assert c.budget.epsilon_spent == 0.5


def test_cached_rows_keep_values_and_types(world):
    sql = ("SELECT region, COUNT(*) AS n, AVG(age) AS a, SUM(age) / 3 AS s "
           "FROM people GROUP BY region ORDER BY region")
    with dpsql.connect(world.db, world.metadata, analyst="alice", epsilon=0.5) as c:
        fresh = c.execute(sql)
        rows, description = fresh.fetchall(), fresh.description
        again = c.execute(sql)
        assert again.release.cached
        assert again.description == description
        cached = again.fetchall()
    assert cached == rows
    assert [[type(v) for v in r] for r in cached] == [[type(v) for v in r] for r in rows]


def test_damaged_cache_entry_fails_closed(world):
    with dpsql.connect(world.db, world.metadata, analyst="alice", epsilon=0.5) as c:
        c.execute(COUNT)
    raw = sqlite3.connect(world.ledger)
    raw.execute("UPDATE cache SET payload = x'7b7d'")  # "{}": valid JSON, not an answer
    raw.commit()
    raw.close()
    with dpsql.connect(world.db, world.metadata, analyst="alice", epsilon=0.5) as c:
        with pytest.raises(OperationalError, match="cached answer is unreadable"):
            c.execute(COUNT)
        assert len(c.budget.history) == 1


# ---------------------------------------------------------------------------------------------
# Budget and composition report
# ---------------------------------------------------------------------------------------------


def test_budget_and_composition_report(world):
    with dpsql.connect(world.db, world.metadata, analyst="alice", epsilon=0.5) as c:
        for age in (20, 30, 40):
            c.execute(OLDER, [age])
        c.execute(OLDER, [20])  # cached: not in the history
        c.execute(JOIN, delta=1e-6)
        status = c.budget
        assert status.epsilon_total == 100.0 and status.delta_total == 1e-3
        assert status.epsilon_spent == 2.0 and status.delta_spent == 1e-6
        assert status.epsilon_remaining == 98.0
        assert [h.mechanism for h in status.history] == (
            ["discrete_laplace"] * 3 + [c.cursor().execute(JOIN, delta=1e-6).release.mechanism])
        report = c.budget_report(delta_prime=1e-6)
    charges = [(0.5, 0.0)] * 3 + [(0.5, 1e-6)]
    assert report.k == 4 and report.delta_prime == 1e-6 and not report.homogeneous
    assert (report.basic.epsilon, report.basic.delta) == (2.0, 1e-6)
    # sqrt(2 ln(1/delta') sum eps_i^2) + sum eps_i (e^eps_i - 1)
    drv = math.sqrt(2 * math.log(1e6) * 4 * 0.5**2) + 4 * 0.5 * math.expm1(0.5)
    assert report.advanced.epsilon == pytest.approx(drv, rel=1e-12)
    assert report.advanced.delta == pytest.approx(2e-6, rel=1e-12)
    assert (report.advanced.epsilon, report.advanced.delta) == advanced_composition(charges, 1e-6)
    assert (report.kov_bound.epsilon, report.kov_bound.delta) == kov_bound(charges, 1e-6)
    assert report.kov_optimal.epsilon <= report.basic.epsilon
    assert c.closed


def test_without_a_ledger_no_analyst_name_is_needed(world: World):
    # QA round 5: the CLI's --no-ledger needs no -a, dpsql.connect(..., ledger=None) did
    with dpsql.connect(world.db, world.plain_metadata, ledger=None, epsilon=EXACT) as c:
        assert c.analyst == "owner"
        c.cursor().execute("SELECT COUNT(*) FROM visits")
    with pytest.raises(ProgrammingError, match="analyst's name"):
        dpsql.connect(world.db, world.plain_metadata)  # a ledger is charged: name the analyst
