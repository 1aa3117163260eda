"""A backend that runs each distinct query once and replays its result afterwards.

For owners' tools that draw many releases of one query on one database (the privacy audit, the
accuracy benchmark): the exact values do not change between draws, so reading them once and
replaying them leaves every draw's noise, plan and post-processing exactly as in production.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ReplayBackend:
    """Runs each distinct (sql, params) once on ``inner`` and replays the result afterwards
    (rows, or columns: the arrays are never written to, so sharing them is safe). Everything
    else (schemas, compile, the binder check) goes to ``inner``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.dialect = inner.dialect
        self.cache: dict[tuple, tuple[list, list]] = {}
        self.executions = 0

    def _replay(self, method: str, sql: str, params: Mapping[str, Any] | None,
                *more: Any):
        # lists (inlined public domains) as tuples, to be hashable
        key = (method, sql, tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                                         for k, v in (params or {}).items())), more)
        if key not in self.cache:
            self.cache[key] = getattr(self.inner, method)(sql, params, *more)
            self.executions += 1
        out, types = self.cache[key]
        return list(out), list(types)

    def execute(self, sql: str, params: Mapping[str, Any] | None = None):
        return self._replay("execute", sql, params)

    def execute_columns(self, sql: str, params: Mapping[str, Any] | None = None):
        return self._replay("execute_columns", sql, params)

    def execute_flat_columns(self, sql: str, params: Mapping[str, Any] | None = None,
                             max_rows: int | None = None):
        return self._replay("execute_flat_columns", sql, params, max_rows)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def close(self) -> None:
        """Nothing: ``inner`` belongs to the caller, who may share it and closes it."""
