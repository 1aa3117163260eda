"""What the backend promises about stored data, and the shortcuts the engine takes with it.

1. A SUM without its clamp when the stored values already lie inside the bounds.
``Backend.value_range`` promises the least and greatest stored value of a column for as long as
the backend is open; the engine then runs ``SUM(x)`` instead of ``SUM(clamp(x))`` when the
bounds contain that range (dpsql.rewrite.plan_execution). A range that is too narrow would
release an unclamped sum, so the brute force below checks, for bounds on every side of the
true range, that the zero-noise answer is always exactly the clamped sum plain SQL computes, and
that the clamp goes only when the bounds contain every stored value.

2. A public table's GROUP BY domain read from the table the backend registered for it
(``Backend.domain_table``) instead of a DISTINCT scan in every query: the same bins, values and
types as the scan; and a domain query that reads only such tables and constants is read once
per session (``dpsql.execute.exact.DomainMemo``).
"""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from decimal import Decimal

import duckdb
import pytest

from dpsql.backends.duckdb import DuckDBBackend, domain_table_name
from dpsql.errors import OperationalError, ProgrammingError
from dpsql.metadata import loads_metadata
from dpsql.rewrite.domains import scan_relation
from dpsql.session import Session
from tests.recording import RecordingDuckDBBackend
from tests.shop_fixture import ZeroNoise

# price DECIMAL(15,2) in [1.50, 80.25]; n INTEGER in [-3, 12]; x DOUBLE with a NaN; empty_col
# all NULL; g the group key.
ROWS = [
    (Decimal("1.50"), -3, 0.5, None, "a"),
    (Decimal("80.25"), 12, float("nan"), None, "b"),
    (Decimal("10.00"), 4, 2.0, None, "a"),
    (None, None, None, None, "b"),
]
PRICE_RANGE = (Decimal("1.50"), Decimal("80.25"))
N_RANGE = (-3, 12)


def _metadata(price=(0, 100), n=(-10, 20), x=(0, 10), empty=(0, 1)):
    return loads_metadata(f"""
tables:
  t:
    columns:
      price: {{bounds: [{price[0]}, {price[1]}], type: 'DECIMAL(15,2)'}}
      n: {{bounds: [{n[0]}, {n[1]}], type: INTEGER}}
      x: {{bounds: [{x[0]}, {x[1]}], type: DOUBLE}}
      empty_col: {{bounds: [{empty[0]}, {empty[1]}], type: DOUBLE}}
      g: {{releasable: true, type: VARCHAR, domain: {{values: [a, b]}}}}
""")


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("range") / "t.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (price DECIMAL(15,2), n INTEGER, x DOUBLE, empty_col DOUBLE, "
                "g VARCHAR)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", ROWS)
    con.execute("CREATE TABLE nothing (v INTEGER)")
    con.close()
    return path


def test_value_range_is_the_least_and_greatest_stored_value(db):
    backend = DuckDBBackend(db, _metadata())
    try:
        assert backend.value_range("t", "price") == PRICE_RANGE
        assert backend.value_range("t", "n") == N_RANGE
        least, greatest = backend.value_range("t", "x")
        assert least == 0.5 and math.isnan(greatest)  # DuckDB orders NaN above everything
        assert backend.value_range("t", "empty_col") == (None, None)
        assert backend.value_range("nothing", "v") == (None, None)
        assert backend.value_range("missing", "v") is None
        assert backend.value_range("t", "missing") is None
    finally:
        backend.close()


def test_value_range_promises_nothing_for_files_or_memory(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("v\n1\n2\n")
    metadata = loads_metadata(
        f"tables:\n  t:\n    source: {csv}\n    columns:\n      v: {{bounds: [0, 5]}}\n")
    backend = DuckDBBackend(None, metadata)
    try:
        # the file may change between queries: every SUM over it keeps its clamp
        assert backend.value_range("t", "v") is None
        engine = Session(metadata, backend, sampler=ZeroNoise())
        assert "CASE" in engine.prepare("SELECT SUM(v) AS s FROM t").plan.exact_sql
    finally:
        backend.close()


def test_the_file_cannot_change_while_the_backend_is_open(db):
    """The promise rests on DuckDB's file lock: no other process can open it for writing."""
    backend = DuckDBBackend(db, _metadata())
    try:
        writer = ("import duckdb, sys; con = duckdb.connect(sys.argv[1]); "
                  "con.execute('INSERT INTO t VALUES (1000, 1000, 1000, 1000, NULL)')")
        done = subprocess.run([sys.executable, "-c", writer, str(db)], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode != 0 and "lock" in done.stderr.lower()
        with pytest.raises(duckdb.Error):  # nor this process, with another configuration
            duckdb.connect(str(db))
        assert backend.value_range("t", "n") == N_RANGE
    finally:
        backend.close()


def _clamped_sums(db, column: str, lo, hi) -> list[tuple[str, float]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        # CASE as in dpsql's clamp; NaN sorts above hi, so it counts as hi
        return con.execute(
            f"SELECT g, SUM(CASE WHEN {column} < {lo} THEN {lo} WHEN {column} > {hi} THEN {hi} "
            f"ELSE {column} END) FROM t GROUP BY g ORDER BY g").fetchall()
    finally:
        con.close()


def _around(least, greatest, step) -> list[tuple]:
    """Bounds below, at and above each end of the true range."""
    lows = [least - step, least, least + step]
    highs = [greatest - step, greatest, greatest + step]
    return [(lo, hi) for lo, hi in itertools.product(lows, highs) if lo < hi]


CASES = ([("price", lo, hi) for lo, hi in _around(*PRICE_RANGE, Decimal("0.25"))]
         + [("n", lo, hi) for lo, hi in _around(*N_RANGE, 1)]
         + [("x", 0, 10), ("x", -1, 1000000), ("empty_col", 0, 1)])


@pytest.mark.parametrize(("column", "lo", "hi"), CASES)
def test_zero_noise_sum_is_always_the_clamped_sum(db, column, lo, hi):
    bounds = {"price": (0, 100), "n": (-10, 20), "x": (0, 10), "empty": (0, 1)}
    bounds["empty" if column == "empty_col" else column] = (lo, hi)
    metadata = _metadata(**bounds)
    backend = RecordingDuckDBBackend(db, metadata)
    try:
        engine = Session(metadata, backend, sampler=ZeroNoise())
        result = engine.run(f"SELECT g, SUM({column}) AS s FROM t GROUP BY g ORDER BY g",
                            epsilon=1e9)
        want = _clamped_sums(db, column, lo, hi)
        assert [g for g, _ in result.rows] == [g for g, _ in want]
        for (_, got), (_, exact) in zip(result.rows, want, strict=True):
            assert got == pytest.approx(float(exact or 0), abs=1e-6)
        ranges = {"price": PRICE_RANGE, "n": N_RANGE}
        if column in ranges:
            least, greatest = ranges[column]
            unclamped = lo <= least and greatest <= hi
        else:
            unclamped = column == "empty_col"  # NaN keeps x's clamp, whatever the bounds
        assert ("CASE" not in backend.executed[-1]) == unclamped, backend.executed[-1]
    finally:
        backend.close()


def test_the_fingerprint_does_not_depend_on_whether_the_clamp_runs(db, tmp_path):
    # a neighbour of db: one more row, its price outside the bounds [0, 100]
    neighbour = tmp_path / "neighbour.duckdb"
    con = duckdb.connect(str(neighbour))
    con.execute(f"ATTACH '{db}' AS src (READ_ONLY)")
    con.execute("CREATE TABLE t AS SELECT * FROM src.t")
    con.execute("INSERT INTO t VALUES (500, 1, 1, NULL, 'a')")
    con.close()
    sql = "SELECT SUM(price) AS s FROM t"
    metadata = _metadata()
    prepared = []
    for path in (db, neighbour):
        backend = DuckDBBackend(path, metadata)
        try:
            prepared.append(Session(metadata, backend).prepare(sql))
        finally:
            backend.close()
    inside, outside = prepared
    assert "CASE" not in inside.plan.exact_sql and "CASE" in outside.plan.exact_sql
    # the fingerprint, which analysts see in releases and charge history, keeps every clamp
    assert inside.fingerprint == outside.fingerprint
    assert inside.plan.normal_form == outside.plan.normal_form == outside.plan.exact_sql


# --------------------------------------------------------------------------- registered domains

PUBLIC = """
tables:
  orders:
    columns:
      id: {max_freq: 1, type: BIGINT}
      tag: {max_freq: 100, type: VARCHAR}
      amount: {bounds: [0, 10], type: 'DECIMAL(9,2)'}
  tags:
    public: true
    columns:
      tag: {max_freq: 2, type: VARCHAR}
      price: {type: 'DECIMAL(9,2)'}
      day: {type: DATE}
      size: {type: SMALLINT}
      weight: {type: DOUBLE}
"""


@pytest.fixture(scope="module")
def public_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("public") / "p.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE tags (tag VARCHAR, price DECIMAL(9,2), day DATE, size SMALLINT, "
                "weight DOUBLE)")
    con.execute("INSERT INTO tags VALUES ('it''s', 1.10, DATE '2020-01-02', 3, 0.1), "
                "('b', 2.50, DATE '1999-12-31', -1, 2.5e-7), ('a', NULL, NULL, NULL, 1e20), "
                "('b', 1.10, DATE '2020-01-02', 3, 0.1)")
    con.execute("CREATE TABLE orders AS SELECT range AS id, "
                "CASE range % 3 WHEN 0 THEN 'a' WHEN 1 THEN 'b' ELSE 'it''s' END AS tag, "
                "(range % 7)::DECIMAL(9,2) AS amount FROM range(60)")
    con.close()
    return path


def test_domain_tables_are_registered_for_base_tables_only(public_db, tmp_path):
    """A public column's domain table holds what the DISTINCT scan computes (ascending, NULL
    last, ordinals from 0, the column's type), under a name fixed by (table, column)."""
    metadata = loads_metadata(PUBLIC)
    backend = DuckDBBackend(public_db, metadata)
    other = DuckDBBackend(public_db, metadata)
    try:
        name = backend.domain_table("tags", "price")
        assert name == domain_table_name("tags", "price") == other.domain_table("tags", "price")
        assert name.startswith("__") and backend.domain_table("tags", "price") == name
        assert backend.execute(f"SELECT __v, __o FROM {name} ORDER BY __o") == (
            [(Decimal("1.10"), 0), (Decimal("2.50"), 1), (None, 2)],
            ["DECIMAL(9,2)", "INTEGER"])
        scan = scan_relation("tags", "price").sql(dialect="duckdb")
        assert backend.execute(f"SELECT * FROM ({scan}) ORDER BY __o")[0] == backend.execute(
            f"SELECT * FROM {name} ORDER BY __o")[0]
        assert backend.domain_table("missing", "tag") is None
    finally:
        backend.close()
        other.close()
    csv = tmp_path / "t.csv"
    csv.write_text("v\n1\n2\n")
    viewed = DuckDBBackend(None, loads_metadata(
        f"tables:\n  t:\n    public: true\n    source: {csv}\n    columns:\n      v: {{}}\n"))
    try:
        assert viewed.domain_table("t", "v") is None  # a view over a file may change
    finally:
        viewed.close()


def test_a_domain_table_is_this_connection_s_alone(public_db):
    """Registered on one backend's connection, invisible to another connection of the same
    database instance (DuckDB's temporary catalog is per connection)."""
    metadata = loads_metadata(PUBLIC)
    backend = DuckDBBackend(public_db, metadata)
    other = DuckDBBackend(public_db, metadata)
    try:
        name = backend.domain_table("tags", "tag")
        assert name is not None
        with pytest.raises(OperationalError):
            other.execute(f"SELECT * FROM {name}")
    finally:
        backend.close()
        other.close()


@pytest.mark.parametrize("column", ["tag", "price", "day", "size", "weight"])
def test_a_registered_public_domain_gives_what_the_scan_gives(public_db, column):
    """Same bins in the same order, the same key values and types, with or without a WHERE
    narrowing the domain (noise off)."""
    metadata = loads_metadata(PUBLIC)
    sqls = [f"SELECT t.{column}, COUNT(*) AS n, SUM(o.amount) AS s FROM orders o "
            f"JOIN tags t ON o.tag = t.tag GROUP BY t.{column}",
            f"SELECT t.{column}, COUNT(*) AS n FROM orders o JOIN tags t ON o.tag = t.tag "
            f"WHERE t.{column} IS NOT NULL GROUP BY t.{column}"]
    backend = RecordingDuckDBBackend(public_db, metadata)
    try:
        for sql in sqls:
            engine = Session(metadata, backend, sampler=ZeroNoise())
            registered = engine.run(sql, epsilon=1e9, delta=1e-6)
            executed = backend.executed[-1]
            assert domain_table_name("tags", column) in executed
            assert "SELECT DISTINCT" not in executed
            engine._stored = None  # the plan without the backend's promises: a DISTINCT scan
            engine._prepared.clear()
            scanned = engine.run(sql, epsilon=1e9, delta=1e-6)
            assert "SELECT DISTINCT" in backend.executed[-1]
            assert registered.rows == scanned.rows and registered.types == scanned.types
            assert len(registered.rows) >= 2
    finally:
        backend.close()


def test_fixed_domains_are_read_once_per_session(public_db):
    """A domain query that reads only registered tables and constants runs once per session
    and parameters (here the narrowing's); one that reads a public table by name runs at
    every release."""
    metadata = loads_metadata(PUBLIC)
    backend = RecordingDuckDBBackend(public_db, metadata)
    try:
        engine = Session(metadata, backend, sampler=ZeroNoise())
        sql = ("SELECT t.tag, COUNT(*) AS n FROM orders o JOIN tags t ON o.tag = t.tag "
               "WHERE t.tag <> ? GROUP BY t.tag")
        answers = []
        for bound in ("a", "a", "b", "a"):
            before = len(backend.executed)
            answers.append(engine.run(sql, [bound], epsilon=1e9, delta=1e-6).rows)
            domain_reads = [q for q in backend.executed[before:] if "__t" in q]
            assert len(domain_reads) == (1 if len(answers) in (1, 3) else 0), bound
        assert answers[0] == answers[1] == answers[3] != answers[2]
        engine._stored = None  # scanned by name: read at every release
        engine._prepared.clear()
        for _ in range(2):
            before = len(backend.executed)
            assert engine.run(sql, ["a"], epsilon=1e9, delta=1e-6).rows == answers[0]
            assert len([q for q in backend.executed[before:] if "__t" in q]) == 1
    finally:
        backend.close()


@pytest.mark.parametrize("template", [
    "SELECT COUNT(*) AS n FROM {name}",
    "SELECT __v, COUNT(*) AS n FROM {name} GROUP BY __v",
    "WITH {name} AS (SELECT tag AS __v, 0 AS __o FROM orders) "
    "SELECT t.tag, COUNT(*) AS n FROM orders o JOIN tags t ON o.tag = t.tag GROUP BY t.tag",
    "SELECT t.tag, COUNT(*) AS n FROM orders o JOIN tags t ON o.tag = t.tag "
    "JOIN orders AS {name} ON {name}.id = o.id GROUP BY t.tag",
])
def test_analyst_sql_cannot_name_a_registered_domain_table(public_db, template):
    """The registered table's name starts with ``__``: analyst SQL can neither read it nor
    shadow it (a CTE or alias of that name), whether or not it is registered yet."""
    metadata = loads_metadata(PUBLIC)
    backend = DuckDBBackend(public_db, metadata)
    try:
        engine = Session(metadata, backend, sampler=ZeroNoise())
        name = domain_table_name("tags", "tag")
        for _ in range(2):  # before and after the registration
            with pytest.raises(ProgrammingError, match="__"):
                engine.run(template.format(name=name), epsilon=1.0, delta=1e-6)
            engine.run("SELECT t.tag, COUNT(*) AS n FROM orders o JOIN tags t ON o.tag = t.tag "
                       "GROUP BY t.tag", epsilon=1.0, delta=1e-6)
            assert backend.domain_table("tags", "tag") == name
    finally:
        backend.close()
