"""The one interface an execution backend implements (DuckDB today, Spark later)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Backend(Protocol):
    """Runs dpsql's generated SQL (never an analyst's text) and returns exact rows.

    ``dialect`` is the sqlglot dialect the generated SQL is transpiled to.
    """

    dialect: str

    def execute(
        self, sql: str, params: Mapping[str, Any] | None = None
    ) -> tuple[list[tuple[Any, ...]], list[str]]:
        """Run ``sql`` with named parameters; return (rows, column type names)."""
        ...

    def table_schema(self, table: str) -> dict[str, str]:
        """{column: type name} of ``table`` as the backend stores it, in DuckDB's type names
        (INTEGER, BIGINT, VARCHAR, DECIMAL(15,2), ...). Raises ProgrammingError when the backend
        has no such table. The engine fills undeclared metadata types from it: the analysis
        checks join keys' types (dpsql.column_types)."""
        ...

    def close(self) -> None: ...
