"""The privacy-budget ledger: per (database, analyst) budgets, their charges, and the cache.

One SQLite file (see :mod:`dpsql.accounting.store`) holds, per (database identity, analyst), the
budget the data owner granted, every charge made against it and the noisy answers already paid
for. Amounts are exact fixed-point integers (:mod:`dpsql.accounting.units`); the ledger enforces
the budget's filter (:mod:`dpsql.accounting.filters`: basic composition, the sum of epsilons and
of deltas, by default; or a Rényi, zCDP or GDP filter over the charges' privacy curves) under
SQLite's write lock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dpsql.accounting.analysts import AnalystBook
from dpsql.accounting.audit import CACHE_UPSERT, AuditBook, insert_event, to_json
from dpsql.accounting.curves import PrivacyCurve
from dpsql.accounting.filters import BudgetFilter
from dpsql.accounting.principal import database_identity, now, principal
from dpsql.accounting.status import BudgetStatus, Charge, overspent_totals
from dpsql.accounting.units import _delta_float, _delta_units, _eps_float, _eps_units
from dpsql.errors import BudgetExhaustedError, OperationalError, ProgrammingError

__all__ = ["BudgetStatus", "Charge", "Ledger", "database_identity"]

# A charge counts against its budget while it is neither refunded nor cleared by a reset.
_LIVE = "refunded_at IS NULL AND reset_id IS NULL"


# ---------------------------------------------------------------------------------------------
# The ledger
# ---------------------------------------------------------------------------------------------


class Ledger(AnalystBook, AuditBook):
    """Persistent, process-safe privacy-budget ledger, audit log, analyst accounts and result
    cache in one SQLite file.

    Every method is atomic. Writes run in ``BEGIN IMMEDIATE`` transactions (one writer at a time
    across threads and processes; readers are never blocked in WAL mode) and are committed with
    ``synchronous=FULL`` before the method returns. One instance may be shared by threads (calls
    are serialised by a lock); after ``os.fork`` the child must open its own Ledger.

    ``database`` arguments are normalised with :func:`database_identity`, so a path and its
    realpath address the same budget. Accounts: :class:`~dpsql.accounting.analysts.AnalystBook`;
    the audit log: :class:`~dpsql.accounting.audit.AuditBook`.
    """

    # -- budgets ----------------------------------------------------------------------------

    def set_budget(self, database: str, analyst: str, epsilon: float, delta: float, *,
                   filter: str = "basic", alpha: float | None = None) -> None:
        """Grant ``analyst`` a total budget of (epsilon, delta) on ``database`` (owner action),
        enforced by ``filter`` (:mod:`dpsql.accounting.filters`: ``basic``, ``renyi`` at order
        ``alpha``, ``zcdp`` or ``gdp``).

        Precondition: 0 <= epsilon <= MAX_EPSILON, 0 <= delta <= 1, both finite.
        Guarantee: the totals and the filter are replaced (totals rounded DOWN to whole
        units), charges already made still count; committed durably before returning, with a
        "budget set" event in the audit log. Lowering a total below what was spent is allowed
        and simply blocks further charges. ProgrammingError, writing nothing, for a filter
        the totals cannot carry (BudgetFilter.checked) or a Rényi/zCDP/GDP filter over counting
        charges without a curve (made under basic composition by a release no curve covers,
        or before schema version 4): reset the spending first.
        """
        key = principal(database, analyst)
        eps = _eps_units(epsilon, charge=False)
        dlt = _delta_units(delta, charge=False)
        rule = BudgetFilter.checked(filter, alpha, _eps_float(eps), _delta_float(dlt))
        with self._write("set_budget") as conn:
            if rule.name != "basic":
                try:
                    rule.spent(conn, key)
                except OperationalError as exc:
                    raise ProgrammingError(
                        f"cannot put this budget under the {rule.label}: {exc.message}"
                    ) from None
            conn.execute(
                f"""INSERT INTO budgets (database, analyst, epsilon_total, delta_total,
                                        epsilon_spent, delta_spent, updated_at, filter, alpha)
                   VALUES (?, ?, ?, ?,
                           (SELECT coalesce(sum(epsilon), 0) FROM charges
                             WHERE database = ? AND analyst = ? AND {_LIVE}),
                           (SELECT coalesce(sum(delta), 0) FROM charges
                             WHERE database = ? AND analyst = ? AND {_LIVE}), ?, ?, ?)
                   ON CONFLICT (database, analyst) DO UPDATE SET
                       epsilon_total = excluded.epsilon_total,
                       delta_total = excluded.delta_total,
                       updated_at = excluded.updated_at,
                       filter = excluded.filter,
                       alpha = excluded.alpha""",
                (*key, eps, dlt, *key, *key, now(), rule.name, rule.alpha),
            )
            detail: dict[str, Any] = {"epsilon": _eps_float(eps), "delta": _delta_float(dlt)}
            if rule.name != "basic":
                detail.update(filter=rule.name, alpha=rule.alpha)
            insert_event(conn, "budget set", database=key[0], analyst=key[1], detail=detail)

    def status(self, database: str, analyst: str) -> BudgetStatus:
        """A consistent snapshot of ``analyst``'s budget on ``database``, with the history of
        the charges that count (refunded and reset ones are in :meth:`audit` only).

        Guarantee: an analyst without a budget gets totals of 0 (nothing allowed). Raises
        OperationalError if the recorded running totals disagree with the charges table
        (a tampered or damaged ledger), rather than report a wrong remainder.
        """
        key = principal(database, analyst)
        with self._read("status") as conn:
            row = conn.execute(
                """SELECT epsilon_total, delta_total, epsilon_spent, delta_spent, filter, alpha
                   FROM budgets WHERE database = ? AND analyst = ?""",
                key,
            ).fetchone()
            rule = None if row is None else BudgetFilter(
                str(row[4]), row[5], _eps_float(int(row[0])), _delta_float(int(row[1])))
            filter_spent = 0.0
            if rule is not None and rule.name != "basic":
                try:
                    filter_spent = float(rule.spent(conn, key))
                except OperationalError:  # a charge without a curve: nothing fits
                    filter_spent = math.inf
            rows = conn.execute(
                f"""SELECT id, fingerprint, epsilon, delta, mechanism, at FROM charges
                   WHERE database = ? AND analyst = ? AND {_LIVE} ORDER BY id""",
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
            filter=rule.name if rule is not None else "basic",
            alpha=rule.alpha if rule is not None else None,
            filter_total=rule.total if rule is not None else 0.0,
            filter_spent=filter_spent,
        )

    def budgets(self) -> list[tuple[str, str]]:
        """Every (database identity, analyst) that has a budget (set by :meth:`set_budget`),
        sorted; an analyst absent from this list can be charged nothing."""
        with self._read("budgets") as conn:
            rows = conn.execute(
                "SELECT database, analyst FROM budgets ORDER BY database, analyst").fetchall()
        return [(str(d), str(a)) for d, a in rows]

    # -- charges ----------------------------------------------------------------------------

    def charge(
        self,
        database: str,
        analyst: str,
        *,
        fingerprint: str,
        epsilon: float,
        delta: float,
        mechanism: str,
        sql: str | None = None,
        params: Sequence[Any] | None = None,
        curve: PrivacyCurve | None = None,
    ) -> int:
        """Atomically spend (epsilon, delta) of ``analyst``'s budget on ``database``, and
        record the query (``sql``, ``params``) and the release's privacy ``curve``
        (:mod:`dpsql.accounting.curves`; None when none covers it) in the audit log with it.

        Precondition: the caller has NOT released anything derived from the query yet.
        Guarantee: if this returns, the charge (rounded UP to whole units) is committed durably
        and its id is returned; spent + this <= total held for both epsilon and delta at commit
        time, under the write lock, so concurrent processes can never overspend. Otherwise raises
        BudgetExhaustedError (requested vs remaining; no data-dependent numbers),
        ProgrammingError (the amount is above the cap of the analyst's account) or
        OperationalError (ledger unusable/locked) and writes nothing: the caller must release
        nothing. An analyst without a budget can be charged nothing, not even (0, 0).

        The budget's filter decides (:mod:`dpsql.accounting.filters`): ``basic`` checks the
        epsilon and delta sums as above; ``renyi``, ``zcdp`` and ``gdp`` check spent + the
        curve's cost <= the filter's total, exactly, under the same lock (BudgetExhaustedError
        otherwise), and refuse a release without a curve (under ``gdp``: without a mu)
        (NotSupportedError), writing nothing.
        """
        key = principal(database, analyst)
        eps = _eps_units(epsilon, charge=True)
        dlt = _delta_units(delta, charge=True)
        if sql is not None and not isinstance(sql, str):
            raise ProgrammingError(f"sql must be a string, got {type(sql).__name__}")
        params_json = None if params is None else to_json(list(params))
        with self._write("charge") as conn:
            self._check_caps(conn, analyst, eps, dlt)
            row = conn.execute(
                """SELECT epsilon_total, delta_total, epsilon_spent, delta_spent, filter, alpha
                   FROM budgets WHERE database = ? AND analyst = ?""",
                key,
            ).fetchone()
            if row is None:
                raise BudgetExhaustedError(
                    f"analyst '{analyst}' has no privacy budget on database {key[0]}; "
                    "the data owner must grant one with 'dpsql budget set'. Nothing was charged."
                )
            eps_total, dlt_total, eps_spent, dlt_spent, rule_name, alpha = row
            rule = BudgetFilter(str(rule_name), alpha, _eps_float(eps_total),
                                _delta_float(dlt_total))
            rule.admit(conn, key, curve)
            if rule.name == "basic" and (eps_spent + eps > eps_total
                                         or dlt_spent + dlt > dlt_total):
                raise BudgetExhaustedError(
                    f"privacy budget exhausted for analyst '{analyst}' on database {key[0]}: "
                    f"this query needs epsilon={_eps_float(eps)!r}, delta={_delta_float(dlt)!r} "
                    f"but only epsilon={_eps_float(max(0, eps_total - eps_spent))!r}, "
                    f"delta={_delta_float(max(0, dlt_total - dlt_spent))!r} remain"
                    + (f"{over}. Nothing was charged; the data owner must raise the budget."
                       if (over := _overspent(eps_total, dlt_total, eps_spent, dlt_spent))
                       else ". Nothing was charged; ask for a smaller epsilon/delta or a "
                       "larger budget.")
                )
            cursor = conn.execute(
                """INSERT INTO charges (database, analyst, fingerprint, epsilon, delta,
                                        mechanism, at, sql, params, curve)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (*key, str(fingerprint), eps, dlt, str(mechanism), now(), sql, params_json,
                 None if curve is None else curve.to_json()),
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

    @staticmethod
    def _check_caps(conn: Any, analyst: str, eps: int, dlt: int) -> None:
        """Inside the charge's transaction: refuse an amount above the analyst account's
        per-query cap (no account, or no cap: nothing to check)."""
        row = conn.execute(
            "SELECT max_epsilon, max_delta FROM analysts WHERE name = ?", (analyst,)
        ).fetchone()
        if row is None:
            return
        for what, units, cap, to_units, to_float in (
                ("epsilon", eps, row[0], _eps_units, _eps_float),
                ("delta", dlt, row[1], _delta_units, _delta_float)):
            if cap is not None and units > to_units(cap, charge=False):
                raise ProgrammingError(
                    f"analyst '{analyst}' may spend at most {what}={cap!r} on one query (the "
                    f"data owner's cap); this query needs {what}={to_float(units)!r}. Nothing "
                    f"was charged; ask with a smaller {what}."
                )

    def refund(self, database: str, analyst: str, charge_id: int) -> None:
        """Undo charge ``charge_id`` of ``analyst`` on ``database``: it is marked refunded in
        the audit log (never deleted) and its amounts leave the running sums, in one durable
        transaction.

        Precondition: nothing derived from the charged query was released (the session calls
        this only when the query failed or was cancelled before its answer existed).
        Guarantee: the budget is as if the charge had never been made; a process killed before
        the refund commits keeps the charge (fail safe). Raises OperationalError when no such
        charge of this principal counts (already refunded, or reset by the owner) or its
        answer was released.
        """
        key = principal(database, analyst)
        with self._write("refund") as conn:
            row = conn.execute(
                f"""SELECT epsilon, delta, released_at FROM charges
                   WHERE id = ? AND database = ? AND analyst = ? AND {_LIVE}""",
                (int(charge_id), *key),
            ).fetchone()
            if row is None or row[2] is not None:
                why = "is not on the ledger" if row is None else "was released"
                raise OperationalError(
                    f"privacy ledger {self.path}: charge {charge_id} of analyst '{analyst}' "
                    f"{why}, so it cannot be refunded"
                )
            conn.execute("UPDATE charges SET refunded_at = ? WHERE id = ?",
                         (now(), int(charge_id)))
            conn.execute(
                """UPDATE budgets SET epsilon_spent = epsilon_spent - ?,
                                      delta_spent = delta_spent - ?
                   WHERE database = ? AND analyst = ?""",
                (row[0], row[1], *key),
            )

    def reset(self, database: str, analyst: str) -> int:
        """Clear ``analyst``'s spending on ``database`` (owner action); keep the budget.

        Guarantee: the charges that counted stop counting (spent restarts at 0) and stay in
        the audit log, marked with this reset, which is recorded too (its id is returned).
        Cached answers are kept: they were paid for, and re-releasing them costs nothing.
        """
        key = principal(database, analyst)
        with self._write("reset") as conn:
            n, eps, dlt = conn.execute(
                f"""SELECT count(*), coalesce(sum(epsilon), 0), coalesce(sum(delta), 0)
                   FROM charges WHERE database = ? AND analyst = ? AND {_LIVE}""",
                key,
            ).fetchone()
            at = now()
            cursor = conn.execute(
                """INSERT INTO resets (database, analyst, charges_cleared, epsilon_cleared,
                                       delta_cleared, at) VALUES (?, ?, ?, ?, ?, ?)""",
                (*key, n, eps, dlt, at),
            )
            reset_id = cursor.lastrowid
            conn.execute(
                f"UPDATE charges SET reset_id = ? WHERE database = ? AND analyst = ? AND {_LIVE}",
                (reset_id, *key),
            )
            conn.execute(
                """UPDATE budgets SET epsilon_spent = 0, delta_spent = 0, updated_at = ?
                   WHERE database = ? AND analyst = ?""",
                (at, *key),
            )
        assert reset_id is not None
        return int(reset_id)

    # -- cache ------------------------------------------------------------------------------

    def cache_get(self, database: str, analyst: str, key: str) -> bytes | None:
        """The payload stored under ``key`` for this principal, or None (records nothing; the
        session looks up with :meth:`cache_lookup`)."""
        who = principal(database, analyst)
        with self._cache_connection("cache_get") as conn:
            row = conn.execute(
                "SELECT payload FROM cache WHERE database = ? AND analyst = ? AND key = ?",
                (*who, key),
            ).fetchone()
        return None if row is None else bytes(row[0])

    def cache_lookup(self, database: str, analyst: str, key: str, *, sql: str | None,
                     params: Sequence[Any] | None, epsilon: float | None,
                     delta: float | None) -> bytes | None:
        """The payload stored under ``key`` for this principal, or None; a hit is first
        recorded in the audit log: a "cache hit" event with the request (``sql``, ``params``,
        ``epsilon``, ``delta``) and the charge that paid for the answer.

        Guarantee: a returned payload's hit record is committed (atomically; see
        ``_cache_connection`` for its durability) before this returns; if it cannot be written
        this raises OperationalError and returns nothing (fail closed, as for charges). A miss
        writes nothing. Runs on the cache's own connection: it does not wait for a charge's
        durable commit, only, on a hit, for the file's write lock.
        """
        who = principal(database, analyst)
        detail = {"sql": sql, "params": None if params is None else list(params),
                  "epsilon": epsilon, "delta": delta}
        with self._cache_connection("cache_lookup") as conn:
            row = conn.execute(
                "SELECT payload, charge_id FROM cache"
                " WHERE database = ? AND analyst = ? AND key = ?",
                (*who, key),
            ).fetchone()
            if row is None:
                return None
            # one INSERT in autocommit mode: its own transaction (one call, not three)
            insert_event(conn, "cache hit", database=who[0], analyst=who[1],
                         charge_id=row[1], detail=detail)
        return bytes(row[0])

    def cache_put(self, database: str, analyst: str, key: str, payload: bytes) -> None:
        """Store ``payload`` under ``key`` (last write wins), durably, for later cache_get."""
        who = principal(database, analyst)
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise ProgrammingError("cache payload must be bytes")
        with self._write("cache_put") as conn:
            conn.execute(CACHE_UPSERT, (*who, key, bytes(payload), now(), None))

    def __enter__(self) -> Ledger:
        return self

    def __repr__(self) -> str:
        return f"Ledger({self.path!r})"


def _overspent(eps_total: int, dlt_total: int, eps_spent: int, dlt_spent: int) -> str:
    """Words for a total set below what was already spent (:func:`overspent_totals`), so the
    refusal of a query that needs none of it says why; '' otherwise."""
    over = [f"{name} spent so far ({spent!r}) is above its total ({total!r})"
            for name, spent, total in overspent_totals(eps_total, dlt_total, eps_spent,
                                                       dlt_spent)]
    if not over:
        return ""
    return (" (the " + " and the ".join(over) + ": the budget was set below the spending, "
            "so no query is charged until the data owner raises it or resets the spending)")
