"""What one statement from an authenticated analyst means, and its answer (no wire format here).

Each statement is, in this order: a session command (SET/SHOW/RESET, transaction control: no
data), a catalog query (answered by the shadow schema: no data, see
:mod:`dpsql.server.catalog`), or a private query, answered by the analyst's
:class:`~dpsql.session.Session` under the owner's policy:

* the analyst is the authenticated user, never a name the client sends;
* the query may name only the tables the owner granted (checked on the analysed query, before
  anything is charged);
* epsilon/delta come from ``SET dpsql.epsilon`` / ``SET dpsql.delta`` or the analyst's
  defaults, and may not exceed the owner's per-query caps (refused before the charge);
* the noise comes from ``SET dpsql.mechanism`` ('laplace', the default, or 'gaussian') and
  ``SET dpsql.calibration`` ('analytic', the default, or 'classical').
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, is_dataclass
from functools import cached_property
from typing import Any

from dpsql.accounting.analysts import AnalystAccount
from dpsql.analysis.hygiene import check_size
from dpsql.budget import CALIBRATIONS, MECHANISMS, MissingEpsilonError
from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.prepared import AnyPrepared
from dpsql.release.record import Release
from dpsql.server.cancel import CancellableBackend
from dpsql.server.catalog import (
    DEFAULT_SETTINGS,
    Catalog,
    SettingChange,
    inline_params,
    is_catalog_query,
    parse_postgres,
    parse_session_command,
    shadow_sql_of_text,
)
from dpsql.server.placeholders import to_qmark
from dpsql.server.shadow import Shadows
from dpsql.session import Session

#: the routing memo of one connection: at most this many texts, each at most this long
_ROUTE_MEMO_SIZE = 256
_ROUTE_MEMO_TEXT = 8192


class AccessDenied(ProgrammingError):
    """The analyst is not granted a table, or asked for more than the owner's cap (42501)."""


@dataclass
class Answer:
    """One statement's answer: rows (possibly none) and the command tag."""

    tag: str
    names: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    release: Release | None = None
    #: the release's NOTICE (text, JSON detail), made in the worker thread with the answer:
    #: the event loop, which serves every client, only copies it out
    notice: tuple[str, str] | None = None

    @property
    def has_rows(self) -> bool:
        return bool(self.names)


class StatementRunner:
    """Answers an analyst's statements (thread-confined: one per client connection)."""

    def __init__(self, session: Session, account: AnalystAccount, analyst: str,
                 shadows: Shadows | None = None) -> None:
        """``shadows``: the server's shadow databases (dpsql.server.shadow); without them the
        connection builds a shadow of its own on its first catalog query."""
        self.session = session
        #: the owner's rules for this analyst: grants, per-query caps and defaults
        self.account = account
        self.analyst = analyst
        self.settings: dict[str, str] = dict(DEFAULT_SETTINGS)
        self.settings["session_authorization"] = analyst
        self._shadows = shadows
        self._catalog: Catalog | None = None
        self.in_transaction = False
        self._routes: dict[str, bool] = {}  # SQL text -> is a catalog query (is_catalog)

    @cached_property
    def visible_tables(self) -> list[str]:
        """The tables the owner granted this analyst (the account is the connection's, read
        at login: computed once, not per statement)."""
        return [t for t in self.session.metadata.tables if self.account.may_read(t)]

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = Catalog(self.session.metadata, self.visible_tables, self.analyst,
                                    self._shadows)
        return self._catalog

    def begin_statement(self) -> None:
        """A statement is about to run: an earlier CancelRequest no longer applies (called on
        the event loop's thread, which also delivers cancels; see dpsql.server.cancel)."""
        backend = self.session.backend
        if isinstance(backend, CancellableBackend):
            backend.begin()

    def answer(self, sql: str, params: list[Any] | None = None) -> Answer:
        """The answer to one statement (raises dpsql's errors; the caller maps SQLSTATEs)."""
        check_size(sql)  # before any regular expression or parser reads it
        command = parse_session_command(sql)
        if command is not None:
            if params:
                raise ProgrammingError("session commands take no parameters")
            return self._session_command(*command)
        if self.is_catalog(sql):
            got = self.catalog.run_sql(self._shadow_text(sql, params))
            return Answer(f"SELECT {len(got.rows)}", got.names, got.types, got.rows)
        return self._private(sql, params or [])

    def _shadow_text(self, sql: str, params: list[Any] | None) -> str:
        """The shadow's SQL for the catalog query ``sql`` with ``params`` under this session's
        settings (memoised for the process when there are no parameters)."""
        if not params and len(sql) <= _ROUTE_MEMO_TEXT:
            return shadow_sql_of_text(sql, self.analyst, tuple(sorted(self.settings.items())))
        tree = parse_postgres(sql)
        assert tree is not None  # is_catalog parsed it
        if params:
            tree = inline_params(tree, params)
        return self.catalog.shadow_sql(tree, self.settings)

    def is_catalog(self, sql: str) -> bool:
        """Whether ``sql`` is a catalog query (:func:`is_catalog_query`, which depends on the
        text alone), memoised by text: the PostgreSQL parse it needs costs ~0.3 ms, and a
        client repeats the same private query text with new parameters."""
        known = self._routes.get(sql)
        if known is None:
            tree = parse_postgres(sql)
            known = tree is not None and is_catalog_query(tree)
            if len(sql) <= _ROUTE_MEMO_TEXT:
                self._routes[sql] = known
                if len(self._routes) > _ROUTE_MEMO_SIZE:
                    self._routes.pop(next(iter(self._routes)))  # the oldest entry
        return known

    def _private(self, sql: str, params: list[Any]) -> Answer:
        text, values = to_qmark(sql, params)
        self.prepared(text)  # refused before it runs when it reads an ungranted table
        epsilon, delta = self.budget()
        try:
            result = self.session.run(text, values, epsilon=epsilon, delta=delta,
                                      mechanism=self.settings.get("dpsql.mechanism"),
                                      calibration=self.settings.get("dpsql.calibration"),
                                      raw_counts=self.settings.get("dpsql.raw_counts") == "on")
        except MissingEpsilonError:
            # the library's wording names cursor.execute / dpsql.connect keywords, which a
            # psql or psycopg user has no way to pass: say how a session sets it
            raise MissingEpsilonError(
                "no epsilon for this query: run SET dpsql.epsilon = 0.1 in this session "
                "(dpsql.connect(url, epsilon=0.1) sends it), or ask the data owner for a "
                "default (dpsql analyst set NAME --default-epsilon E)") from None
        return Answer(f"SELECT {len(result.rows)}", result.names, result.types, result.rows,
                      result.release, release_notice(result.release))

    def prepared(self, text: str) -> AnyPrepared:
        """``text`` (qmark SQL) prepared by the session, refused (AccessDenied) when it reads a
        table the analyst was not granted: before it runs, and before a Describe names its
        columns (the public-path red team: Describe told an ungranted public table's columns)."""
        prepared = self.session.prepare(text)
        denied = sorted(prepared.tables - set(self.visible_tables))  # memoised per text
        if denied:
            raise AccessDenied(
                f"permission denied for table {', '.join(denied)}: the data owner has not "
                f"granted analyst {self.analyst!r} access to it")
        return prepared

    def budget(self) -> tuple[float | None, float]:
        """This statement's (epsilon, delta): the session's SET values, else the analyst's
        defaults; refused above the owner's caps (before anything is charged; the ledger checks
        the caps again at the charge)."""
        try:
            epsilon, delta = self.account.query_budget(
                _number(self.settings.get("dpsql.epsilon"), None),
                _number(self.settings.get("dpsql.delta"), None))
        except ProgrammingError as exc:
            raise AccessDenied(exc.message) from None
        return epsilon, delta or 0.0

    def _session_command(self, kind: str, arg: Any) -> Answer:
        if kind == "noop":
            if arg in ("BEGIN", "START TRANSACTION"):
                self.in_transaction = True
            elif arg in ("COMMIT", "ROLLBACK"):
                self.in_transaction = False
            return Answer("ROLLBACK" if arg == "ROLLBACK TO" else arg)
        if kind == "set":
            self._set(arg)
            return Answer("RESET" if arg.value is None else "SET")
        name = str(arg)
        if name == "all":
            rows = sorted(self.settings.items())
            return Answer(f"SHOW {len(rows)}", ("name", "setting"), ("VARCHAR", "VARCHAR"), rows)
        if name == "dpsql.budget":
            return self._show_budget()
        if name == "dpsql.schema":
            return Answer("SHOW", ("schema",), ("VARCHAR",), [(self._schema_text(),)])
        if name in ("dpsql.epsilon", "dpsql.delta") and name not in self.settings:
            # not SET in this session: the analyst's default ('' when there is none)
            default = (self.account.default_epsilon if name == "dpsql.epsilon"
                       else self.account.default_delta)
            return Answer("SHOW", (name,), ("VARCHAR",), [("" if default is None
                                                           else repr(default),)])
        if name in _NOISE_SETTINGS and name not in self.settings:
            return Answer("SHOW", (name,), ("VARCHAR",), [(_NOISE_SETTINGS[name][0],)])
        if name not in self.settings:
            raise ProgrammingError(f'unrecognized configuration parameter "{name}"')
        return Answer("SHOW", (name.split()[-1],), ("VARCHAR",), [(self.settings[name],)])

    def _set(self, change: SettingChange) -> None:
        name, value = change.name, change.value
        if name in ("dpsql.epsilon", "dpsql.delta"):
            if value is not None and value.lower() != "default":
                number = _number(value, None)
                if name == "dpsql.epsilon" and (number is None or not number > 0):
                    raise ProgrammingError(f"dpsql.epsilon must be a number > 0, got {value!r}")
                if name == "dpsql.delta" and (number is None or not 0 <= number < 1):
                    raise ProgrammingError(f"dpsql.delta must be a number in [0, 1), got {value!r}")
            else:
                value = None
        elif name in _NOISE_SETTINGS:
            if value is not None and value.lower() != "default":
                value = value.strip().strip("'\"").lower()
                if name == "dpsql.raw_counts":
                    value = _BOOLEAN.get(value, value)
                if value not in _NOISE_SETTINGS[name]:
                    choices = " or ".join(repr(c) for c in _NOISE_SETTINGS[name])
                    raise ProgrammingError(f"{name} must be {choices}, got {value!r}")
            else:
                value = None
        elif name.startswith("dpsql."):
            raise ProgrammingError(
                f'unrecognized configuration parameter "{name}": dpsql has dpsql.epsilon, '
                "dpsql.delta, dpsql.mechanism, dpsql.calibration and dpsql.raw_counts")
        if value is None:
            if name in DEFAULT_SETTINGS:
                self.settings[name] = DEFAULT_SETTINGS[name]
            else:
                self.settings.pop(name, None)
        else:
            self.settings[name] = value

    def _schema_text(self) -> str:
        """The analyst-facing schema (YAML) of the tables this analyst may query."""
        from dataclasses import replace

        from dpsql.metadata.analyst import dumps_analyst_schema

        md = self.session.metadata
        granted = replace(md, tables={t: md.tables[t] for t in self.visible_tables})
        return dumps_analyst_schema(granted)

    def _show_budget(self) -> Answer:
        ledger, principal = self.session.ledger, self.session.principal
        if ledger is None or principal is None:
            raise NotSupportedError("this server has no ledger")
        status = ledger.status(principal.database, principal.analyst)
        row = (status.epsilon_total, status.epsilon_remaining, status.delta_total,
               status.delta_remaining)
        return Answer("SHOW", ("epsilon_total", "epsilon_remaining", "delta_total",
                               "delta_remaining"),
                      ("DOUBLE", "DOUBLE", "DOUBLE", "DOUBLE"), [row])

    def close(self) -> None:
        if self._catalog is not None:
            self._catalog.close()


#: the noise settings (SET dpsql.mechanism / dpsql.calibration): their choices, default first
_NOISE_SETTINGS: dict[str, tuple[str, ...]] = {
    "dpsql.mechanism": MECHANISMS, "dpsql.calibration": CALIBRATIONS,
    # noisy counts as drawn (on) or clamped at 0 (off, the default): dpsql.execute.typed
    "dpsql.raw_counts": ("off", "on")}
#: PostgreSQL's spellings of a boolean setting
_BOOLEAN = {"on": "on", "true": "on", "yes": "on", "1": "on",
            "off": "off", "false": "off", "no": "off", "0": "off"}


def release_notice(release: Release) -> tuple[str, str]:
    """The NOTICE text and its JSON detail for a released answer (no data-dependent values:
    the release record never holds any; see dpsql.release.record)."""
    if release.free:
        text = "dpsql: public tables only, answered exactly (no budget spent)"
    elif release.cached:
        text = "dpsql: repeated query, the earlier noisy answer (no budget spent)"
    else:
        text = (f"dpsql: released with epsilon={release.epsilon:g}, delta={release.delta:g} "
                f"({release.mechanism})")
        if release.privacy_unit:
            text += f", protecting each {release.privacy_unit}"
    return text, json.dumps(_plain(release), default=str)


def _plain(value: Any) -> Any:
    """``value`` as ``dataclasses.asdict`` gives it, as far as JSON can tell (dataclasses as
    dicts, tuples as lists), without its deep copies: a fifth of a cached answer's server time
    went to ``Release.to_json``."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _number(value: str | None, default: float | None) -> float | None:
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None
