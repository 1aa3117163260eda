"""The ledger's SQLite file: its schema, opening and validating it, and transactions on it.

:class:`LedgerFile` is the part of :class:`dpsql.accounting.Ledger` that knows nothing about
budgets: it opens (or initialises) one SQLite file, checks that it is a dpsql ledger of the
current schema that passes ``quick_check``, and runs every read and write as one transaction
committed with ``synchronous=FULL``. Every sqlite3 error leaves as an
:class:`~dpsql.errors.OperationalError` naming the file: the ledger fails closed.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path

from dpsql.errors import InterfaceError, OperationalError

# PRAGMA application_id marks the file as a dpsql ledger ("dpLd"); user_version is the schema.
_APPLICATION_ID = 0x64704C64
_SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE budgets (
    database      TEXT    NOT NULL,
    analyst       TEXT    NOT NULL,
    epsilon_total INTEGER NOT NULL CHECK (typeof(epsilon_total) = 'integer' AND epsilon_total >= 0),
    delta_total   INTEGER NOT NULL CHECK (typeof(delta_total) = 'integer' AND delta_total >= 0),
    -- running sums of this principal's charges, updated in the same transaction as each insert,
    -- so a charge is an O(1) check, and status() cross-checks them against the charges table
    epsilon_spent INTEGER NOT NULL CHECK (typeof(epsilon_spent) = 'integer' AND epsilon_spent >= 0),
    delta_spent   INTEGER NOT NULL CHECK (typeof(delta_spent) = 'integer' AND delta_spent >= 0),
    updated_at    TEXT    NOT NULL,
    PRIMARY KEY (database, analyst)
);
-- AUTOINCREMENT: charge ids are never reused, not even after reset() deleted the charges
CREATE TABLE charges (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    database    TEXT    NOT NULL,
    analyst     TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,
    epsilon     INTEGER NOT NULL CHECK (typeof(epsilon) = 'integer' AND epsilon >= 0),
    delta       INTEGER NOT NULL CHECK (typeof(delta) = 'integer' AND delta >= 0),
    mechanism   TEXT    NOT NULL,
    at          TEXT    NOT NULL
);
CREATE INDEX charges_by_principal ON charges (database, analyst, id);
CREATE TABLE cache (
    database TEXT NOT NULL,
    analyst  TEXT NOT NULL,
    key      TEXT NOT NULL,
    payload  BLOB NOT NULL,
    at       TEXT NOT NULL,
    PRIMARY KEY (database, analyst, key)
) WITHOUT ROWID;
"""

_EXPECTED_COLUMNS: dict[str, frozenset[str]] = {
    "budgets": frozenset(
        {"database", "analyst", "epsilon_total", "delta_total", "epsilon_spent", "delta_spent",
         "updated_at"}
    ),
    "charges": frozenset(
        {"id", "database", "analyst", "fingerprint", "epsilon", "delta", "mechanism", "at"}
    ),
    "cache": frozenset({"database", "analyst", "key", "payload", "at"}),
}


class LedgerFile:
    """One open ledger file (the base of :class:`dpsql.accounting.Ledger`).

    Calls are serialised by a re-entrant lock, so one instance may be shared by threads.
    """

    def __init__(
        self, path: str | os.PathLike, *, timeout: float = 10.0, create: bool = True
    ) -> None:
        """Open the ledger at ``path``; initialise it if the file is new or empty and ``create``.

        Precondition: ``path`` is a file path (":memory:" gives a non-persistent ledger, for
        tests); ``timeout`` is how long to wait for another process's lock, in seconds.
        Guarantee: on return the file is a dpsql ledger of the current schema, in WAL mode, that
        passed SQLite's quick_check. Otherwise raises OperationalError naming the file and leaves
        the file untouched: a corrupt/unreadable file, a foreign SQLite database, a ledger whose
        tables are missing or altered, a missing file when ``create`` is false, or a lock held
        longer than ``timeout``. A fresh schema is only ever created in an empty file.
        """
        self.path = os.fspath(path)
        if isinstance(self.path, bytes):
            self.path = os.fsdecode(self.path)
        self.timeout = float(timeout)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        memory = self.path == ":memory:"
        if not memory:
            p = Path(self.path)
            if p.is_dir():
                raise OperationalError(f"privacy ledger {self.path} is a directory, not a file")
            if not create and not p.exists():
                raise OperationalError(
                    f"privacy ledger {self.path} does not exist; create it with "
                    "'dpsql budget set' first"
                )
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves (Python's implicit
            # transactions would start DEFERRED ones); timeout installs SQLite's busy handler.
            conn = sqlite3.connect(
                self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise OperationalError(f"cannot open privacy ledger {self.path}: {exc}") from exc
        self._conn = conn
        try:
            with self._translate("open"):
                self._open(memory)
        except BaseException:
            conn.close()
            self._conn = None
            raise

    def _open(self, memory: bool) -> None:
        conn = self._require()
        # durability: in WAL mode FULL syncs the WAL on every commit, so a committed charge
        # survives power loss, not just a crash of this process
        conn.execute("PRAGMA synchronous=FULL")
        # the first read of the header: a non-SQLite file fails right here (SQLITE_NOTADB)
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = self._tables()
        if app_id == 0 and version == 0 and not tables:
            self._initialise(memory)
        elif app_id != _APPLICATION_ID:
            raise OperationalError(
                f"{self.path} is an SQLite database but not a dpsql privacy ledger "
                f"(tables: {', '.join(sorted(tables)) or 'none'}); refusing to use it"
            )
        elif version != _SCHEMA_VERSION:
            raise OperationalError(
                f"privacy ledger {self.path} has schema version {version}; this dpsql "
                f"understands version {_SCHEMA_VERSION}"
            )
        self._check_schema()
        problems = [row[0] for row in conn.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise OperationalError(
                f"privacy ledger {self.path} is corrupt ({'; '.join(problems[:3])}); "
                "refusing to answer queries until the owner restores it"
            )
        if not memory:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if mode.lower() != "wal":  # e.g. a ledger restored from a copy in rollback mode
                conn.execute("PRAGMA journal_mode=WAL")

    def _tables(self) -> set[str]:
        rows = self._require().execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
        return {r[0] for r in rows}

    def _initialise(self, memory: bool) -> None:
        conn = self._require()
        if not memory:
            # must happen outside a transaction; persistent in the file from now on
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("BEGIN IMMEDIATE")
        try:
            # re-check under the write lock: another process may have initialised it meanwhile
            if conn.execute("PRAGMA application_id").fetchone()[0] == 0 and not self._tables():
                # statements end with ";\n" (comments may contain ";" but never at line end)
                for statement in _SCHEMA.split(";\n"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA application_id={_APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def _check_schema(self) -> None:
        conn = self._require()
        for table, expected in _EXPECTED_COLUMNS.items():
            columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if not columns:
                raise OperationalError(
                    f"privacy ledger {self.path} is damaged: table '{table}' is missing; "
                    "refusing to answer queries until the owner restores it"
                )
            if not expected <= columns:
                raise OperationalError(
                    f"privacy ledger {self.path} is damaged: table '{table}' lacks column(s) "
                    f"{', '.join(sorted(expected - columns))}"
                )

    # -- plumbing ---------------------------------------------------------------------------

    def _require(self) -> sqlite3.Connection:
        if self._conn is None:
            raise InterfaceError(f"privacy ledger {self.path} is closed")
        return self._conn

    @contextmanager
    def _translate(self, action: str) -> Iterator[None]:
        """Turn sqlite3 errors into OperationalError with a message naming the file."""
        try:
            yield
        except sqlite3.Error as exc:
            name = getattr(exc, "sqlite_errorname", "") or ""
            text = str(exc)
            if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
                message = (
                    f"privacy ledger {self.path} is locked by another process or thread "
                    f"(waited {self.timeout:g} s during {action}); nothing was charged or "
                    "released, retry later"
                )
            elif name.startswith(("SQLITE_NOTADB", "SQLITE_CORRUPT")) or "malformed" in text:
                message = (
                    f"privacy ledger {self.path} is unreadable or corrupt ({text}); refusing to "
                    "answer queries until the owner restores it"
                )
            else:
                message = f"privacy ledger {self.path}: {action} failed: {text}"
            raise OperationalError(message) from exc

    def _rollback(self) -> None:
        conn = self._conn
        if conn is not None and conn.in_transaction:
            # the original error is the one worth reporting
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")

    @contextmanager
    def _transaction(self, action: str, begin: str) -> Iterator[sqlite3.Connection]:
        """One transaction opened with ``begin``, committed (durably) on success, rolled back
        otherwise."""
        with self._lock, self._translate(action):
            conn = self._require()
            conn.execute(begin)
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise

    def _write(self, action: str) -> AbstractContextManager[sqlite3.Connection]:
        """A write: BEGIN IMMEDIATE takes the write lock up front, so a check-then-charge
        cannot race another process."""
        return self._transaction(action, "BEGIN IMMEDIATE")

    def _read(self, action: str) -> AbstractContextManager[sqlite3.Connection]:
        """A read: one consistent snapshot for several SELECTs."""
        return self._transaction(action, "BEGIN")

    def close(self) -> None:
        """Close the file. Idempotent; any later call raises InterfaceError."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __exit__(self, *exc_info: object) -> None:
        self.close()
