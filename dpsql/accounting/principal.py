"""Who is charged where: the database identity budgets are keyed by, analyst names, timestamps.

Shared by every part of the ledger (:mod:`~dpsql.accounting.ledger`,
:mod:`~dpsql.accounting.audit`, :mod:`~dpsql.accounting.analysts`).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from functools import lru_cache

from dpsql.errors import ProgrammingError


def now() -> str:
    """The current time, UTC, ISO 8601 with microseconds (sorts as text)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def database_identity(database: str | os.PathLike | None) -> str:
    """The key under which a database's budgets are kept.

    Precondition: ``database`` is what the engine passes to DuckDB (a file path), or None.
    Guarantee: None, "" and ":memory:" (also DuckDB's named ":memory:x") map to ":memory:" (all
    in-memory databases share one budget, which can only err towards spending less); a string
    containing "://" (a remote/Spark URI) is returned unchanged; anything else maps to the
    ``realpath`` of the user-expanded path, so "shop.duckdb", "./shop.duckdb" and a symlink to it
    share ONE budget (an absolute path is resolved once per process: ``_real_absolute``). The
    function is idempotent.
    """
    if database is None:
        return ":memory:"
    text = os.fspath(database)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if text == "" or text.startswith(":memory:"):
        return ":memory:"
    if "://" in text:
        return text
    path = os.path.expanduser(text)
    # a relative path depends on the working directory: resolved every time
    return _real_absolute(path) if os.path.isabs(path) else os.path.realpath(path)


@lru_cache(maxsize=256)
def _real_absolute(path: str) -> str:
    """The realpath of the absolute ``path``, resolved once per process: every ledger call
    keys its principal here (several per query, with the identity itself, already absolute),
    and ``realpath`` costs a system call per path component. A symlink retargeted while the
    process runs keeps its first target: the budget stays the one the process started
    charging (as a server's database identity, computed once at start, does)."""
    return os.path.realpath(path)


def principal(database: str, analyst: str) -> tuple[str, str]:
    """(database identity, analyst): the key of one budget. Raises ProgrammingError for an
    empty or non-string analyst."""
    if not isinstance(analyst, str) or not analyst:
        raise ProgrammingError("analyst must be a non-empty string")
    return database_identity(database), analyst
