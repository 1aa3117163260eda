"""Privacy budgets: the persistent ledger, composition theorems and the result cache.

DESIGN.md section 5. One SQLite file (WAL mode) holds, per (database identity, analyst):

* the budget the data owner granted (``set_budget``),
* every charge ever made against it (who, when, query fingerprint, epsilon, delta, mechanism),
* the noisy answers already paid for (the cache), so a repeated query costs nothing and returns
  the same noise (averaging repeated answers is the classic attack on DP query systems).

Contract with the engine (the reason this module exists):

1. ``cache_get`` first; a hit is released as is, at no cost.
2. Otherwise ``charge()`` BEFORE running the query. ``charge`` returns only after the charge is
   committed durably (``synchronous=FULL``), so a crash or SIGKILL after it returned cannot lose
   the charge, and a crash before it returned released nothing. If it raises, release nothing.
3. Run, add noise, ``cache_put`` the noisy payload, release.

The ledger enforces basic composition (sum of epsilons, sum of deltas), which stays valid when the
analyst chooses each (epsilon, delta) adaptively (it is a valid privacy *filter*). The advanced
(Dwork-Rothblum-Vadhan) and optimal (Kairouz-Oh-Viswanath) bounds are computed for reporting
only: those theorems assume the sequence of parameters is fixed in advance; with adaptively chosen
parameters they need the filter versions of Rogers-Roth-Ullman-Vadhan (2016), which we do not
enforce.

Everything fails closed: an unreadable, corrupt, foreign or incomplete ledger file, or a lock held
longer than the timeout, raises :class:`dpsql.errors.OperationalError` naming the file; an analyst
without a budget may spend nothing.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal, localcontext
from pathlib import Path

from dpsql.errors import (
    BudgetExhaustedError,
    InterfaceError,
    OperationalError,
    ProgrammingError,
)

# ---------------------------------------------------------------------------------------------
# Fixed-point amounts
#
# Budgets must never be overspent through floating-point drift: summing 0.01 three hundred times in
# binary floating point gives 3.0000000000000013 > 3.0 (one query refused too early) and other
# sequences drift the other way (one query too many allowed). So the ledger never adds floats.
# Every amount is stored as an integer number of fixed units and all budget arithmetic is exact
# integer arithmetic inside SQLite:
#
#   epsilon: 1 unit = 1e-12  (int64 holds up to ~9.2e6 epsilon; we cap budgets at 1e6)
#   delta:   1 unit = 1e-18  (delta <= 1 needs at most 1e18 units < 2**63)
#
# A float is read as the decimal number its repr() denotes (0.01 -> exactly 1/100, what the owner
# or analyst typed; it differs from the binary double by < 1e-17 relative, far below one unit and
# below the rounding of the noise calibration itself). Then each CHARGE is rounded UP to a whole
# unit and each BUDGET is rounded DOWN, so rounding can only ever refuse a query, never allow an
# overspend. With these units 300 charges of 0.01 against a budget of 3.0 succeed exactly 300 times.
# A delta below 1e-18 is charged as 1e-18 (conservative).
# ---------------------------------------------------------------------------------------------

EPSILON_UNIT_EXPONENT = 12
DELTA_UNIT_EXPONENT = 18
# Our own decimal context: the thread's default one may have been lowered by someone else, and
# scaleb()/addition round to the context precision. 80 digits hold every exact value we handle.
_DECIMAL = Context(prec=80)
_EPSILON_SCALE = 10**EPSILON_UNIT_EXPONENT
_DELTA_SCALE = 10**DELTA_UNIT_EXPONENT
#: Largest epsilon budget or charge the ledger accepts (keeps every sum inside SQLite's int64).
MAX_EPSILON = 1_000_000

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


def _to_units(value: float, scale_exponent: int, rounding: str, what: str, limit: int) -> int:
    """Exact integer units of ``value`` (read as its decimal repr), rounded with ``rounding``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise ProgrammingError(f"{what} must be a number, got {type(value).__name__}")
    # repr() of a float is the shortest decimal string that round-trips: the number the user wrote
    exact = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    if not exact.is_finite():
        raise ProgrammingError(f"{what} must be finite, got {value!r}")
    if exact < 0:
        raise ProgrammingError(f"{what} must be >= 0, got {value!r}")
    if exact > limit:
        raise ProgrammingError(f"{what} must be <= {limit}, got {value!r}")
    scaled = exact.scaleb(scale_exponent, context=_DECIMAL)
    return int(scaled.to_integral_value(rounding=rounding, context=_DECIMAL))


def _eps_units(value: float, *, charge: bool) -> int:
    """Epsilon in units of 1e-12: charges round up, budgets round down."""
    rounding = ROUND_CEILING if charge else ROUND_FLOOR
    return _to_units(value, EPSILON_UNIT_EXPONENT, rounding, "epsilon", MAX_EPSILON)


def _delta_units(value: float, *, charge: bool) -> int:
    """Delta in units of 1e-18: charges round up, budgets round down."""
    rounding = ROUND_CEILING if charge else ROUND_FLOOR
    return _to_units(value, DELTA_UNIT_EXPONENT, rounding, "delta", 1)


def _eps_float(units: int) -> float:
    return units / _EPSILON_SCALE  # int / int is correctly rounded in Python


def _delta_float(units: int) -> float:
    return units / _DELTA_SCALE


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


# ---------------------------------------------------------------------------------------------
# Identity and value types
# ---------------------------------------------------------------------------------------------


def database_identity(database: str | os.PathLike | None) -> str:
    """The key under which a database's budgets are kept.

    Precondition: ``database`` is what the engine passes to DuckDB (a file path), or None.
    Guarantee: None, "" and ":memory:" (also DuckDB's named ":memory:x") map to ":memory:" (all
    in-memory databases share one budget, which can only err towards spending less); a string
    containing "://" (a remote/Spark URI) is returned unchanged; anything else maps to the
    ``realpath`` of the user-expanded path, so "shop.duckdb", "./shop.duckdb" and a symlink to it
    share ONE budget. The function is idempotent.
    """
    if database is None:
        return ":memory:"
    text = os.fspath(database)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if text == "" or text.startswith(":memory:"):
        return ":memory:"
    if "://" in text:
        return text
    return os.path.realpath(os.path.expanduser(text))


@dataclass(frozen=True)
class Charge:
    """One committed charge. Amounts are the charged (rounded-up) fixed-point values."""

    analyst: str
    database: str
    fingerprint: str
    epsilon: float
    delta: float
    mechanism: str
    at: str  # UTC, ISO 8601 with microseconds
    id: int  # never reused within a ledger file


@dataclass(frozen=True)
class BudgetStatus:
    """A consistent snapshot of one principal's budget.

    The float fields are derived from exact integer units; ``epsilon_remaining`` and
    ``delta_remaining`` subtract the exact units (so after 300 charges of 0.01 against 3.0 the
    remainder is exactly 0.0, not a float residue).
    """

    epsilon_total: float
    delta_total: float
    epsilon_spent: float
    delta_spent: float
    history: tuple[Charge, ...] = ()
    # (epsilon_total, delta_total, epsilon_spent, delta_spent) in fixed units; None when built by
    # hand, in which case the remainders fall back to float subtraction
    _units: tuple[int, int, int, int] | None = field(default=None, repr=False, compare=False)

    @property
    def epsilon_remaining(self) -> float:
        """Epsilon still available (never negative)."""
        if self._units is not None:
            return _eps_float(max(0, self._units[0] - self._units[2]))
        return max(0.0, self.epsilon_total - self.epsilon_spent)

    @property
    def delta_remaining(self) -> float:
        """Delta still available (never negative)."""
        if self._units is not None:
            return _delta_float(max(0, self._units[1] - self._units[3]))
        return max(0.0, self.delta_total - self.delta_spent)

    def composition(self, delta_prime: float = 1e-6) -> CompositionReport:
        """All composition bounds of this history at slack ``delta_prime`` (:func:`compose`)."""
        return compose([(c.epsilon, c.delta) for c in self.history], delta_prime)


# ---------------------------------------------------------------------------------------------
# The ledger
# ---------------------------------------------------------------------------------------------


class Ledger:
    """Persistent, process-safe privacy-budget ledger and result cache in one SQLite file.

    Every method is atomic. Writes run in ``BEGIN IMMEDIATE`` transactions (one writer at a time
    across threads and processes; readers are never blocked in WAL mode) and are committed with
    ``synchronous=FULL`` before the method returns. One instance may be shared by threads (calls
    are serialised by a lock); after ``os.fork`` the child must open its own Ledger.

    ``database`` arguments are normalised with :func:`database_identity`, so a path and its
    realpath address the same budget.
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

    @staticmethod
    def _principal(database: str, analyst: str) -> tuple[str, str]:
        if not isinstance(analyst, str) or not analyst:
            raise ProgrammingError("analyst must be a non-empty string")
        return database_identity(database), analyst

    # -- public API -------------------------------------------------------------------------

    def set_budget(self, database: str, analyst: str, epsilon: float, delta: float) -> None:
        """Grant ``analyst`` a total budget of (epsilon, delta) on ``database`` (owner action).

        Precondition: 0 <= epsilon <= MAX_EPSILON, 0 <= delta <= 1, both finite.
        Guarantee: the totals are replaced (rounded DOWN to whole units), charges already made
        still count; committed durably before returning. Lowering a total below what was spent
        is allowed and simply blocks further charges.
        """
        key = self._principal(database, analyst)
        eps = _eps_units(epsilon, charge=False)
        dlt = _delta_units(delta, charge=False)
        with self._write("set_budget") as conn:
            conn.execute(
                """INSERT INTO budgets (database, analyst, epsilon_total, delta_total,
                                        epsilon_spent, delta_spent, updated_at)
                   VALUES (?, ?, ?, ?,
                           (SELECT coalesce(sum(epsilon), 0) FROM charges
                             WHERE database = ? AND analyst = ?),
                           (SELECT coalesce(sum(delta), 0) FROM charges
                             WHERE database = ? AND analyst = ?), ?)
                   ON CONFLICT (database, analyst) DO UPDATE SET
                       epsilon_total = excluded.epsilon_total,
                       delta_total = excluded.delta_total,
                       updated_at = excluded.updated_at""",
                (*key, eps, dlt, *key, *key, _now()),
            )

    def status(self, database: str, analyst: str) -> BudgetStatus:
        """A consistent snapshot of ``analyst``'s budget on ``database``, with full history.

        Guarantee: an analyst without a budget gets totals of 0 (nothing allowed). Raises
        OperationalError if the recorded running totals disagree with the charges table
        (a tampered or damaged ledger), rather than report a wrong remainder.
        """
        key = self._principal(database, analyst)
        with self._read("status") as conn:
            row = conn.execute(
                """SELECT epsilon_total, delta_total, epsilon_spent, delta_spent FROM budgets
                   WHERE database = ? AND analyst = ?""",
                key,
            ).fetchone()
            rows = conn.execute(
                """SELECT id, fingerprint, epsilon, delta, mechanism, at FROM charges
                   WHERE database = ? AND analyst = ? ORDER BY id""",
                key,
            ).fetchall()
        eps_sum = sum(r[2] for r in rows)
        dlt_sum = sum(r[3] for r in rows)
        if row is None:
            units = (0, 0, eps_sum, dlt_sum)
        else:
            units = tuple(int(v) for v in row)
            if (units[2], units[3]) != (eps_sum, dlt_sum):
                raise OperationalError(
                    f"privacy ledger {self.path} is inconsistent: the spending recorded for "
                    f"analyst '{analyst}' does not match the charges; refusing to answer queries "
                    "until the owner checks the file"
                )
        history = tuple(
            Charge(
                analyst=key[1], database=key[0], fingerprint=fp, epsilon=_eps_float(e),
                delta=_delta_float(d), mechanism=mech, at=at, id=cid,
            )
            for cid, fp, e, d, mech, at in rows
        )
        return BudgetStatus(
            epsilon_total=_eps_float(units[0]),
            delta_total=_delta_float(units[1]),
            epsilon_spent=_eps_float(units[2]),
            delta_spent=_delta_float(units[3]),
            history=history,
            _units=units,  # type: ignore[arg-type]
        )

    def charge(
        self,
        database: str,
        analyst: str,
        *,
        fingerprint: str,
        epsilon: float,
        delta: float,
        mechanism: str,
    ) -> int:
        """Atomically spend (epsilon, delta) of ``analyst``'s budget on ``database``.

        Precondition: the caller has NOT released anything derived from the query yet.
        Guarantee: if this returns, the charge (rounded UP to whole units) is committed durably
        and its id is returned; spent + this <= total held for both epsilon and delta at commit
        time, under the write lock, so concurrent processes can never overspend. Otherwise raises
        BudgetExhaustedError (requested vs remaining; no data-dependent numbers) or
        OperationalError (ledger unusable/locked) and writes nothing: the caller must release
        nothing. An analyst without a budget can be charged nothing, not even (0, 0).
        """
        key = self._principal(database, analyst)
        eps = _eps_units(epsilon, charge=True)
        dlt = _delta_units(delta, charge=True)
        with self._write("charge") as conn:
            row = conn.execute(
                """SELECT epsilon_total, delta_total, epsilon_spent, delta_spent FROM budgets
                   WHERE database = ? AND analyst = ?""",
                key,
            ).fetchone()
            if row is None:
                raise BudgetExhaustedError(
                    f"analyst '{analyst}' has no privacy budget on database {key[0]}; "
                    "the data owner must grant one with 'dpsql budget set'. Nothing was charged."
                )
            eps_total, dlt_total, eps_spent, dlt_spent = row
            if eps_spent + eps > eps_total or dlt_spent + dlt > dlt_total:
                raise BudgetExhaustedError(
                    f"privacy budget exhausted for analyst '{analyst}' on database {key[0]}: "
                    f"this query needs epsilon={_eps_float(eps)!r}, delta={_delta_float(dlt)!r} "
                    f"but only epsilon={_eps_float(max(0, eps_total - eps_spent))!r}, "
                    f"delta={_delta_float(max(0, dlt_total - dlt_spent))!r} remain. "
                    "Nothing was charged; ask for a smaller epsilon/delta or a larger budget."
                )
            cursor = conn.execute(
                """INSERT INTO charges (database, analyst, fingerprint, epsilon, delta,
                                        mechanism, at)
                   VALUES (?, ?, ?, ?, ?, ?, ?)""",
                (*key, str(fingerprint), eps, dlt, str(mechanism), _now()),
            )
            conn.execute(
                """UPDATE budgets SET epsilon_spent = epsilon_spent + ?,
                                      delta_spent = delta_spent + ?
                   WHERE database = ? AND analyst = ?""",
                (eps, dlt, *key),
            )
            charge_id = cursor.lastrowid
        assert charge_id is not None
        return int(charge_id)

    def refund(self, database: str, analyst: str, charge_id: int) -> None:
        """Undo charge ``charge_id`` of ``analyst`` on ``database``: its row is deleted and its
        amounts leave the running sums, in one durable transaction.

        Precondition: nothing derived from the charged query was released (the session calls
        this only when the query failed or was cancelled before its answer existed).
        Guarantee: the budget is as if the charge had never been made; a process killed before
        the refund commits keeps the charge (fail safe). Raises OperationalError when no such
        charge of this principal exists (already refunded, or reset by the owner).
        """
        key = self._principal(database, analyst)
        with self._write("refund") as conn:
            row = conn.execute(
                "SELECT epsilon, delta FROM charges WHERE id = ? AND database = ? AND analyst = ?",
                (int(charge_id), *key),
            ).fetchone()
            if row is None:
                raise OperationalError(
                    f"privacy ledger {self.path}: charge {charge_id} of analyst '{analyst}' is "
                    "not on the ledger, so it cannot be refunded"
                )
            conn.execute("DELETE FROM charges WHERE id = ?", (int(charge_id),))
            conn.execute(
                """UPDATE budgets SET epsilon_spent = epsilon_spent - ?,
                                      delta_spent = delta_spent - ?
                   WHERE database = ? AND analyst = ?""",
                (row[0], row[1], *key),
            )

    def reset(self, database: str, analyst: str) -> None:
        """Forget all of ``analyst``'s charges on ``database`` (owner action); keep the budget.

        Cached answers are kept: they were paid for, and re-releasing them costs nothing.
        """
        key = self._principal(database, analyst)
        with self._write("reset") as conn:
            conn.execute("DELETE FROM charges WHERE database = ? AND analyst = ?", key)
            conn.execute(
                """UPDATE budgets SET epsilon_spent = 0, delta_spent = 0, updated_at = ?
                   WHERE database = ? AND analyst = ?""",
                (_now(), *key),
            )

    def cache_get(self, database: str, analyst: str, key: str) -> bytes | None:
        """The payload stored under ``key`` for this principal, or None."""
        principal = self._principal(database, analyst)
        with self._lock, self._translate("cache_get"):
            row = self._require().execute(
                "SELECT payload FROM cache WHERE database = ? AND analyst = ? AND key = ?",
                (*principal, key),
            ).fetchone()
        return None if row is None else bytes(row[0])

    def cache_put(self, database: str, analyst: str, key: str, payload: bytes) -> None:
        """Store ``payload`` under ``key`` (last write wins), durably, for later cache_get."""
        principal = self._principal(database, analyst)
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise ProgrammingError("cache payload must be bytes")
        with self._write("cache_put") as conn:
            conn.execute(
                """INSERT INTO cache (database, analyst, key, payload, at) VALUES (?, ?, ?, ?, ?)
                   ON CONFLICT (database, analyst, key) DO UPDATE SET
                       payload = excluded.payload, at = excluded.at""",
                (*principal, key, bytes(payload), _now()),
            )

    def close(self) -> None:
        """Close the file. Idempotent; any later call raises InterfaceError."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({self.path!r})"


# ---------------------------------------------------------------------------------------------
# Composition (pure functions)
#
# Inputs are sequences of (epsilon_i, delta_i); every function returns (epsilon, delta) such that
# the k-fold adaptive composition of mechanisms with those parameters is (epsilon, delta)-DP.
# ---------------------------------------------------------------------------------------------

# Relative slack added to computed KOV deltas so floating-point error (lgamma, exp of logs, ~1e-12
# relative for k ~ 1e4) can only make a reported delta larger, never smaller.
_KOV_DELTA_SLACK = 1e-9


def _pairs(charges: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out = []
    for eps, dlt in charges:
        eps, dlt = float(eps), float(dlt)
        if not (math.isfinite(eps) and eps >= 0 and 0 <= dlt <= 1):
            raise ProgrammingError(f"invalid charge (epsilon={eps!r}, delta={dlt!r})")
        out.append((eps, dlt))
    return out


def _check_delta_prime(delta_prime: float) -> float:
    delta_prime = float(delta_prime)
    if not 0 < delta_prime < 1:
        raise ProgrammingError(f"delta' must be in (0, 1), got {delta_prime!r}")
    return delta_prime


def _one_minus_prod_one_minus(deltas: Iterable[float]) -> float:
    """1 - prod(1 - d) computed in log space (no cancellation for tiny d, no underflow)."""
    # max() turns -0.0 into 0.0 for display
    return max(0.0, -math.expm1(math.fsum(math.log1p(-d) if d < 1 else -math.inf for d in deltas)))


def basic_composition(charges: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """Basic composition: (sum epsilon_i, sum delta_i).

    Valid even when each (epsilon_i, delta_i) is chosen adaptively; this is what the ledger
    enforces. Summed exactly in decimal (each float read as its repr, as the ledger does), then
    rounded once, so three charges of 0.1 give 0.3 like the ledger's ``epsilon_spent``.
    """
    pairs = _pairs(charges)
    with localcontext(_DECIMAL):
        eps = sum((Decimal(repr(e)) for e, _ in pairs), Decimal(0))
        dlt = sum((Decimal(repr(d)) for _, d in pairs), Decimal(0))
    return float(eps), min(1.0, float(dlt))


def advanced_composition(
    charges: Iterable[tuple[float, float]], delta_prime: float
) -> tuple[float, float]:
    """Advanced composition (Dwork-Rothblum-Vadhan 2010), heterogeneous form.

    Returns (sqrt(2 ln(1/delta') * sum eps_i^2) + sum eps_i (e^eps_i - 1), sum delta_i + delta').
    Homogeneous case: eps sqrt(2k ln(1/delta')) + k eps (e^eps - 1). Not capped at basic: for
    large epsilons it can exceed sum eps_i (compare with :func:`basic_composition`). An empty
    sequence composes to (0, 0).
    """
    delta_prime = _check_delta_prime(delta_prime)
    pairs = _pairs(charges)
    if not pairs:
        return 0.0, 0.0
    sum_sq = math.fsum(e * e for e, _ in pairs)
    drift = math.fsum(e * math.expm1(e) for e, _ in pairs)
    eps = math.sqrt(2.0 * math.log(1.0 / delta_prime) * sum_sq) + drift
    return eps, min(1.0, math.fsum(d for _, d in pairs) + delta_prime)


def kov_bound(charges: Iterable[tuple[float, float]], delta_prime: float) -> tuple[float, float]:
    """Kairouz-Oh-Viswanath closed-form bound (their Theorem 3.5; the seeds' "自适应选择").

    For mechanisms (eps_i, delta_i) and slack delta' returns (eps', 1 - (1-delta') prod(1-delta_i))
    with eps' = min{ sum eps_i,
                     sum eps_i tanh(eps_i/2) + sqrt(2 sum eps_i^2 ln(e + sqrt(sum eps_i^2)/delta')),
                     sum eps_i tanh(eps_i/2) + sqrt(2 sum eps_i^2 ln(1/delta')) },
    using (e^x - 1)/(e^x + 1) = tanh(x/2). Valid for heterogeneous charges as stated; the
    homogeneous case is the seed formula with k eps (e^eps-1)/(e^eps+1) + eps sqrt(2k ln ...).
    """
    delta_prime = _check_delta_prime(delta_prime)
    pairs = _pairs(charges)
    if not pairs:
        return 0.0, 0.0
    total = math.fsum(e for e, _ in pairs)
    sum_sq = math.fsum(e * e for e, _ in pairs)
    drift = math.fsum(e * math.tanh(e / 2.0) for e, _ in pairs)
    second = drift + math.sqrt(2.0 * sum_sq * math.log(math.e + math.sqrt(sum_sq) / delta_prime))
    third = drift + math.sqrt(2.0 * sum_sq * math.log(1.0 / delta_prime))
    delta = _one_minus_prod_one_minus([delta_prime, *(d for _, d in pairs)])
    return min(total, second, third), delta


def _log1pexp(x: float) -> float:
    """log(1 + e^x) without overflow."""
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


def kov_delta(epsilon: float, k: int, i: int) -> float:
    """The seed's delta_i for k-fold composition of epsilon-DP mechanisms (KOV Theorem 3.3).

    delta_i = sum_{l=0}^{i-1} C(k,l) (e^{(k-l)eps} - e^{(k-2i+l)eps}) / (1 + e^eps)^k,
    i in 0..floor(k/2). Computed term by term in log space (lgamma binomials,
    log(1 - e^{-2(i-l)eps}) via expm1, log-sum-exp), so k up to 1e5 neither overflows nor
    cancels; then inflated by a 1e-9 relative slack so rounding can only overstate it.
    """
    if not (isinstance(k, int) and k >= 0 and isinstance(i, int) and 0 <= i <= k // 2):
        raise ProgrammingError(f"need integers 0 <= i <= k/2, got k={k!r}, i={i!r}")
    if i == 0 or epsilon == 0:
        return 0.0
    log_norm = k * _log1pexp(epsilon)
    log_fact_k = math.lgamma(k + 1)
    logs = [
        log_fact_k - math.lgamma(ell + 1) - math.lgamma(k - ell + 1)
        + (k - ell) * epsilon
        + math.log(-math.expm1(-2.0 * (i - ell) * epsilon))
        - log_norm
        for ell in range(i)
    ]
    top = max(logs)
    value = math.exp(top) * math.fsum(math.exp(x - top) for x in logs)
    return min(1.0, value * (1.0 + _KOV_DELTA_SLACK))


def optimal_homogeneous_composition(
    epsilon: float, delta: float, k: int, delta_prime: float
) -> tuple[float, float]:
    """Optimal composition of k (epsilon, delta)-DP mechanisms (Kairouz-Oh-Viswanath Thm 3.3).

    The k-fold adaptive composition is ((k-2i) eps, 1 - (1-delta)^k (1-delta_i))-DP for every
    i in 0..floor(k/2), and these points are tight. Returns the smallest (k-2i) eps with
    delta_i <= delta' (found by bisection: delta_i grows with i), together with the delta it
    actually achieves, 1 - (1-delta)^k (1-delta_i) <= 1 - (1-delta)^k (1-delta'). The answer lies
    on the grid of multiples of epsilon, so it may exceed the continuous optimum by < 2 eps (and
    hence exceed :func:`kov_bound` by as much). k = 0 gives (0, 0).
    """
    delta_prime = _check_delta_prime(delta_prime)
    _pairs([(epsilon, delta)])
    if not isinstance(k, int) or k < 0:
        raise ProgrammingError(f"k must be a non-negative integer, got {k!r}")
    if k == 0:
        return 0.0, 0.0
    if epsilon == 0:
        return 0.0, _one_minus_prod_one_minus([delta] * k)
    lo, hi = 0, k // 2  # invariant: delta_lo <= delta'; answer in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if kov_delta(epsilon, k, mid) <= delta_prime:
            lo = mid
        else:
            hi = mid - 1
    delta_i = kov_delta(epsilon, k, lo)
    # multiply in decimal like basic_composition, so (100 - 52) * 0.1 reads 4.8, not 4.800...01
    eps = float(_DECIMAL.multiply(Decimal(k - 2 * lo), Decimal(repr(float(epsilon)))))
    return eps, _one_minus_prod_one_minus([*([delta] * k), delta_i])


@dataclass(frozen=True)
class PrivacyBound:
    """One composition result: the composition is (epsilon, delta)-DP, by the named method."""

    method: str
    epsilon: float
    delta: float
    note: str = ""


@dataclass(frozen=True)
class CompositionReport:
    """Basic, advanced (DRV), KOV closed-form and KOV optimal bounds for one charge history."""

    k: int
    delta_prime: float
    homogeneous: bool
    basic: PrivacyBound
    advanced: PrivacyBound
    kov_bound: PrivacyBound
    kov_optimal: PrivacyBound

    def bounds(self) -> tuple[PrivacyBound, ...]:
        """The four bounds in display order."""
        return (self.basic, self.advanced, self.kov_bound, self.kov_optimal)


def compose(charges: Sequence[tuple[float, float]], delta_prime: float = 1e-6) -> CompositionReport:
    """All composition bounds for ``charges`` with slack ``delta_prime``.

    Guarantee, for heterogeneous charges (not all (epsilon_i, delta_i) equal):
    ``basic``, ``advanced`` (DRV) and ``kov_bound`` (KOV Theorem 3.5) are computed from the
    individual charges; ``kov_optimal`` is the optimal homogeneous bound applied with
    epsilon = max eps_i and delta = max delta_i, a valid but looser upper bound (every
    (eps_i, delta_i)-DP mechanism is also (max eps, max delta)-DP); its note says so. The exact
    optimum for heterogeneous parameters is #P-hard (Murtagh-Vadhan 2016) and not attempted.
    The advanced and KOV figures assume the parameters were fixed in advance; the ledger
    enforces ``basic``, which holds for adaptively chosen parameters too.
    """
    delta_prime = _check_delta_prime(delta_prime)
    pairs = _pairs(charges)
    k = len(pairs)
    homogeneous = len(set(pairs)) <= 1
    eps_b, dlt_b = basic_composition(pairs)
    eps_a, dlt_a = advanced_composition(pairs, delta_prime)
    eps_k, dlt_k = kov_bound(pairs, delta_prime)
    if k == 0:
        eps_o, dlt_o, note = 0.0, 0.0, "no charges"
    elif homogeneous:
        eps_o, dlt_o = optimal_homogeneous_composition(pairs[0][0], pairs[0][1], k, delta_prime)
        note = f"exact for {k} charges of epsilon={pairs[0][0]!r}, delta={pairs[0][1]!r}"
    else:
        eps_max = max(e for e, _ in pairs)
        dlt_max = max(d for _, d in pairs)
        eps_o, dlt_o = optimal_homogeneous_composition(eps_max, dlt_max, k, delta_prime)
        note = (
            f"upper bound: heterogeneous charges treated as {k} charges of "
            f"epsilon={eps_max!r}, delta={dlt_max!r} (the maxima)"
        )
    return CompositionReport(
        k=k,
        delta_prime=delta_prime,
        homogeneous=homogeneous,
        basic=PrivacyBound("basic", eps_b, dlt_b, "sum of epsilons and deltas; enforced"),
        advanced=PrivacyBound(
            "advanced (DRV)", eps_a, dlt_a, "Dwork-Rothblum-Vadhan, sum of deltas + delta'"
        ),
        kov_bound=PrivacyBound(
            "KOV bound", eps_k, dlt_k, "Kairouz-Oh-Viswanath closed form (Thm 3.5)"
        ),
        kov_optimal=PrivacyBound("KOV optimal", eps_o, dlt_o, note),
    )


__all__ = [
    "DELTA_UNIT_EXPONENT",
    "EPSILON_UNIT_EXPONENT",
    "MAX_EPSILON",
    "BudgetStatus",
    "Charge",
    "CompositionReport",
    "Ledger",
    "PrivacyBound",
    "advanced_composition",
    "basic_composition",
    "compose",
    "database_identity",
    "kov_bound",
    "kov_delta",
    "optimal_homogeneous_composition",
]
