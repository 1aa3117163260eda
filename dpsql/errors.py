"""PEP 249 exception tree plus the differential-privacy rejections (docs/design.md, "Interfaces").

Every rejection message says which construct was refused and what would make the query
acceptable. Messages never quote private values, max frequencies or sensitivities.
"""

from __future__ import annotations


class Warning(Exception):  # the name is mandated by PEP 249
    """Important warnings (PEP 249)."""


class Error(Exception):
    """Base class of every dpsql error (PEP 249)."""

    def __init__(self, message: str, *, position: tuple[int, int] | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: (line, column), 1-based, of the offending SQL token when known (parse errors).
        self.position = position

    def to_json(self) -> dict:
        """The error object the CLI prints with --json: {"error": {"type", "message"}}. The
        type is the class of this module the error is an instance of (PEP 249's, or a DP
        rejection's), never a subclass an analysis raises to carry its message's parts."""
        public = next(c for c in type(self).__mro__ if c.__module__ == __name__)
        return {"error": {"type": public.__name__, "message": self.message}}


class InterfaceError(Error):
    """Misuse of the driver itself, e.g. a closed cursor (PEP 249)."""


class DatabaseError(Error):
    """Errors related to the database (PEP 249)."""


class DataError(DatabaseError):
    """Problems with processed data (PEP 249). ``sqlstate``: the server's code when the raiser
    knows a finer one than 22000 (dpsql.rewrite.literal_casts: 22007 for a date or time
    literal, 22P02 else -- set from the type, never read from the message, which quotes the
    analyst's words)."""

    sqlstate: str | None = None


class OperationalError(DatabaseError):
    """Errors in the database's operation, e.g. an unreadable ledger (PEP 249)."""


class IntegrityError(DatabaseError):
    """Relational integrity violated (PEP 249)."""


class InternalError(DatabaseError):
    """An internal inconsistency; a dpsql bug (PEP 249)."""


class ProgrammingError(DatabaseError):
    """SQL syntax errors, unknown tables or columns, invalid metadata (PEP 249)."""


class NotSupportedError(DatabaseError):
    """A method or query dpsql cannot serve (PEP 249); parent of the DP rejections."""


class UnsupportedQueryError(NotSupportedError):
    """The query is not an aggregate query dpsql can release (raw rows, DDL/DML, ...)."""


class UnsupportedConstructError(NotSupportedError):
    """A SQL construct without a sound sensitivity rule (non-equijoin, window, table function)."""


class MissingMetricError(NotSupportedError):
    """A join key without max frequency, or a SUM/AVG argument without declared bounds."""


class ProtectedBinError(NotSupportedError):
    """A GROUP BY key that is not releasable or has no declared domain."""


class AggregateArithmeticError(NotSupportedError):
    """An aggregate used inside a subquery in a way no sensitivity rule covers."""


class BudgetExhaustedError(OperationalError):
    """The query would overspend the analyst's privacy budget; nothing was spent."""


class QueryCancelledError(OperationalError):
    """The query was cancelled while it ran; nothing was released and nothing was charged."""


def sigint_interrupted(err: BaseException) -> bool:
    """Whether ``err`` is DuckDB's report of a Ctrl-C (SIGINT) during a query. DuckDB's Python
    client catches the signal, stops the query and raises a plain ``RuntimeError('Query
    interrupted')`` -- neither ``duckdb.InterruptException`` (that is ``interrupt()``'s) nor
    ``KeyboardInterrupt`` -- so without this a Ctrl-C in ``dpsql shell`` was reported as
    "unexpected RuntimeError ... (a dpsql bug)", and one in post-processing (after the noise)
    was not treated as the cancellation it is. The callers raise KeyboardInterrupt instead
    (which the session refunds and the cursor lets propagate)."""
    return type(err) is RuntimeError and str(err) == "Query interrupted"


__all__ = [
    "AggregateArithmeticError",
    "BudgetExhaustedError",
    "DataError",
    "DatabaseError",
    "Error",
    "IntegrityError",
    "InterfaceError",
    "InternalError",
    "MissingMetricError",
    "NotSupportedError",
    "OperationalError",
    "ProgrammingError",
    "ProtectedBinError",
    "QueryCancelledError",
    "UnsupportedConstructError",
    "UnsupportedQueryError",
    "Warning",
]
