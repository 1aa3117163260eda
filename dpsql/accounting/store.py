"""The ledger's SQLite file: opening, upgrading and validating it, and transactions on it.

:class:`LedgerFile` is the part of :class:`dpsql.accounting.Ledger` that knows nothing about
budgets: it opens (or initialises) one SQLite file, upgrades a file of an older schema version in
place (one transaction: the file is either fully upgraded or untouched), checks that it is a
dpsql ledger of the current schema (:mod:`dpsql.accounting.schema`) that passes
``quick_check``, and runs every read and write as one transaction committed with
``synchronous=FULL``. Every sqlite3 error leaves as an :class:`~dpsql.errors.OperationalError`
naming the file: the ledger fails closed.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path

from dpsql.accounting.schema import (
    APPLICATION_ID,
    EXPECTED_COLUMNS,
    EXPECTED_TRIGGERS,
    SCHEMA_V1,
    SCHEMA_VERSION,
    UPGRADES,
    statements,
)
from dpsql.errors import InterfaceError, OperationalError


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
        passed SQLite's quick_check; a ledger of an older schema version has been upgraded in
        place, atomically. Otherwise raises OperationalError naming the file and leaves
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
        # the cache's own connection (see _cache_connection), opened on first use
        self._side: sqlite3.Connection | None = None
        self._side_lock = threading.Lock()
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
        elif app_id != APPLICATION_ID:
            raise OperationalError(
                f"{self.path} is an SQLite database but not a dpsql privacy ledger "
                f"(tables: {', '.join(sorted(tables)) or 'none'}); refusing to use it"
            )
        elif 1 <= version < SCHEMA_VERSION:
            self._upgrade()
        elif version != SCHEMA_VERSION:
            raise OperationalError(
                f"privacy ledger {self.path} has schema version {version}; this dpsql "
                f"understands versions 1 to {SCHEMA_VERSION} (a newer dpsql made it?)"
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
                # version 1, then every upgrade: new and upgraded files cannot differ
                for statement in statements(SCHEMA_V1):
                    conn.execute(statement)
                self._run_upgrades(1)
                conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def _upgrade(self) -> None:
        """Upgrade an older ledger in place, in ONE transaction: a crash or error leaves the
        file exactly as it was (still the old version), never half upgraded."""
        conn = self._require()
        conn.execute("BEGIN IMMEDIATE")
        try:
            # re-read under the write lock: another process may have upgraded it meanwhile
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version < SCHEMA_VERSION:
                self._run_upgrades(version)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise OperationalError(
                f"cannot upgrade privacy ledger {self.path} to schema version {SCHEMA_VERSION} "
                f"({exc}); the file is unchanged. Is it damaged?"
            ) from exc
        except BaseException:
            self._rollback()
            raise

    def _run_upgrades(self, version: int) -> None:
        """Inside a write transaction: every upgrade from ``version`` on, then the new version
        number (``user_version`` is part of the transaction)."""
        conn = self._require()
        for start, script in UPGRADES:
            if start >= version:
                for statement in statements(script):
                    conn.execute(statement)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def _check_schema(self) -> None:
        conn = self._require()
        for table, expected in EXPECTED_COLUMNS.items():
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
        triggers = {row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        if not triggers >= EXPECTED_TRIGGERS:
            raise OperationalError(
                f"privacy ledger {self.path} is damaged: the audit log's append-only trigger(s) "
                f"{', '.join(sorted(EXPECTED_TRIGGERS - triggers))} are missing; refusing to "
                "answer queries until the owner restores it"
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

    @contextmanager
    def _cache_connection(self, action: str) -> Iterator[sqlite3.Connection]:
        """A second connection to the file for the answer cache's hot path (lookups and the
        audit records of hits), under its own lock: a lookup reads a WAL snapshot instead of
        queueing behind the main connection's lock, which a charge holds through its durable
        commit. Its writes (hit records only) commit with ``synchronous=NORMAL``: in WAL mode
        they are atomic and survive a crash of the process, and reach the disk with the next
        durable commit; a power loss may lose the newest hit records, never a charge, a
        release or a budget. A ``:memory:`` ledger has one connection: this is the main one."""
        if self.path == ":memory:":
            with self._lock, self._translate(action):
                yield self._require()
            return
        with self._side_lock, self._translate(action):
            conn = self._side
            if conn is None:
                self._require()  # closed: InterfaceError
                conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None,
                                       check_same_thread=False)
                conn.execute("PRAGMA synchronous=NORMAL")
                self._side = conn
            yield conn

    def close(self) -> None:
        """Close the file. Idempotent; any later call raises InterfaceError."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        with self._side_lock:
            if self._side is not None:
                self._side.close()
                self._side = None

    def __exit__(self, *exc_info: object) -> None:
        self.close()
