"""The audit log: what each charge asked (SQL, parameters, epsilon, delta) and what it released.

Every charge is one row of the ledger's ``charges`` table (:mod:`dpsql.accounting.schema`); its
audit fields are written once and never deleted (SQLite triggers refuse it): the SQL text and
its parameters with the charge, the released values by :meth:`AuditBook.record_release` after
the answer is built, ``refunded_at`` by a refund, ``reset_id`` by the owner's ``budget reset``
(one row of ``resets``). The other entries are **events** (table ``events``, append-only): the
owner's actions on accounts and budgets (``analyst add|remove|passwd|set``, ``budget set``; never
a password or a verifier) and **cache hits** (a repeated query answered from the cache, charged
nothing: its SQL, parameters, epsilon, delta and the charge that paid for the answer), each
written in the transaction that makes the change, or, for a hit, before the answer is returned.
:meth:`AuditBook.audit` reads the log back for ``dpsql audit log``.

Values are stored as JSON by :func:`to_json`: JSON's own types as themselves, anything else as
a one-key object naming its type (``{"$decimal": "1.50"}``, ``{"$date": "2024-01-31"}``,
``{"$bytes": "<base64>"}``, a non-finite float as ``{"$float": "nan"}``, an unknown type as
``{"$repr": ..., "$type": ...}``), so the log shows the rows exactly as the analyst got them and
never fails to encode.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from dpsql.accounting.principal import database_identity, now, principal
from dpsql.accounting.store import LedgerFile
from dpsql.accounting.units import _delta_float, _eps_float
from dpsql.errors import OperationalError, ProgrammingError

# -- values as JSON -------------------------------------------------------------------------


def _encode(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, dt.datetime):
        return {"$timestamp": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, dt.time):
        return {"$time": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"$interval": str(value)}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, uuid.UUID):
        return {"$uuid": str(value)}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {"$struct": {str(k): _encode(v) for k, v in value.items()}}
    item = getattr(value, "item", None)  # a numpy scalar: its Python value
    if callable(item) and getattr(value, "shape", None) == ():
        return _encode(item())
    return {"$repr": repr(value), "$type": type(value).__name__}


def to_json(value: Any) -> str:
    """``value`` (parameters, rows) as compact JSON; never raises for an unusual type (see the
    module docstring for the encoding)."""
    return json.dumps(_encode(value), ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False)


def _from_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


# -- entries --------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditCharge:
    """One charge as the audit log holds it. ``params`` and ``released`` are the stored JSON,
    decoded (``released`` is ``{"columns": [...], "rows": [[...], ...]}``); None when not
    recorded (a charge made by dpsql before schema version 2, or one whose answer was never
    released: an error after the noise, or a process that died)."""

    id: int
    database: str
    analyst: str
    at: str
    sql: str | None
    params: Any
    epsilon: float
    delta: float
    mechanism: str
    fingerprint: str
    released: Any
    released_at: str | None
    refunded_at: str | None
    reset_id: int | None

    @property
    def counts(self) -> bool:
        """True while the charge counts against the budget (not refunded, not reset)."""
        return self.refunded_at is None and self.reset_id is None

    @property
    def state(self) -> str:
        """'refunded', 'released', 'not released' (charged, no answer recorded), with
        ', reset #N' when the owner's reset cleared it."""
        if self.refunded_at is not None:
            state = "refunded"
        else:
            state = "released" if self.released_at is not None else "not released"
        return state if self.reset_id is None else f"{state}, reset #{self.reset_id}"


@dataclass(frozen=True)
class AuditReset:
    """One ``budget reset``: the charges it cleared no longer count, but stay in the log."""

    id: int
    database: str
    analyst: str
    at: str
    charges_cleared: int
    epsilon_cleared: float
    delta_cleared: float


@dataclass(frozen=True)
class AuditEvent:
    """An owner's action or a cache hit (``kind``: one of :data:`EVENT_KINDS`). ``detail`` is the
    stored JSON, decoded: the action's new values (an account's policy, a budget's totals) or,
    for a hit, ``{"sql", "params", "epsilon", "delta"}``; ``charge_id`` is the charge whose
    answer a hit returned (None for an answer cached without a charge)."""

    id: int
    at: str
    kind: str
    database: str | None
    analyst: str | None
    charge_id: int | None
    detail: Any


#: the kinds of events (owner actions, then the analysts' cache hits)
EVENT_KINDS = ("analyst add", "analyst remove", "analyst passwd", "analyst set", "budget set",
               "cache hit")

AuditEntry = AuditCharge | AuditReset | AuditEvent

_CHARGE_COLUMNS = ("id, database, analyst, at, sql, params, epsilon, delta, mechanism, "
                   "fingerprint, released, released_at, refunded_at, reset_id")
_RESET_COLUMNS = "id, database, analyst, at, charges_cleared, epsilon_cleared, delta_cleared"
_EVENT_COLUMNS = "id, at, kind, database, analyst, charge_id, detail"


def _charge(row: tuple) -> AuditCharge:
    (cid, database, analyst, at, sql, params, eps, dlt, mechanism, fingerprint, released,
     released_at, refunded_at, reset_id) = row
    return AuditCharge(
        id=cid, database=database, analyst=analyst, at=at, sql=sql, params=_from_json(params),
        epsilon=_eps_float(eps), delta=_delta_float(dlt), mechanism=mechanism,
        fingerprint=fingerprint, released=_from_json(released), released_at=released_at,
        refunded_at=refunded_at, reset_id=reset_id)


def _reset(row: tuple) -> AuditReset:
    rid, database, analyst, at, n, eps, dlt = row
    return AuditReset(id=rid, database=database, analyst=analyst, at=at, charges_cleared=n,
                      epsilon_cleared=_eps_float(eps), delta_cleared=_delta_float(dlt))


def _event(row: tuple) -> AuditEvent:
    eid, at, kind, database, analyst, charge_id, detail = row
    return AuditEvent(id=eid, at=at, kind=kind, database=database, analyst=analyst,
                      charge_id=charge_id, detail=_from_json(detail))


def insert_event(conn: Any, kind: str, *, database: str | None = None,
                 analyst: str | None = None, charge_id: int | None = None,
                 detail: dict[str, Any] | None = None) -> None:
    """Inside the caller's write transaction: append one event to the audit log (``detail``
    a JSON object, its values encoded as :func:`to_json` encodes them)."""
    assert kind in EVENT_KINDS, kind
    text = None if detail is None else json.dumps(
        {str(k): _encode(v) for k, v in detail.items()}, ensure_ascii=False,
        separators=(",", ":"), allow_nan=False)
    conn.execute(
        "INSERT INTO events (at, kind, database, analyst, charge_id, detail)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (now(), kind, database, analyst, charge_id, text))


#: store one cached answer (last write wins) with the charge that paid for it (NULL: none);
#: shared by Ledger.cache_put and record_release
CACHE_UPSERT = """INSERT INTO cache (database, analyst, key, payload, at, charge_id)
                  VALUES (?, ?, ?, ?, ?, ?)
                  ON CONFLICT (database, analyst, key) DO UPDATE SET
                      payload = excluded.payload, at = excluded.at,
                      charge_id = excluded.charge_id"""


_ORDER = {AuditCharge: 0, AuditReset: 1, AuditEvent: 2}


class AuditBook(LedgerFile):
    """The audit methods of :class:`dpsql.accounting.Ledger`."""

    def record_release(self, database: str, analyst: str, charge_id: int,
                       rows: Sequence[Sequence[Any]], *,
                       columns: Sequence[str] | None = None,
                       cache: tuple[str, bytes] | None = None) -> None:
        """Record the values charge ``charge_id`` released: ``rows`` exactly as returned to
        the analyst (and their column names), durably, before the analyst sees them; with
        ``cache`` (key, payload), store the answer in the answer cache in the same transaction
        (one durable commit instead of two).

        Precondition: ``charge_id`` is a charge of this principal, not refunded, whose answer
        ``rows`` is. Guarantee: on return the values are committed with the charge; a charge
        reset by the owner meanwhile is still recorded. Raises OperationalError (and records
        nothing) when the charge is not this principal's, was refunded, already has its values,
        or the ledger cannot be written; the caller then withholds the answer (fail closed: the
        charge stands).
        """
        key = principal(database, analyst)
        payload = json.dumps(
            {"columns": None if columns is None else [str(c) for c in columns],
             "rows": [_encode(list(r)) for r in rows]},
            ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        with self._write("record_release") as conn:
            row = conn.execute(
                "SELECT released_at, refunded_at FROM charges"
                " WHERE id = ? AND database = ? AND analyst = ?",
                (int(charge_id), *key),
            ).fetchone()
            if row is None or row[0] is not None or row[1] is not None:
                why = ("is not on the ledger" if row is None
                       else "already has its released values" if row[0] is not None
                       else "was refunded")
                raise OperationalError(
                    f"privacy ledger {self.path}: charge {charge_id} of analyst '{analyst}' "
                    f"{why}, so its release cannot be recorded; the answer is withheld"
                )
            conn.execute("UPDATE charges SET released = ?, released_at = ? WHERE id = ?",
                         (payload, now(), int(charge_id)))
            if cache is not None:
                conn.execute(CACHE_UPSERT, (*key, cache[0], bytes(cache[1]), now(),
                                            int(charge_id)))

    def audit(self, *, database: str | None = None, analyst: str | None = None,
              limit: int | None = None, events: bool = False) -> list[AuditEntry]:
        """The audit log, oldest first: every charge (refunded and reset ones included) and
        every reset; with ``events``, every event too (owner actions, cache hits: what `dpsql
        audit log` shows). Optionally of one ``database`` and/or ``analyst`` (an action on an
        account names no database: a ``database`` filter leaves it out), the last ``limit``
        entries only. One consistent snapshot."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 0):
            raise ProgrammingError(f"limit must be a non-negative integer, got {limit!r}")
        where, args = [], []
        if database is not None:
            where.append("database = ?")
            args.append(database_identity(database))
        if analyst is not None:
            where.append("analyst = ?")
            args.append(analyst)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        tail = " ORDER BY id DESC" + ("" if limit is None else f" LIMIT {int(limit)}")
        with self._read("audit") as conn:
            charges = [_charge(r) for r in conn.execute(
                f"SELECT {_CHARGE_COLUMNS} FROM charges{clause}{tail}", args)]
            resets = [_reset(r) for r in conn.execute(
                f"SELECT {_RESET_COLUMNS} FROM resets{clause}{tail}", args)]
            logged = [_event(r) for r in conn.execute(
                f"SELECT {_EVENT_COLUMNS} FROM events{clause}{tail}", args)] if events else []
        entries: list[AuditEntry] = [*charges, *resets, *logged]
        # a reset is later than every charge it cleared; ids break ties within one table
        entries.sort(key=lambda e: (e.at, _ORDER[type(e)], e.id))
        return entries if limit is None else entries[len(entries) - limit:] if limit else []
