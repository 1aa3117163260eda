"""A DB-API connection to a `dpsql serve` server: ``dpsql.connect("postgresql://alice@host/db")``.

The same surface as the library driver where it makes sense remotely: ``?`` parameter markers
(dpsql's paramstyle), ``execute(sql, params, epsilon=, delta=)``, ``cursor.release`` (the
release record the server sends with each answer, as a NOTICE whose detail is JSON),
``connection.budget_remaining``. The wire work is psycopg 3's; the password comes from the URL,
``password=``, ``PGPASSWORD`` or ``~/.pgpass``, as for any libpq client. Errors are dpsql's PEP 249
classes, chosen by the server's SQLSTATE.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from dpsql import errors
from dpsql.accounting.ledger import BudgetStatus
from dpsql.metadata import Metadata
from dpsql.release.record import ColumnRelease, Release

_BY_SQLSTATE: dict[str, type[errors.Error]] = {
    "42601": errors.ProgrammingError, "42501": errors.ProgrammingError,
    "42703": errors.ProgrammingError, "42P01": errors.ProgrammingError,
    "42000": errors.ProgrammingError, "0A000": errors.NotSupportedError,
    "53400": errors.BudgetExhaustedError, "57014": errors.QueryCancelledError,
    "28P01": errors.OperationalError, "22000": errors.DataError, "22P02": errors.DataError,
    "22007": errors.DataError,
}


def is_url(database: object) -> bool:
    return isinstance(database, str) and database.startswith(("postgresql://", "postgres://"))


def _translate(exc: Exception) -> errors.Error:
    code = getattr(exc, "sqlstate", None) or ""
    cls = _BY_SQLSTATE.get(code, errors.OperationalError)
    diag = getattr(exc, "diag", None)
    text = getattr(diag, "message_primary", None) or str(exc).strip()
    return cls(text)


def _qmark_to_pyformat(sql: str) -> str:
    """dpsql's ``?`` markers as psycopg's ``%s`` (``%`` doubled), outside strings and names."""
    from dpsql.server.placeholders import _skip_quoted

    out, i, start = [], 0, 0
    while i < len(sql):
        j = _skip_quoted(sql, i)
        if j != i:
            out.append(sql[start:j].replace("%", "%%"))
            i = start = j
            continue
        if sql[i] == "?":
            out.append(sql[start:i].replace("%", "%%") + "%s")
            start = i + 1
        i += 1
    out.append(sql[start:].replace("%", "%%"))
    return "".join(out)


def _release_of(detail: str | None) -> Release | None:
    if not detail:
        return None
    try:
        data = json.loads(detail)
        columns = tuple(ColumnRelease.from_json(c) for c in data.pop("columns"))
        return Release(columns=columns, **data)
    except (ValueError, TypeError, KeyError):
        return None


class RemoteConnection:
    """A PEP 249 connection to a dpsql server (see module docstring)."""

    def __init__(self, url: str, *, password: str | None = None, epsilon: float | None = None,
                 delta: float | None = None, sslmode: str | None = None,
                 mechanism: str | None = None, calibration: str | None = None,
                 raw_counts: bool = False) -> None:
        import psycopg

        kwargs: dict[str, Any] = {"autocommit": True}
        if password is not None:
            kwargs["password"] = password
        if sslmode is not None:
            kwargs["sslmode"] = sslmode
        try:
            self._conn = psycopg.connect(url, **kwargs)
        except psycopg.Error as exc:
            raise _translate(exc) from None
        #: the JSON details of this statement's notices (a Diagnostic is valid only inside the
        #: handler, so the text is copied out there)
        self._notices: list[str | None] = []
        self._conn.add_notice_handler(lambda diag: self._notices.append(diag.message_detail))
        self.epsilon, self.delta = epsilon, delta
        #: default noise mechanism and calibration (None: the server's default)
        self.mechanism, self.calibration = mechanism, calibration
        self._sent: tuple[Any, ...] = (None, None, None, None)
        self._raw_counts = False
        if raw_counts:
            self.raw_counts = True

    @property
    def raw_counts(self) -> bool:
        """Noisy counts as drawn (True) or clamped at 0 by the server (False, the default)."""
        return self._raw_counts

    @raw_counts.setter
    def raw_counts(self, raw: bool) -> None:
        import psycopg

        try:  # a session setting of the server (SET dpsql.raw_counts)
            self._conn.execute(f"SET dpsql.raw_counts = {'on' if raw else 'off'}")
        except psycopg.Error as exc:
            raise _translate(exc) from None
        self._raw_counts = bool(raw)

    def _check_open(self) -> None:
        if self._conn.closed:
            raise errors.InterfaceError("the connection is closed")

    def cursor(self) -> RemoteCursor:
        self._check_open()
        return RemoteCursor(self)

    def execute(self, sql: str, parameters: Sequence[Any] | None = None, *,
                epsilon: float | None = None, delta: float | None = None,
                mechanism: str | None = None, calibration: str | None = None) -> RemoteCursor:
        return self.cursor().execute(sql, parameters, epsilon=epsilon, delta=delta,
                                     mechanism=mechanism, calibration=calibration)

    def _budget(self, epsilon: float | None, delta: float | None,
                mechanism: str | None = None, calibration: str | None = None) -> None:
        """Send the per-query (epsilon, delta, mechanism, calibration) as session settings
        when they change."""
        wanted = (self.epsilon if epsilon is None else epsilon,
                  self.delta if delta is None else delta,
                  self.mechanism if mechanism is None else mechanism,
                  self.calibration if calibration is None else calibration)
        if wanted == self._sent:
            return
        from dpsql.budget import check_mechanism

        check_mechanism(wanted[2] or "laplace", wanted[3] or "analytic")
        with self._conn.cursor() as cur:
            for name, value in zip(("epsilon", "delta"), wanted[:2], strict=True):
                cur.execute(f"SET dpsql.{name} = {'DEFAULT' if value is None else float(value)!r}")
            for name, choice in zip(("mechanism", "calibration"), wanted[2:], strict=True):
                cur.execute(f"SET dpsql.{name} = {'DEFAULT' if choice is None else repr(choice)}")
        self._sent = wanted

    @property
    def analyst(self) -> str:
        """The authenticated user (who is charged)."""
        return str(self._conn.info.user)

    @property
    def where(self) -> str:
        info = self._conn.info
        return f"{info.user}@{info.host}:{info.port}/{info.dbname}"

    @property
    def schema(self) -> Metadata:
        """The analyst-facing schema of the tables this analyst may query, from the server
        (no max frequencies, row counts or paths: see dpsql.metadata.analyst)."""
        from dpsql.metadata import loads_metadata

        row = self.execute("SHOW dpsql.schema").fetchone()
        assert row is not None
        return loads_metadata(row[0])

    @property
    def budget(self) -> BudgetStatus:
        """This analyst's totals and spending on the server's database (no history: the
        charges are the owner's to read)."""
        row = self.execute("SHOW dpsql.budget").fetchone()
        assert row is not None
        e_total, e_left, d_total, d_left = (float(v) for v in row)
        return BudgetStatus(e_total, d_total, e_total - e_left, d_total - d_left)

    @property
    def budget_remaining(self) -> tuple[float, float]:
        """(epsilon, delta) this analyst has left on the server's database."""
        row = self.execute("SHOW dpsql.budget").fetchone()
        assert row is not None
        return float(row[1]), float(row[3])

    def commit(self) -> None:
        self._check_open()

    def rollback(self) -> None:
        self._check_open()

    def cancel(self) -> None:
        """Cancel the running query (from another thread): it is not charged."""
        self._conn.cancel()

    def close(self) -> None:
        self._conn.close()

    @property
    def closed(self) -> bool:
        return bool(self._conn.closed)

    def __enter__(self) -> RemoteConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class RemoteCursor:
    """A PEP 249 cursor over a remote connection."""

    arraysize = 1

    def __init__(self, connection: RemoteConnection) -> None:
        self.connection = connection
        self._cur = connection._conn.cursor()
        self.release: Release | None = None

    @property
    def description(self) -> Any:
        return self._cur.description

    @property
    def rowcount(self) -> int:
        return int(self._cur.rowcount)

    def execute(self, sql: str, parameters: Sequence[Any] | None = None, *,
                epsilon: float | None = None, delta: float | None = None,
                mechanism: str | None = None, calibration: str | None = None) -> RemoteCursor:
        import psycopg

        conn = self.connection
        conn._check_open()
        try:
            conn._budget(epsilon, delta, mechanism, calibration)
            conn._notices.clear()
            if parameters:
                self._cur.execute(_qmark_to_pyformat(sql), list(parameters))
            else:
                self._cur.execute(sql)  # no parameters: psycopg sends the text as it is
        except psycopg.Error as exc:
            raise _translate(exc) from None
        self.release = next((r for r in map(_release_of, conn._notices) if r is not None), None)
        return self

    def executemany(self, sql: str, seq_of_parameters: Sequence[Any]) -> None:
        raise errors.NotSupportedError(
            "executemany would spend budget once per parameter set; call execute in a loop")

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._fetch(lambda: self._cur.fetchone())

    def fetchmany(self, size: int | None = None) -> list[tuple[Any, ...]]:
        return self._fetch(lambda: self._cur.fetchmany(size or self.arraysize))

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._fetch(lambda: self._cur.fetchall())

    def fetchdf(self) -> Any:
        """The remaining rows as a pandas DataFrame (needs pandas)."""
        try:
            import pandas
        except ImportError:
            raise errors.NotSupportedError(
                "fetchdf() needs pandas: pip install 'dpsql[pandas]' (or use fetchall())"
            ) from None
        return pandas.DataFrame.from_records(self.fetchall(), columns=self._names())

    def fetch_arrow_table(self) -> Any:
        """The remaining rows as a ``pyarrow.Table`` (pyarrow, a dependency; the column
        types are inferred from the values the server sent)."""
        from dpsql.arrow import arrow_table

        names = self._names()
        return arrow_table(names, ["" for _ in names], self.fetchall())

    def _names(self) -> list[str]:
        if self._cur.description is None:
            raise errors.ProgrammingError("no query has been executed on this cursor")
        return [d.name for d in self._cur.description]

    def _fetch(self, read: Any) -> Any:
        import psycopg

        try:
            return read()
        except psycopg.ProgrammingError as exc:
            raise errors.ProgrammingError(str(exc)) from None

    def close(self) -> None:
        self._cur.close()

    def setinputsizes(self, sizes: Any) -> None:
        pass

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        pass

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.fetchall())

    def __enter__(self) -> RemoteCursor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
