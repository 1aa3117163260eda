"""The one interface an execution backend implements (DuckDB, Spark), and a helper for it."""

from __future__ import annotations

from collections.abc import Mapping
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

    def table_schema(self, table: str) -> dict[str, str]:
        """{column: type name} of ``table`` as the backend stores it, in DuckDB's type names
        (INTEGER, BIGINT, VARCHAR, DECIMAL(15,2), ...). Raises ProgrammingError when the backend
        has no such table. The engine fills undeclared metadata types from it: the analysis
        checks join keys' types (dpsql.backends.types)."""
        ...

    def value_range(self, table: str, column: str) -> tuple[Any, Any] | None:
        """(least, greatest) non-NULL value ``column`` of declared ``table`` holds ((None,
        None) if none), as a promise that no stored value lies outside it for as long as the
        backend is open; None when the backend cannot promise that (data that may change,
        views over files, errors). The engine then runs a SUM of that column without its
        clamp when the bounds contain the range (:func:`dpsql.rewrite.plan_execution`): a
        range that is too narrow would be a privacy bug, so when unsure return None."""
        ...

    def distinct_values(self, table: str, column: str, *, limit: int) -> list[Any] | None:
        """Every distinct value ``column`` of declared ``table`` holds, ascending with NULL
        last (the order SQL's ORDER BY gives), with the same promise as :meth:`value_range`;
        None when the backend cannot promise it or there are more than ``limit``. The engine
        asks only for public tables' columns, to inline a GROUP BY domain instead of scanning
        the table in every query."""
        ...

    def interrupt(self) -> None:
        """Stop the query running now, from any thread (it raises QueryCancelledError)."""
        ...

    def close(self) -> None: ...
