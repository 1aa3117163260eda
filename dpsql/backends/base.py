"""The one interface an execution backend implements (DuckDB, Spark), and a helper for it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np


def columns_of(rows: list[tuple[Any, ...]], n_columns: int) -> list[np.ndarray]:
    """Rows as one object array per column (for backends that only return rows)."""
    if not rows:
        return [np.empty(0, dtype=object) for _ in range(n_columns)]
    out = []
    for column in zip(*rows, strict=True):
        array = np.empty(len(column), dtype=object)
        array[:] = column
        out.append(array)
    return out


class Backend(Protocol):
    """Runs dpsql's generated SQL (never an analyst's text) and returns exact rows.

    The session calls :meth:`compile` and :meth:`check` while preparing a release, before the
    ledger is charged: every refusal they raise costs the analyst nothing. ``execute`` runs
    what ``compile`` returned. ``dialect`` is the sqlglot dialect the generated SQL is
    transpiled to.
    """

    dialect: str

    @property
    def columnar(self) -> bool:
        """Whether :meth:`execute_columns` fetches columns as arrays natively (DuckDB: numpy)
        rather than through a Python tuple per row (Spark): reading millions of rows flat
        (dpsql.units.multi_rewrite) is worth it only then."""
        ...

    def compile(self, sql: str) -> str:
        """The backend's own text for dpsql's generated SQL (DuckDB dialect); raises
        NotSupportedError for what the backend cannot run. Reads no data."""
        ...

    def check(self, compiled: str, params: Mapping[str, Any] | None = None) -> None:
        """Bind and plan ``compiled`` with ``params`` without reading any row (DuckDB:
        EXPLAIN; Spark: analysis); raises ProgrammingError naming only the error's
        class (a type mismatch the binder finds depends on the SQL and the schema, never on
        data)."""
        ...

    def execute(
        self, compiled: str, params: Mapping[str, Any] | None = None
    ) -> tuple[list[tuple[Any, ...]], list[str]]:
        """Run compiled SQL with named parameters; return (rows, column type names).
        Raises QueryCancelledError when :meth:`interrupt` stopped it."""
        ...

    def execute_columns(
        self, compiled: str, params: Mapping[str, Any] | None = None
    ) -> tuple[list[np.ndarray], list[str]]:
        """As :meth:`execute`, but one array per column (a NULL is a masked entry or None):
        for results of many rows of numbers, which need no Python tuple per row."""
        ...

    def execute_flat_columns(
        self, compiled: str, params: Mapping[str, Any] | None = None,
        max_rows: int | None = None
    ) -> tuple[list[np.ndarray], list[str]]:
        """:meth:`execute_columns` for a long result of unit ids and DOUBLE values (the flat
        read over two privacy units, dpsql.units.multi_rewrite, and its grouped fallback: both
        read through here, so they code the ids alike): the same rows, the same values, in
        whatever order; a NULL masked; the ids' values as numbers or Python objects, exact
        (no two distinct ids equal, as a double would make DECIMAL ids past 2^53).
        ``max_rows`` (the flat reads' guard): a result of more rows may be returned cut, but
        still longer than ``max_rows`` (the caller discards it and reads the fallback), so
        the read stops early instead of holding every row."""
        ...

    def table_schema(self, table: str) -> dict[str, str]:
        """{column: type name} of ``table`` as the backend stores it, in DuckDB's type names
        (INTEGER, BIGINT, VARCHAR, DECIMAL(15,2), ...). Raises ProgrammingError when the backend
        has no such table. The engine fills undeclared metadata types from it: the analysis
        checks join keys' types (dpsql.backends.types)."""
        ...

    def table_schemas(self, tables: Sequence[str]) -> dict[str, dict[str, str] | None]:
        """{table: :meth:`table_schema`} of each of ``tables``, None for one the backend does
        not have: every declared table's schema when an engine opens, read at once."""
        ...

    def value_range(self, table: str, column: str) -> tuple[Any, Any] | None:
        """(least, greatest) non-NULL value ``column`` of declared ``table`` holds ((None,
        None) if none), as a promise that no stored value lies outside it for as long as the
        backend is open; None when the backend cannot promise that (data that may change,
        views over files, errors). The engine then runs a SUM of that column without its
        clamp when the bounds contain the range (:func:`dpsql.rewrite.plan_execution`): a
        range that is too narrow would be a privacy bug, so when unsure return None."""
        ...

    def domain_table(self, table: str, column: str) -> str | None:
        """The name of a table the backend registered for this connection (a ``__`` name, so
        no analyst identifier can refer to it) holding the result of
        :func:`dpsql.rewrite.domains.scan_relation` over ``column`` of declared public
        ``table``: its distinct values ascending with NULL last, ``__v``, and their ordinals,
        ``__o``; with the same promise as :meth:`value_range` (the table stays exactly that
        while the backend is open); None when the backend cannot promise it. The engine
        asks only for public tables' columns, to read a GROUP BY domain from it rather than
        scanning the table in every query."""
        ...

    def interrupt(self) -> None:
        """Stop the query running now, from any thread (it raises QueryCancelledError)."""
        ...

    def close(self) -> None: ...
