"""A real `dpsql serve` process whose metadata declares a privacy unit: psycopg and psql see
the unit and R2T's interval in the NOTICE, and the charge is the record's."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator

import psycopg
import pytest

import dpsql
from dpsql.accounting import Ledger
from dpsql.backends import ledger_identity
from dpsql.metadata import load_metadata
from dpsql.release.avg_rows import GROUPED_AVG
from tests.server.serving import PASSWORDS, ServerProcess, launch, prepare

# one xdist worker runs this module: its server process is
# built once per run, not once per worker (issue #13)
pytestmark = pytest.mark.xdist_group("server-units")

UNITS = "privacy_unit: {table: customers, column: customer_id, max_contribution: 1024}\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("units-server")
    db, md, ledger_path, _ = prepare(tmp)
    text = md.read_text()
    for table in ("orders", "recommendations"):  # both hold the customer's id
        text = text.replace(f"  {table}:\n", f"  {table}:\n    unit: customer_id\n", 1)
    md.write_text(UNITS + text)
    database_id = ledger_identity("duckdb", str(db), load_metadata(md))
    with Ledger(ledger_path) as ledger:  # the unit changes the metadata: a new identity
        ledger.set_budget(database_id, "alice", 50.0, 1e-4)
    proc = launch(db, md, ledger_path, database_id)
    yield proc
    proc.stop()


def test_psycopg_sees_the_unit_and_the_r2t_interval(server: ServerProcess) -> None:
    details: list[str | None] = []
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.add_notice_handler(lambda d: details.append(d.message_primary + "|" + (
            d.message_detail or "")))
        cur = conn.cursor()
        cur.execute("SET dpsql.epsilon = 1")
        cur.execute("SELECT COUNT(*) AS n FROM orders o JOIN customers c "
                    "ON c.customer_id = o.customer_id WHERE c.region = 'north'")
        (n,) = cur.fetchone()
        assert isinstance(n, int)
    text, detail = details[-1].split("|", 1)
    assert "(r2t), protecting each customers.customer_id" in text
    record = json.loads(detail)
    assert record["privacy_unit"] == "customers.customer_id"
    lower, upper = record["columns"][0]["interval_95"]
    assert lower <= upper and len(record["columns"][0]["level_scales"]) == 10
    with Ledger(server.ledger, create=False) as ledger:
        assert [c.epsilon for c in ledger.status(server.database_id, "alice").history] == [1.0]


def test_a_query_of_two_units_is_refused_with_its_reason(server: ServerProcess) -> None:
    with (psycopg.connect(server.dsn(), autocommit=True) as conn,
          pytest.raises(psycopg.errors.FeatureNotSupported, match="two units")):
        conn.execute("SELECT COUNT(*) FROM orders a JOIN orders b ON a.status = b.status")


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql (postgresql-client) not installed")
def test_psql_prints_the_notice(server: ServerProcess) -> None:
    out = subprocess.run(
        ["psql", server.url(), "-c", "SET dpsql.epsilon = 1",
         "-c", "SELECT SUM(order_cost) AS s FROM orders"],
        capture_output=True, text=True, timeout=60, env={"PGPASSWORD": PASSWORDS["alice"]})
    assert out.returncode == 0, out.stderr
    assert "protecting each customers.customer_id" in out.stderr


def test_a_query_without_epsilon_says_how_a_session_sets_one(server: ServerProcess) -> None:
    # found by the units QA: the server relayed the library's "pass cursor.execute(sql,
    # params, epsilon=0.1) or ... dpsql.connect(..., epsilon=0.1)", which psql cannot do
    with (psycopg.connect(server.dsn("bob"), autocommit=True) as conn,
          pytest.raises(psycopg.errors.SyntaxErrorOrAccessRuleViolation,
                        match=r"SET dpsql\.epsilon = 0\.1") as caught):
        conn.execute("SELECT COUNT(*) FROM orders")  # bob has no default epsilon
    assert "cursor.execute" not in str(caught.value)


def test_psycopg_reads_a_grouped_avgs_interval_per_row(server: ServerProcess) -> None:
    """Under the unit a grouped AVG is the two-stage's noisy SUM over noisy COUNT per group;
    its record in the NOTICE detail carries one 95% interval per row, in the rows' order
    (dpsql.release.avg_rows), each holding its row's value, with the words for what it
    covers."""
    details: list[str] = []
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.add_notice_handler(lambda d: details.append(d.message_detail or ""))
        cur = conn.cursor()
        cur.execute("SET dpsql.epsilon = 2")
        cur.execute("SELECT status, AVG(order_cost) AS a FROM orders GROUP BY status "
                    "ORDER BY a DESC")
        rows = cur.fetchall()
    column = json.loads(details[-1])["columns"][1]
    intervals = column["row_intervals_95"]
    assert len(intervals) == len(rows) > 1
    for (_, value), (low, high) in zip(rows, intervals, strict=True):
        assert 0 <= low <= high <= 500
        assert value is None or low <= value <= high
    assert column["accuracy_note"].endswith(GROUPED_AVG)
    assert "covers the noise, not this truncation" in column["accuracy_note"]


def test_the_remote_driver_reads_the_row_intervals_as_the_record_holds_them(
        server: ServerProcess) -> None:
    """dpsql.connect(url): the record rebuilt from the NOTICE keeps its tuples (JSON gives
    lists), one (low, high) per row, each holding its row's AVG."""
    with dpsql.connect(server.url(), epsilon=2.0) as conn:
        cur = conn.cursor()
        cur.execute("SELECT status, AVG(order_cost) AS a FROM orders GROUP BY status")
        rows = cur.fetchall()
        intervals = cur.release.columns[1].row_intervals_95
    assert isinstance(intervals, tuple) and all(isinstance(i, tuple) for i in intervals)
    assert len(intervals) == len(rows)
    for (_, value), (low, high) in zip(rows, intervals, strict=True):
        assert value is None or low <= value <= high
    hash(cur.release)  # a frozen record, tuples all through
