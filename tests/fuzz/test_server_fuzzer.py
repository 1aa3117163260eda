"""The differential error fuzzer through the server's statement layer (dpsql/server/statements.py
and sqlstates.py): the same grammar's queries, written with PostgreSQL's ``$n`` markers, and
the catalog and session statements a client sends, must have the same analyst-visible outcome
(the released group labels, or the SQLSTATE and message) on neighbouring databases and under
metadata whose max frequencies differ. Together with tests/fuzz/test_error_fuzzer.py this puts
the server's routing, marker translation, grant and cap checks and SQLSTATE mapping under the
same rule as the library.

Bounded for CI (fixed seed, ``SERVER_FUZZ_EXAMPLES`` examples); a longer run:
``DPSQL_FUZZ_EXAMPLES=5000 python -m pytest tests/fuzz``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings

from dpsql.accounting.analysts import AnalystAccount
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import Error
from dpsql.server.placeholders import _skip_quoted
from dpsql.server.sqlstates import sqlstate
from dpsql.server.statements import StatementRunner
from dpsql.session import Session
from tests.fuzz import worlds
from tests.fuzz.grammar import Query, queries
from tests.shop_fixture import ZeroNoise

# one xdist worker runs this module: its runners (a session per world database) built once
pytestmark = pytest.mark.xdist_group("server-fuzzer")

#: 100 in CI (the in-process fuzzer draws 150 of the same grammar; what the wire adds --
#: routing, marker translation, the SQLSTATE mapping -- depends on the outcome's class, which
#: 100 queries reach as often), more with DPSQL_FUZZ_EXAMPLES
SERVER_FUZZ_EXAMPLES = int(os.environ.get("DPSQL_FUZZ_EXAMPLES", "100"))
SETTINGS = settings(max_examples=SERVER_FUZZ_EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: what clients send besides queries: catalog probes and session commands (no data behind them)
CLIENT_STATEMENTS = [
    "SELECT version()",
    "SELECT table_name, column_name FROM information_schema.columns ORDER BY 1, 2",
    "SELECT c.relname FROM pg_catalog.pg_class c WHERE c.relname OPERATOR(pg_catalog.~) '^t$'",
    "SHOW transaction isolation level",
    # SQLAlchemy's reflection: PostgreSQL type names, json_build_object, current_setting
    "SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) FROM "
    "pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid WHERE "
    "c.relname = 't' AND a.attnum > 0 ORDER BY a.attnum",
    "SELECT json_build_object('k', pg_catalog.pg_class.relname) FROM pg_catalog.pg_class "
    "WHERE pg_catalog.pg_class.relname = 't'",
    "SELECT current_setting('default_table_access_method')",
    "SELECT count(*) FROM pg_catalog.pg_index WHERE indnullsnotdistinct",
    "SET dpsql.epsilon = 0.5",
    "SET dpsql.epsilon = -1",
    "SET dpsql.unknown = 1",
    "SELECT * FROM t",
    "SELECT COUNT(*) FROM t WHERE $1",
]


@pytest.fixture(scope="module")
def runners(tmp_path_factory):
    """A statement runner per database (base first), and the base under metadata with other
    max frequencies; the analyst may read every table and spend up to epsilon 2 per query."""
    base, neighbours, csv = worlds.build(tmp_path_factory.mktemp("server-fuzz"))
    account = AnalystAccount("fuzz", None, 2.0, None, None, None)
    out = {}
    for name, path, mf in [("base", base, worlds.MAX_FREQS[0]),
                           *[(n, p, worlds.MAX_FREQS[0]) for n, p in neighbours.items()],
                           ("mf", base, worlds.MAX_FREQS[1])]:
        md = worlds.metadata(csv, mf=mf)
        out[name] = StatementRunner(Session(md, DuckDBBackend(path, md), sampler=ZeroNoise()),
                                    account, "fuzz")
    yield out
    for runner in out.values():
        runner.close()
        runner.session.backend.close()


def dollar_markers(sql: str) -> str:
    """The grammar's ``?`` markers as ``$1, $2, ...`` (outside strings), as clients send them."""
    out, i, start, n = [], 0, 0, 0
    while i < len(sql):
        j = _skip_quoted(sql, i)
        if j != i:
            i = j
            continue
        if sql[i] == "?":
            n += 1
            out.append(f"{sql[start:i]}${n}")
            start = i + 1
        i += 1
    return "".join(out) + sql[start:]


def outcome(runner: StatementRunner, sql: str, params: list) -> tuple[str, object]:
    """("ok", released group labels or row count) or (SQLSTATE, message)."""
    try:
        answer = runner.answer(sql, params)
    except Error as err:
        return sqlstate(err), str(err)
    if answer.release is not None and " GROUP BY " in sql:
        return "ok", [row[0] for row in answer.rows]
    return "ok", len(answer.rows) if answer.release is None else None


def _check(runners, sql: str, params: list) -> None:
    expected = outcome(runners["base"], sql, params)
    for name, runner in runners.items():
        got = outcome(runner, sql, params)
        assert got == expected, (
            f"neighbour {name!r} tells the databases apart through the server\n  sql: {sql}\n"
            f"  params: {params!r}\n  base: {expected}\n  {name}: {got}")


@SETTINGS
@given(query=queries())
def test_server_outcomes_never_tell_neighbours_apart(runners, query: Query):
    for runner in runners.values():
        runner.answer("SET dpsql.epsilon = 1")
    _check(runners, dollar_markers(query.sql), list(query.params))


@pytest.mark.parametrize("sql", CLIENT_STATEMENTS)
def test_client_statements_never_tell_neighbours_apart(runners, sql: str):
    _check(runners, sql, [True] if "$1" in sql else [])
