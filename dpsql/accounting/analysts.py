"""Analyst accounts (server mode): who may log in, and the owner's policy for each analyst.

Accounts live in the ledger (table ``analysts``, :mod:`dpsql.accounting.schema`), one set per
ledger file, not per database. A password is never stored: only its SCRAM-SHA-256 verifier
(salt, StoredKey, ServerKey, iteration count >= 4096, RFC 5802/7677, made by ``scramp``), from
which the server can check a client's proof but nobody can recover the password.

The policy: ``tables`` the analyst may query (None: every table the metadata declares); a cap
on one query's epsilon and delta (None: no cap), which :meth:`Ledger.charge
<dpsql.accounting.Ledger.charge>` enforces for every charge of an analyst with an account; and
the per-query defaults used when the analyst's session sets none. Budgets stay per (database,
analyst) (``dpsql budget set``); removing an account keeps its budgets and audit history.
"""

from __future__ import annotations

import json
import math
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from dpsql.accounting.audit import insert_event
from dpsql.accounting.principal import now
from dpsql.accounting.store import LedgerFile
from dpsql.accounting.units import MAX_EPSILON
from dpsql.errors import OperationalError, ProgrammingError

#: PBKDF2 iterations of new verifiers: PostgreSQL's default (its minimum is 4096 too).
SCRAM_ITERATIONS = 4096
#: Longest accepted analyst name, in characters.
MAX_NAME_LENGTH = 128
_POLICY = ("tables", "max_epsilon", "max_delta", "default_epsilon", "default_delta")
_COLUMNS = ("name, salt, stored_key, server_key, iterations, tables, max_epsilon, max_delta, "
            "default_epsilon, default_delta")


@dataclass(frozen=True)
class AnalystAccount:
    """One analyst's account: name and policy (the verifier is kept out of repr and ==)."""

    name: str
    tables: frozenset[str] | None      # None: every table the metadata declares
    max_epsilon: float | None          # owner's cap on one query's epsilon (None: no cap)
    max_delta: float | None
    default_epsilon: float | None      # used when the analyst's session sets none
    default_delta: float | None
    _verifier: tuple[bytes, bytes, bytes, int] = field(
        default=(b"", b"", b"", 0), repr=False, compare=False)

    def scram_auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """(salt, stored_key, server_key, iterations), as scramp's
        ``ScramMechanism("SCRAM-SHA-256").make_auth_info`` returns them. Raises
        ProgrammingError for an account built by hand, without a verifier (fail closed: such an
        account can never authenticate)."""
        if self._verifier[3] < SCRAM_ITERATIONS or not all(self._verifier[:3]):
            raise ProgrammingError(
                f"analyst account '{self.name}' has no password verifier; read accounts from "
                "the ledger (Ledger.analyst)")
        return self._verifier

    def may_read(self, table: str) -> bool:
        """True when the analyst may query ``table`` (case-insensitive; a ``schema.`` prefix
        is ignored, as the metadata does)."""
        return self.tables is None or _table_key(table) in self.tables

    def query_budget(self, epsilon: float | None,
                     delta: float | None) -> tuple[float | None, float | None]:
        """The (epsilon, delta) one query runs with: the session's values, else the owner's
        defaults (None when neither is set). Raises ProgrammingError when a value exceeds the
        owner's cap; depends on the arguments and the account only."""
        eps = self.default_epsilon if epsilon is None else epsilon
        dlt = self.default_delta if delta is None else delta
        for what, value, cap in (("epsilon", eps, self.max_epsilon),
                                 ("delta", dlt, self.max_delta)):
            if value is not None and cap is not None and value > cap:
                raise ProgrammingError(
                    f"analyst '{self.name}' may spend at most {what}={cap!r} on one query (the "
                    f"data owner's cap); this query asks {what}={value!r}. Ask with a smaller "
                    f"{what} (SET dpsql.{what} = ...)"
                )
        return eps, dlt


def _table_key(name: str) -> str:
    return name.lower().rsplit(".", 1)[-1]


def check_name(name: object) -> str:
    """``name`` if it is a valid analyst name: a non-empty string of at most
    MAX_NAME_LENGTH characters, without control characters or surrounding spaces."""
    if not isinstance(name, str) or not name:
        raise ProgrammingError("an analyst name must be a non-empty string")
    if len(name) > MAX_NAME_LENGTH:
        raise ProgrammingError(f"an analyst name has at most {MAX_NAME_LENGTH} characters")
    if name != name.strip() or any(unicodedata.category(c) == "Cc" for c in name):
        raise ProgrammingError(
            f"analyst name {name!r} has control characters or surrounding spaces; "
            "choose a plain name"
        )
    return name


def _check_policy(policy: dict[str, Any]) -> dict[str, Any]:
    """The policy values validated and normalised for storage; ProgrammingError otherwise."""
    out: dict[str, Any] = {}
    for key, value in policy.items():
        if key not in _POLICY:
            raise ProgrammingError(
                f"unknown analyst policy {key!r}; use one of {', '.join(_POLICY)}")
        if value is None:
            out[key] = None
        elif key == "tables":
            if isinstance(value, str):
                raise ProgrammingError("tables must be a collection of table names, not a string")
            names = sorted({_table_key(check_table(t)) for t in value})
            out[key] = json.dumps(names)
        else:
            out[key] = _check_amount(key, value)
    return out


def check_account(name: object, **policy: Any) -> dict[str, Any]:
    """Validate a new account's name and full policy (every policy key, None when unset)
    without touching a ledger: ProgrammingError naming the problem, else the stored form."""
    check_name(name)
    row = _check_policy({key: policy.get(key) for key in _POLICY} | policy)
    _check_defaults(row, str(name))
    return row


def check_table(table: object) -> str:
    if not isinstance(table, str) or not table.strip() or any(
            unicodedata.category(c) == "Cc" for c in table):
        raise ProgrammingError(f"invalid table name {table!r} in an analyst's tables")
    return table.strip()


def _check_amount(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProgrammingError(f"{key} must be a number, got {type(value).__name__}")
    number = float(value)
    if key.endswith("epsilon"):
        if not (math.isfinite(number) and 0 < number <= MAX_EPSILON):
            raise ProgrammingError(f"{key} must be > 0 and <= {MAX_EPSILON}, got {value!r}")
    elif not 0 <= number <= 1:
        raise ProgrammingError(f"{key} must be in [0, 1], got {value!r}")
    return number


def _check_defaults(row: dict[str, Any], name: str) -> None:
    for what in ("epsilon", "delta"):
        default, cap = row[f"default_{what}"], row[f"max_{what}"]
        if default is not None and cap is not None and default > cap:
            raise ProgrammingError(
                f"analyst '{name}': default_{what}={default!r} is above max_{what}={cap!r}, so "
                "every query using the default would be refused; lower the default or raise "
                "the cap"
            )


def _verifier(password: object) -> tuple[bytes, bytes, bytes, int]:
    if not isinstance(password, str) or not password:
        raise ProgrammingError("a password must be a non-empty string")
    from scramp import ScramException, ScramMechanism  # only the account commands need it

    try:
        salt, stored, server, iterations = ScramMechanism("SCRAM-SHA-256").make_auth_info(
            password, iteration_count=SCRAM_ITERATIONS)
    except ScramException as exc:  # SASLprep refused a character
        raise ProgrammingError(f"the password cannot be used with SCRAM: {exc}") from None
    return bytes(salt), bytes(stored), bytes(server), int(iterations)


def _account(row: tuple) -> AnalystAccount:
    name, salt, stored, server, iterations, tables, *amounts = row
    return AnalystAccount(
        name=name, tables=None if tables is None else frozenset(json.loads(tables)),
        max_epsilon=amounts[0], max_delta=amounts[1], default_epsilon=amounts[2],
        default_delta=amounts[3],
        _verifier=(bytes(salt), bytes(stored), bytes(server), int(iterations)))


def _policy_of(account: AnalystAccount | None) -> dict[str, Any]:
    """An account's policy as the audit log shows it (tables sorted; no verifier)."""
    assert account is not None
    return {"tables": None if account.tables is None else sorted(account.tables),
            "max_epsilon": account.max_epsilon, "max_delta": account.max_delta,
            "default_epsilon": account.default_epsilon, "default_delta": account.default_delta}


class AnalystBook(LedgerFile):
    """The account methods of :class:`dpsql.accounting.Ledger` (owner actions, each one durable
    transaction that also appends its event to the audit log: "analyst add|remove|passwd|set"
    with the policy set, never a password or verifier)."""

    def add_analyst(self, name: str, password: str, *, tables: Any = None,
                    max_epsilon: float | None = None, max_delta: float | None = None,
                    default_epsilon: float | None = None,
                    default_delta: float | None = None) -> AnalystAccount:
        """Create the account ``name`` with ``password`` (only its SCRAM verifier is stored)
        and the given policy. Raises ProgrammingError for an invalid name, password or policy
        (caps > 0, deltas in [0, 1], a default above its cap) and OperationalError when the
        account exists already."""
        row = check_account(name, tables=tables, max_epsilon=max_epsilon,
                            max_delta=max_delta, default_epsilon=default_epsilon,
                            default_delta=default_delta)
        salt, stored, server, iterations = _verifier(password)
        at = now()
        with self._write("add_analyst") as conn:
            if conn.execute("SELECT 1 FROM analysts WHERE name = ?", (name,)).fetchone():
                raise OperationalError(
                    f"analyst '{name}' already has an account in {self.path}; change it with "
                    "'dpsql analyst set' or 'dpsql analyst passwd'"
                )
            conn.execute(
                f"INSERT INTO analysts ({_COLUMNS}, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (name, salt, stored, server, iterations, row["tables"], row["max_epsilon"],
                 row["max_delta"], row["default_epsilon"], row["default_delta"], at, at),
            )
            account = self._fetch(name)
            insert_event(conn, "analyst add", analyst=name, detail=_policy_of(account))
        assert account is not None
        return account

    def remove_analyst(self, name: str) -> None:
        """Delete the account ``name`` (its budgets and audit history stay). OperationalError
        when there is no such account."""
        with self._write("remove_analyst") as conn:
            if conn.execute("DELETE FROM analysts WHERE name = ?", (name,)).rowcount != 1:
                raise self._missing(name)
            insert_event(conn, "analyst remove", analyst=name)

    def set_password(self, name: str, password: str) -> None:
        """Replace the account's verifier with a new salt and one for ``password``."""
        salt, stored, server, iterations = _verifier(password)
        with self._write("set_password") as conn:
            done = conn.execute(
                "UPDATE analysts SET salt = ?, stored_key = ?, server_key = ?, iterations = ?,"
                " updated_at = ? WHERE name = ?",
                (salt, stored, server, iterations, now(), name),
            )
            if done.rowcount != 1:
                raise self._missing(name)
            insert_event(conn, "analyst passwd", analyst=name)

    def update_analyst(self, name: str, **policy: Any) -> AnalystAccount:
        """Change the given policy fields of ``name`` (a value of None clears it: all tables,
        no cap, no default); the others stay. Returns the updated account."""
        values = _check_policy(policy)
        with self._write("update_analyst") as conn:
            current = self._fetch(name)
            if current is None:
                raise self._missing(name)
            row = {k: getattr(current, k) for k in _POLICY if k != "tables"}
            row.update({k: v for k, v in values.items() if k != "tables"})
            _check_defaults(row, name)
            for key, value in values.items():  # keys are from _POLICY: safe to format
                conn.execute(f"UPDATE analysts SET {key} = ?, updated_at = ? WHERE name = ?",
                             (value, now(), name))
            account = self._fetch(name)
            assert account is not None
            changed = _policy_of(account)
            insert_event(conn, "analyst set", analyst=name,
                         detail={k: changed[k] for k in values})
        assert account is not None
        return account

    def analyst(self, name: str) -> AnalystAccount | None:
        """The account ``name``, or None."""
        with self._read("analyst"):
            return self._fetch(name)

    def analysts(self) -> list[AnalystAccount]:
        """Every account, by name."""
        with self._read("analysts") as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM analysts ORDER BY name").fetchall()
        return [_account(r) for r in rows]

    def _fetch(self, name: str) -> AnalystAccount | None:
        """Inside a transaction: the account ``name`` or None."""
        row = self._require().execute(
            f"SELECT {_COLUMNS} FROM analysts WHERE name = ?", (name,)).fetchone()
        return None if row is None else _account(row)

    def _missing(self, name: str) -> OperationalError:
        return OperationalError(
            f"there is no analyst account '{name}' in {self.path}; see 'dpsql analyst list'")
