"""A set operation's branches cast to its column types explicitly, with TRY_CAST: DuckDB's own
implicit cast could fail on one row.

DuckDB types each column of ``A UNION ALL B`` (UNION, INTERSECT, EXCEPT likewise) as the common
type of the branches' columns and casts every branch to it, row by row. Some of those casts
fail on any value (INTEGER to DATE: DuckDB binds ``SELECT d ... UNION ALL SELECT n ...`` as a
DATE), others on some values (a BIGINT past a DECIMAL's digits): the query then raised once a
row reached the cast and answered on an empty database -- an error telling whether a row
exists (the operand-types red team's incidental break).

Contract of :func:`cast_set_operations`: for every outermost set operation of the query and
every column position, the branches' column types are read from the SQL and the metadata
(dpsql.rewrite.operand_types, ``exact``: as the exact query computes them). When they are
all the same type, nothing changes. Otherwise every branch whose type is not the common type
(asked of DuckDB's binder on the data-free connection) projects ``TRY_CAST(column AS
common)`` under its own name: the same value where DuckDB's cast succeeds, NULL where it
would fail, so no row can raise. When some branch's type is unknown, the query is refused
before anything runs (UnsupportedConstructError naming the position and the fix: CAST the
column in every branch). Both read the SQL and the metadata alone.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.keytypes import normalise
from dpsql.errors import UnsupportedConstructError
from dpsql.metadata import Metadata
from dpsql.rewrite.operand_types import branches, common_type, operand_types

__all__ = ["cast_set_operations"]


def cast_set_operations(query: exp.Expression, metadata: Metadata | None,
                        ctes: frozenset[str]) -> None:
    """Cast every set operation's branches to its column types, in place (module contract)."""
    for operation in list(query.find_all(exp.SetOperation)):
        if _outermost(operation):
            _cast_branches(operation, metadata, ctes)


def _outermost(operation: exp.SetOperation) -> bool:
    """Whether ``operation`` is not itself a branch of a set operation (parenthesised or not):
    its branches, nested ones included, are cast to ITS column types, the final ones (a
    nested operation's own common type could need a failing cast itself)."""
    parent = operation.parent
    while isinstance(parent, exp.Subquery) and not parent.alias:
        parent = parent.parent
    return not isinstance(parent, exp.SetOperation)


def _cast_branches(operation: exp.SetOperation, metadata: Metadata | None,
                   ctes: frozenset[str]) -> None:
    selects = branches(operation)
    if not selects or any(any(isinstance(p, exp.Star) for p in s.expressions)
                          for s in selects):
        return  # BY NAME and stars are refused by the analysis; nothing to cast by position
    width = len(selects[0].expressions)
    if any(len(s.expressions) != width for s in selects):
        return  # DuckDB refuses branches of different widths at bind time, on every database
    for position in range(width):
        projections = [s.expressions[position] for s in selects]
        types = [operand_types(s, metadata, ctes, exact=True)(p.unalias())
                 for s, p in zip(selects, projections, strict=True)]
        if any(t is None or normalise(t) is None for t in types):
            name = projections[0].alias_or_name
            raise UnsupportedConstructError(
                f"the column {name!r} (position {position + 1}) of a "
                f"{operation.key.upper()} has a type dpsql cannot read from the metadata in "
                "some branch, and DuckDB's cast of it to the column's common type could fail "
                "on a row: CAST it to one type in every branch (CAST(x AS VARCHAR))")
        texts = [normalise(t).sql(dialect="duckdb") for t in types]  # type: ignore[union-attr]
        if len(set(texts)) == 1:
            continue
        common = common_type(texts)
        if common is None:
            continue  # DuckDB cannot bind the operation: it fails alike on every database
        target = normalise(common)
        for projection, text in zip(projections, texts, strict=True):
            if target is None or text == target.sql(dialect="duckdb"):
                continue
            cast = exp.TryCast(this=projection.unalias().copy(), to=target.copy())
            projection.replace(exp.alias_(cast, projection.alias_or_name, quoted=True))
