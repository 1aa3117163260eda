"""The privacy-budget ledger: per (database, analyst) budgets, their charges, and the cache.

One SQLite file (see :mod:`dpsql.accounting.store`) holds, per (database identity, analyst), the
budget the data owner granted, every charge made against it and the noisy answers already paid
for. Amounts are exact fixed-point integers (:mod:`dpsql.accounting.units`); the ledger enforces
basic composition (sum of epsilons, sum of deltas) under SQLite's write lock.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime

from dpsql.accounting.composition import CompositionReport, compose
from dpsql.accounting.store import LedgerFile
from dpsql.accounting.units import _delta_float, _delta_units, _eps_float, _eps_units
from dpsql.errors import BudgetExhaustedError, OperationalError, ProgrammingError


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


class Ledger(LedgerFile):
    """Persistent, process-safe privacy-budget ledger and result cache in one SQLite file.

    Every method is atomic. Writes run in ``BEGIN IMMEDIATE`` transactions (one writer at a time
    across threads and processes; readers are never blocked in WAL mode) and are committed with
    ``synchronous=FULL`` before the method returns. One instance may be shared by threads (calls
    are serialised by a lock); after ``os.fork`` the child must open its own Ledger.

    ``database`` arguments are normalised with :func:`database_identity`, so a path and its
    realpath address the same budget.
    """

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
            units = (int(row[0]), int(row[1]), int(row[2]), int(row[3]))
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

    def __enter__(self) -> Ledger:
        return self

    def __repr__(self) -> str:
        return f"Ledger({self.path!r})"
