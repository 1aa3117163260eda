"""One query on many tiny databases in ONE DuckDB query (not a test module).

The brute-force suites run a query on a database D and on every neighbour of D: thousands of
databases of a few rows each. Run one by one (each database's tables written as leading CTEs
over VALUES, ``tests/bruteforce/test_soundness.py``'s ``run``), DuckDB's per-query cost (parse,
bind, optimise) is almost all of the time. Here the databases are numbered; each table's rows
of ALL of them form one table tagged with the number, and the query runs once per number as a
LATERAL subquery whose leading CTEs define each table as its rows with that number::

    WITH a__all AS (SELECT unnest($1::INTEGER[]) AS db__, unnest($2::INTEGER[]) AS x, ...),
         dbs__(db__) AS (SELECT range FROM range(<number of databases>))
    SELECT dbs__.db__, q__.* FROM dbs__, LATERAL (
        WITH a(x, y) AS (SELECT x, y FROM a__all WHERE a__all.db__ = dbs__.db__), ...
        <the query, unchanged>) q__

The query text is not rewritten: inside the LATERAL it reads tables ``a``, ``b``, ... holding
exactly one database's rows, as it does one by one. Every database is still evaluated
separately (what the brute force needs: each neighbour's exact answer); only the SQL statement
is shared. A scalar aggregate yields one row per database even on empty tables (LATERAL keeps
SQL's "aggregate over nothing" row). ``tests/bruteforce/test_batch.py`` checks the answers equal
the one-by-one ones for every template and key type the suites use.

Values: by default the rows are bound as list parameters of each column's type (``types``,
default INTEGER: what DuckDB types the one-by-one runner's small integer literals as), so the
statement stays small whatever the number of databases. Callers whose values are SQL literal
texts (the key-type checks: ``'01'``, ``DATE '2020-01-01'``) pass ``literal``, which turns each
value into SQL (there ``CAST(v AS T)``, exactly as one by one); the rows then form a VALUES list,
and a column with no row in any database is ``NULL::<type>``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import duckdb

Database = Mapping[str, Sequence[tuple[Any, ...]]]
#: (table, column index, value) -> the SQL literal of that value
Literal = Callable[[str, int, Any], str]


def batched_sql(sql: str, dbs: Sequence[Database], schema: Mapping[str, Sequence[str]], *,
                literal: Literal | None = None,
                types: Mapping[str, Sequence[str]] | None = None) -> tuple[str, list[list[Any]]]:
    """The one statement evaluating ``sql`` on every database of ``dbs`` (see the module) and
    its parameters."""
    types = types or {}
    outer, inner, params = [], [], []
    for name, cols in schema.items():
        col_types = types.get(name, ["INTEGER"] * len(cols))
        rows = [(number, *row) for number, db in enumerate(dbs) for row in db[name]]
        names = ", ".join(cols)
        if literal is None:
            unnests = []
            for i, col_type in enumerate(["INTEGER", *col_types]):
                params.append([row[i] for row in rows])
                unnests.append(f"unnest(${len(params)}::{col_type}[])")
            outer.append(f"{name}__all(db__, {names}) AS (SELECT {', '.join(unnests)})")
        else:
            if rows:
                body = "VALUES " + ", ".join(
                    "(" + ", ".join([str(row[0]), *(literal(name, i, v)
                                                    for i, v in enumerate(row[1:]))]) + ")"
                    for row in rows)
            else:
                body = "SELECT NULL::INTEGER, " + ", ".join(
                    f"NULL::{t}" for t in col_types) + " WHERE false"
            outer.append(f"{name}__all(db__, {names}) AS ({body})")
        inner.append(f"{name}({names}) AS (SELECT {names} FROM {name}__all "
                     f"WHERE {name}__all.db__ = dbs__.db__)")
    stripped = sql.lstrip()
    prefix = "WITH " + ", ".join(inner)
    if stripped[:5].upper() == "WITH ":
        query = prefix + ", " + stripped[5:]
    else:
        query = prefix + " " + stripped
    statement = (f"WITH {', '.join(outer)}, dbs__(db__) AS (SELECT range FROM range({len(dbs)})) "
                 f"SELECT dbs__.db__, q__.* FROM dbs__, LATERAL ({query}) q__")
    return statement, params


def run_many(con: duckdb.DuckDBPyConnection, sql: str, dbs: Sequence[Database],
             schema: Mapping[str, Sequence[str]], *, literal: Literal | None = None,
             types: Mapping[str, Sequence[str]] | None = None) -> list[list[tuple[Any, ...]]]:
    """The result rows of ``sql`` on each database of ``dbs``, in order (one list each)."""
    if not dbs:
        return []
    out: list[list[tuple[Any, ...]]] = [[] for _ in dbs]
    statement, params = batched_sql(sql, dbs, schema, literal=literal, types=types)
    for number, *row in con.execute(statement, params).fetchall():
        out[number].append(tuple(row))
    return out
