"""The PEP 249 cursor of :mod:`dpsql.dbapi`: runs one query through its connection's session
and holds the materialised result."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dpsql.errors import (
    Error,
    InterfaceError,
    InternalError,
    NotSupportedError,
    ProgrammingError,
)
from dpsql.release.record import Release, Result

if TYPE_CHECKING:
    from dpsql.dbapi import Connection

Params = Sequence[Any] | None


class Cursor:
    """A PEP 249 cursor. Results are materialised (aggregates are small)."""

    def __init__(self, connection: Connection) -> None:
        #: the connection this cursor belongs to (PEP 249 extension)
        self.connection = connection
        #: rows fetchmany() returns by default
        self.arraysize = 1
        self._closed = False
        self._result: Result | None = None
        self._pos = 0

    def _check_open(self) -> None:
        if self._closed:
            raise InterfaceError("the cursor is closed; use connection.cursor() for a new one")
        self.connection._check_open()

    def _require_result(self) -> Result:
        self._check_open()
        if self._result is None:
            raise ProgrammingError("no query has been executed on this cursor; call execute()")
        return self._result

    @property
    def description(
        self,
    ) -> tuple[tuple[str, str, None, None, None, None, None], ...] | None:
        """(name, type_code, None, None, None, None, None) per column; type_code is the DuckDB
        type name (compares equal to dpsql.dbapi.NUMBER/STRING/...). None before a query."""
        if self._result is None:
            return None
        return tuple(
            (name, type_, None, None, None, None, None)
            for name, type_ in zip(self._result.names, self._result.types, strict=True)
        )

    @property
    def rowcount(self) -> int:
        """Number of rows of the last query's result; -1 before any query."""
        return -1 if self._result is None else len(self._result.rows)

    @property
    def release(self) -> Release | None:
        """The release record of the last query (epsilon, delta, mechanism per column,
        ``cached``), or None before a query."""
        return None if self._result is None else self._result.release

    def execute(
        self, sql: str, parameters: Params = None, *, epsilon: float | None = None,
        delta: float | None = None, mechanism: str | None = None,
        calibration: str | None = None,
    ) -> Cursor:
        """Answer ``sql`` privately; returns this cursor.

        Preconditions: ``parameters`` is a sequence matching the ``?`` markers (qmark style);
        an epsilon comes from this call or from :func:`connect`; ``mechanism`` ('laplace' or
        'gaussian') and ``calibration`` ('analytic' or 'classical') override the connection's.
        Guarantees: with a ledger, either the cached answer of an identical earlier request on
        the same data version and metadata is returned (``release.cached``; nothing charged;
        a delta the release never reads does not count: dpsql.release.cache), or exactly the
        release's (epsilon,
        delta) is charged, durably, before the database reads private data, and the answer is
        cached. A rejected, failed or cancelled query, bad parameters, or BudgetExhaustedError
        spend nothing and leave the cursor without a result; so does a query on public tables
        only (it needs no epsilon). Errors are dpsql's PEP 249 classes; KeyboardInterrupt
        propagates.
        """
        self._check_open()
        self._result, self._pos = None, 0  # a failed execute leaves no stale result behind
        conn = self.connection
        eps = conn.epsilon if epsilon is None else epsilon
        dlt = conn.delta if delta is None else delta
        mech = conn.mechanism if mechanism is None else mechanism
        cal = conn.calibration if calibration is None else calibration
        params = _check_params(parameters)
        try:
            result = conn._session.run(sql, params, epsilon=eps, delta=dlt, mechanism=mech,
                                       calibration=cal, raw_counts=conn.raw_counts)
        except Error:
            raise
        except Exception as exc:
            # PEP 249: everything the driver raises is an Error. Only the type is named: the
            # text of an unexpected exception could quote a private value.
            raise InternalError(
                f"unexpected {type(exc).__name__} while answering the query (a dpsql bug)"
            ) from None
        self._result = result
        return self

    def executemany(self, sql: str, seq_of_parameters: Sequence[Params]) -> None:
        """Not supported: one noisy answer per parameter set would spend budget silently."""
        self._check_open()
        raise NotSupportedError(
            "executemany() is not supported: each parameter set would be a separately charged "
            "noisy query; call execute() once per parameter set if you mean to spend that"
        )

    def fetchone(self) -> tuple[Any, ...] | None:
        """The next row, or None when the result is exhausted."""
        result = self._require_result()
        if self._pos >= len(result.rows):
            return None
        row = result.rows[self._pos]
        self._pos += 1
        return row

    def fetchmany(self, size: int | None = None) -> list[tuple[Any, ...]]:
        """Up to ``size`` (default :attr:`arraysize`) next rows; [] when exhausted."""
        result = self._require_result()
        n = self.arraysize if size is None else size
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ProgrammingError(f"fetchmany size must be an integer >= 0, got {n!r}")
        rows = result.rows[self._pos:self._pos + n]
        self._pos += len(rows)
        return rows

    def fetchall(self) -> list[tuple[Any, ...]]:
        """All remaining rows; [] when exhausted."""
        result = self._require_result()
        rows = result.rows[self._pos:]
        self._pos = len(result.rows)
        return rows

    def fetchdf(self) -> Any:
        """The remaining rows as a pandas DataFrame (needs the ``pandas`` extra); columns
        as :meth:`fetchall` types them (COUNT and integer SUMs int64, DECIMAL sums Decimal
        objects, NULL as NaN/None)."""
        result = self._require_result()
        try:
            import pandas
        except ImportError:
            raise NotSupportedError(
                "fetchdf() needs pandas: pip install 'dpsql[pandas]' (or use fetchall())"
            ) from None
        return pandas.DataFrame.from_records(self.fetchall(), columns=list(result.names))

    def fetch_arrow_table(self) -> Any:
        """The remaining rows as a ``pyarrow.Table`` (pyarrow, a dependency), its schema
        from :attr:`description` (BIGINT int64, DOUBLE float64, DECIMAL(p,s) decimal128(p, s),
        VARCHAR string, ...). ProgrammingError naming the extra when pyarrow is missing."""
        result = self._require_result()
        from dpsql.arrow import arrow_table

        return arrow_table(result.names, result.types, self.fetchall())

    def close(self) -> None:
        """Close the cursor (idempotent); every later use raises InterfaceError."""
        self._closed = True
        self._result = None

    def setinputsizes(self, sizes: Any) -> None:
        """No-op (PEP 249)."""
        self._check_open()

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        """No-op (PEP 249)."""
        self._check_open()

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        self._require_result()
        return self

    def __next__(self) -> tuple[Any, ...]:
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row

    def __enter__(self) -> Cursor:
        self._check_open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _check_params(parameters: Params) -> list[Any]:
    if parameters is None:
        return []
    if isinstance(parameters, (str, bytes, bytearray, Mapping)) or not isinstance(
        parameters, Sequence
    ):
        raise ProgrammingError(
            "parameters must be a sequence (list or tuple) matching the '?' markers; "
            f"got {type(parameters).__name__}"
        )
    return list(parameters)


