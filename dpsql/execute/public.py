"""A query over public tables only that the private pipeline refuses, run as written: exact and
free (the README's promise: "a query that reads only public tables is answered exactly").

The private pipeline needs what private data need: bounds for SUM and AVG, one mechanism per
query, no MIN / MAX beside COUNT. None of that protects anything when every table read is
public (``public: true`` in the metadata), so ``SELECT AVG(price) FROM products`` or ``SELECT
category, COUNT(*), MAX(price) ... GROUP BY category`` were refused for no reason (QA round
7). :func:`prepare_public` prepares such a query for the database as the analyst wrote it.

Contract. Precondition: the private pipeline refused ``sql`` (dpsql.session tries this path
only then, so every query it answers keeps its answer). Guarantee: None unless
dpsql.analysis.public_only finds that ``sql`` reads public tables only (through the same
allow-list and name hygiene as any query); then what runs reads public tables only, so its
answer, its errors and its cost reveal nothing private, and nothing is charged. Whether this
path applies depends on the SQL and the metadata alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dpsql.analysis.public_only import public_query
from dpsql.backends.base import Backend
from dpsql.errors import ProgrammingError
from dpsql.metadata import Metadata
from dpsql.release.record import EXACT, ColumnRelease, Release, Result
from dpsql.rewrite.parameters import bind_params


@dataclass(frozen=True)
class PreparedPublic:
    """A public-only query compiled for the backend (module contract)."""

    compiled: str
    names: tuple[str, ...]
    n_params: int
    fingerprint: str
    tables: frozenset[str]  #: what the query reads (a server checks its grants)


def prepare_public(sql: str, metadata: Metadata, backend: Backend,
                   fingerprint: str) -> PreparedPublic | None:
    """``sql`` prepared to run as written when it reads public tables only, else None."""
    query = public_query(sql, metadata)
    if query is None:
        return None
    return PreparedPublic(backend.compile(query.sql), query.names, query.n_params, fingerprint,
                          query.tables)


def run_public(backend: Backend, prepared: PreparedPublic, params: Sequence[Any] | None
               ) -> Result:
    """The exact answer of ``prepared`` with the analyst's qmark ``params``: free, its record
    says so (mechanism ``exact``, nothing spent)."""
    values = list(params or [])
    if len(values) != prepared.n_params:
        raise ProgrammingError(
            f"the query has {prepared.n_params} parameter marker(s) '?' but {len(values)} "
            "parameter(s) were given")
    rows, types = backend.execute(prepared.compiled,
                                  bind_params(tuple(range(prepared.n_params)), values))
    columns = tuple(ColumnRelease(name, None, 0.0, 0.0, None) for name in prepared.names)
    record = Release(0.0, 0.0, EXACT, columns, prepared.fingerprint)
    return Result(prepared.names, tuple(types), rows, record)
