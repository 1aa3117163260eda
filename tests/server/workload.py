"""Client workloads for the server's load, crash and cancel tests (not a test module).

:func:`load_client` is one analyst's psycopg session of mixed statements (private counts, sums,
averages and a GROUP BY with varying parameters, catalog queries, ``SET dpsql.epsilon``, and
statements that must be refused), recording what the client saw: its releases from the notice
detail JSON, its SQLSTATEs, and every column name (each client asks for its own alias, so an
answer meant for another client would show). :func:`release_loop` sends uncached private
queries until stopped or the server dies. :func:`build_big` writes the long-query database.
"""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import psycopg

from dpsql.accounting import Ledger
from dpsql.backends import ledger_identity

STATUSES = ("new", "shipped", "returned")
#: SQLSTATEs a load client may get: budget exhausted, not supported, above the owner's cap
REFUSALS = {"53400", "0A000", "42501"}


@dataclass
class ClientLog:
    """What one load client saw."""

    alias: str
    uncached: list[dict[str, Any]] = field(default_factory=list)  # notice details
    cached: int = 0
    codes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # "code: sql -> message", for the assert
    names: list[list[str]] = field(default_factory=list)  # column names of every answer
    statements: int = 0


def _statement(rng: random.Random, alias: str) -> tuple[str, list[Any], bool]:
    """(sql, parameters, private?) for one step of a load client."""
    kind = rng.randrange(10)
    if kind <= 1:
        return f"SELECT COUNT(*) AS {alias} FROM orders WHERE quantity = %s", \
            [rng.randint(1, 5)], True
    if kind == 2:
        return f"SELECT SUM(order_cost) AS {alias} FROM orders WHERE status = %s", \
            [rng.choice(STATUSES)], True
    if kind == 3:
        return f"SELECT AVG(order_cost) AS {alias} FROM orders WHERE quantity >= %s", \
            [rng.randint(1, 5)], True
    if kind == 4:
        return f"SELECT status, COUNT(*) AS {alias} FROM orders GROUP BY status", [], True
    if kind == 5:
        return f"SELECT table_name AS {alias} FROM information_schema.tables", [], False
    if kind == 6:
        return f"SET dpsql.epsilon = {rng.choice(['0.05', '0.1', '0.2'])}", [], False
    if kind == 7:  # refused before any charge: not an aggregate
        return f"SELECT order_id AS {alias} FROM orders", [], True
    if kind == 8:  # a catalog lookup with a parameter
        return f"SELECT relname AS {alias} FROM pg_catalog.pg_class WHERE relname = %s", \
            [rng.choice(["orders", "customers", "nothing"])], False
    return f"SELECT COUNT(*) AS {alias} FROM customers WHERE region = %s", \
        [rng.choice(["north", "south"])], True


def load_client(dsn: str, seed: int, alias: str, statements: int, start: threading.Barrier,
                log: ClientLog) -> None:
    """Run ``statements`` mixed statements on one connection (module docstring)."""
    rng = random.Random(seed)
    notices: list[str] = []  # details, read in the handler (psycopg frees the notice after)
    start.wait()
    with psycopg.connect(dsn, autocommit=True, connect_timeout=30) as conn:
        conn.add_notice_handler(lambda n: notices.append(n.message_detail or ""))
        for _ in range(statements):
            sql, params, private = _statement(rng, alias)
            over_cap = rng.random() < 0.05
            if over_cap:  # the owner's per-query cap is 0.5
                conn.execute("SET dpsql.epsilon = 0.6")
            notices.clear()
            log.statements += 1
            try:
                cur = conn.execute(sql, params or None)
            except psycopg.Error as exc:
                log.codes.append(exc.sqlstate or "")
                log.errors.append(f"{exc.sqlstate}: {sql} {params} -> {exc}")
                assert not notices, (sql, notices)  # a refusal releases nothing
                continue
            finally:
                if over_cap:
                    conn.execute("RESET dpsql.epsilon")
            if cur.description is None:
                continue
            log.names.append([d.name for d in cur.description])
            cur.fetchall()
            if private:
                assert len(notices) == 1, (sql, notices)
                detail = json.loads(notices[0])
                if detail["cached"]:
                    log.cached += 1
                else:
                    log.uncached.append(detail)


def make_load_ledger(path: Path, database: Path, clients: int, epsilon: float) -> list[str]:
    """A ledger with ``clients`` analysts load00, load01, ..., each with budget ``epsilon`` on
    ``database``, a default epsilon of 0.1 and a per-query cap of 0.5; returns their names."""
    names = [f"load{i:02d}" for i in range(clients)]
    database_id = ledger_identity("duckdb", str(database))
    with Ledger(path) as ledger:
        for name in names:
            ledger.add_analyst(name, f"pw-{name}", max_epsilon=0.5, default_epsilon=0.1)
            ledger.set_budget(database_id, name, epsilon, 0.0)
    return names


@dataclass
class Released:
    """One answer a client received (before the crash)."""

    analyst: str
    params: list[Any]
    rows: list[tuple[Any, ...]]


def release_loop(dsn: str, analyst: str, first: int, stop: threading.Event,
                 got: list[Released]) -> None:
    """Uncached private queries (a fresh parameter each) until ``stop`` or a dead server."""
    sql = "SELECT SUM(order_cost) AS s FROM orders WHERE order_cost > %s"
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=30) as conn:
            conn.execute("SET dpsql.epsilon = 0.01")
            k = first
            while not stop.is_set():
                params = [k / 1000]
                rows = conn.execute(sql, params).fetchall()
                got.append(Released(analyst, params, rows))
                k += 1
    except psycopg.Error:
        return  # the server was killed


BIG_ROWS = 2_000_000
BIG_KEYS = 50


def build_big(directory: Path, analyst: str, password: str) -> tuple[Path, Path, Path, str]:
    """A private table ``big`` of 2M rows whose join key ``k`` has 50 values (max_freq
    declared honestly: 40,000), its metadata, and a ledger where ``analyst`` may spend
    epsilon 10, delta 1e-3 (a self-join needs delta > 0). A self-join COUNT(*) on ``k``
    matches 8e10 pairs: it runs until cancelled."""
    db = directory / "big.duckdb"
    con = duckdb.connect(str(db))
    try:
        con.execute(f"CREATE TABLE big AS SELECT i, i % {BIG_KEYS} AS k "
                    f"FROM range({BIG_ROWS}) t(i)")
    finally:
        con.close()
    md = directory / "big.yaml"
    md.write_text(
        "tables:\n  big:\n    columns:\n"
        "      i: {max_freq: 1, type: BIGINT}\n"
        f"      k: {{max_freq: {BIG_ROWS // BIG_KEYS}, type: BIGINT}}\n")
    ledger = directory / "big.sqlite"
    database_id = ledger_identity("duckdb", str(db))
    with Ledger(ledger) as book:
        book.add_analyst(analyst, password, default_epsilon=0.5, default_delta=1e-6)
        book.set_budget(database_id, analyst, 10.0, 1e-3)
    return db, md, ledger, database_id
