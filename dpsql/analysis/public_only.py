"""Whether a query reads public tables only, and its SQL to run as written
(dpsql.execute.public: the private pipeline's refusals of such a query protect nothing).

Contract of :func:`public_query`: None unless ``sql`` passes the same parse, allow-list (every
aggregate allowed: MIN, MAX and AVG need no bounds over public data) and name hygiene as any
query, and every table it reads is declared ``public: true``; then the qualified query in
DuckDB SQL, the analyst's ``?`` numbered as named parameters. The SQL and the metadata alone
decide.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dpsql.analysis.checks import tables_read
from dpsql.analysis.parse import DIALECT, parse_query
from dpsql.errors import Error
from dpsql.metadata import Metadata
from dpsql.rewrite.parameters import PARAM_PREFIX, number_parameters

__all__ = ["PublicQuery", "public_query"]


@dataclass(frozen=True)
class PublicQuery:
    """A query of public tables only (module contract)."""

    sql: str  #: DuckDB SQL; the i-th ``?`` is the named parameter PARAM_PREFIX + i
    names: tuple[str, ...]  #: the output columns' names
    n_params: int
    tables: frozenset[str]


def public_query(sql: str, metadata: Metadata) -> PublicQuery | None:
    """``sql`` as a :class:`PublicQuery` when it reads public tables only, else None."""
    try:
        query = parse_query(sql, metadata, allow_top_star=True, extra_funcs=(exp.AggFunc,))
    except Error:
        return None
    tables = tables_read(query)
    declared = {name.lower(): table for name, table in metadata.tables.items()}
    if not tables or not all(t.lower() in declared and declared[t.lower()].public
                             for t in tables):
        return None
    numbered = number_parameters(query)
    n_params = sum(1 for p in numbered.find_all(exp.Placeholder)
                   if str(p.this).startswith(PARAM_PREFIX))
    return PublicQuery(numbered.sql(dialect=DIALECT),
                       tuple(s.alias_or_name for s in query.selects), n_params, tables)
