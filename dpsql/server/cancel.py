"""What a CancelRequest does at every moment of a statement (one connection's backend, wrapped).

PostgreSQL's cancel is best effort: it interrupts the query if one runs. dpsql's statement is
more than a backend query -- analysis, the public reads, the durable charge (a SQLite write),
the exact read, noise, post-processing and the durable audit write -- and a cancel that arrived
while no backend query ran (the ledger write, say) used to be lost: the statement went on and
its answer was delivered. The rule now, consistent with :mod:`dpsql.session`'s (a charge whose
exact read fails or is cancelled is refunded; once noise is drawn an answer is delivered or its
charge stands):

* a CancelRequest that arrives **before the exact read has returned** -- during the analysis,
  the public reads, the charge's write, or the read itself -- stops the statement: the client
  gets 57014 and any charge is refunded (no noisy value existed);
* one that arrives **later** -- noise, post-processing, the audit write -- is too late, as a
  PostgreSQL cancel that arrives after the result exists: the answer is delivered and stays
  charged (its rows are in the audit log before the client sees them).

How: :class:`CancellableBackend` keeps the request (a flag) and checks it before and after every
backend read, besides interrupting the read that runs; a request that arrives between reads is
thus seen at the next check. The session raises QueryCancelledError from inside its guarded
read (step 9), which refunds the charge. The flag is cleared when the next statement starts
(:meth:`CancellableBackend.begin`), so a cancel that comes after its statement ended never
cancels a later one.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dpsql.backends.base import Backend
from dpsql.errors import QueryCancelledError


class CancellableBackend:
    """A :class:`~dpsql.backends.base.Backend` whose :meth:`interrupt` is never lost (module
    docstring). Thread-safe: :meth:`interrupt` comes from the event loop's thread while a
    worker thread reads."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.dialect = inner.dialect
        self._requested = threading.Event()

    # -- the cancel request -----------------------------------------------------------------

    def begin(self) -> None:
        """A new statement starts: forget a request that came after the previous one ended."""
        self._requested.clear()

    def interrupt(self) -> None:
        """Cancel the statement running now: stop the read that runs (if any) and make every
        later check until :meth:`begin` raise QueryCancelledError."""
        self._requested.set()
        self.inner.interrupt()

    @property
    def columnar(self) -> bool:
        return bool(self.inner.columnar)

    @property
    def cancel_requested(self) -> bool:
        return self._requested.is_set()

    def _check(self) -> None:
        if self._requested.is_set():
            raise QueryCancelledError("the query was cancelled before anything was released")

    # -- reads: checked before and after ---------------------------------------------------

    def check(self, compiled: str, params: Mapping[str, Any] | None = None) -> None:
        self._check()
        self.inner.check(compiled, params)
        self._check()

    def execute(self, compiled: str, params: Mapping[str, Any] | None = None
                ) -> tuple[list[tuple[Any, ...]], list[str]]:
        self._check()
        out = self.inner.execute(compiled, params)
        self._check()  # the read finished, but the request came first: nothing is released
        return out

    def execute_columns(self, compiled: str, params: Mapping[str, Any] | None = None
                        ) -> tuple[list[np.ndarray], list[str]]:
        self._check()
        out = self.inner.execute_columns(compiled, params)
        self._check()
        return out

    def execute_flat_columns(self, compiled: str, params: Mapping[str, Any] | None = None,
                             max_rows: int | None = None
                             ) -> tuple[list[np.ndarray], list[str]]:
        self._check()
        out = self.inner.execute_flat_columns(compiled, params, max_rows)
        self._check()
        return out

    # -- the rest: the inner backend's ------------------------------------------------------

    def compile(self, sql: str) -> str:
        return self.inner.compile(sql)

    def table_schema(self, table: str) -> dict[str, str]:
        return self.inner.table_schema(table)

    def table_schemas(self, tables: Sequence[str]) -> dict[str, dict[str, str] | None]:
        return self.inner.table_schemas(tables)

    def value_range(self, table: str, column: str) -> tuple[Any, Any] | None:
        return self.inner.value_range(table, column)

    def domain_table(self, table: str, column: str) -> str | None:
        return self.inner.domain_table(table, column)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # a backend's own extras (Spark's session, ...)
        return getattr(self.inner, name)
