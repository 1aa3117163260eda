"""SQLSTATE codes of dpsql's errors, as the server sends them (docs/design.md, "Server")."""

from __future__ import annotations

import duckdb

from dpsql import errors
from dpsql.server.statements import AccessDenied


class NoSuchObject(errors.ProgrammingError):
    """A Bind, Describe, Execute or Parse names a prepared statement or portal wrongly:
    PostgreSQL's codes 26000 (no such statement), 34000 (no such portal) and 42P05 (the
    statement exists already); the connection goes on after the next Sync."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def sqlstate(exc: BaseException) -> str:
    """The SQLSTATE code of a dpsql error (docs/design.md, "Server")."""
    if isinstance(exc, NoSuchObject):
        return exc.code
    if isinstance(exc, AccessDenied):
        return "42501"
    if isinstance(exc, errors.QueryCancelledError):
        return "57014"
    if isinstance(exc, errors.BudgetExhaustedError):
        return "53400"
    if isinstance(exc, errors.NotSupportedError):
        return "0A000"
    if isinstance(exc, errors.ProgrammingError):
        text = str(exc).lower()
        if "syntax" in text or "parse" in text:
            return "42601"
        if "not in scope" in text or "could not be resolved for table" in text:
            return "42P01"  # PostgreSQL: a FROM-clause entry missing or not visible there
        if "could not be resolved" in text or "unknown column" in text:
            return "42703"
        if "unknown table" in text or "not declared" in text:
            return "42P01"
        return "42000"
    if isinstance(exc, errors.DataError):
        return exc.sqlstate or "22000"
    if isinstance(exc, errors.OperationalError):
        return "58000"
    if isinstance(exc, duckdb.Error):  # a catalog query the shadow schema cannot answer
        return "42000"
    return "XX000"
