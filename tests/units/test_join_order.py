"""A join's ON that reads a table joined later in the FROM (QA round 2 of issue #17): refused
by the SQL alone, with and without a privacy unit, naming the table out of scope and the fix
(reorder the joins), not as a join without an equality."""

from __future__ import annotations

import dataclasses

import pytest

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import ProgrammingError
from tests.ledgers import charged, ledger_session, open_ledger
from tests.shop_fixture import ZeroNoise
from tests.units import tiny

LATER = ("SELECT COUNT(*) AS n FROM orders o0 JOIN customer c ON c.c_id = o.o_cust "
         "JOIN orders o ON o.o_id = o0.o_id")
#: the same joins in an order where every ON reads tables already joined
REORDERED = ("SELECT COUNT(*) AS n FROM orders o0 JOIN orders o ON o.o_id = o0.o_id "
             "JOIN customer c ON c.c_id = o.o_cust")


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    db = {"customer": [(1, 1), (2, 2)], "orders": [(1, 1, 3), (2, 1, -1), (3, 2, 4)],
          "items": [(1, 2, 1)], "regions": [(1,), (2,)]}
    return tiny.write_file(tmp_path_factory.mktemp("join_order") / "shop.duckdb", db)


@pytest.fixture
def session_of(database, tmp_path):
    opened = []

    def session(metadata):
        backend = DuckDBBackend(database, metadata)
        ledger = open_ledger(tmp_path / f"ledger{len(opened)}.sqlite", epsilon=10.0, delta=0.0)
        opened.append((backend, ledger))
        return ledger_session(metadata, backend, ledger, sampler=ZeroNoise())

    yield session
    for backend, ledger in opened:
        backend.close()
        ledger.close()


@pytest.mark.parametrize("unit", [True, False], ids=["privacy unit", "row level"])
@pytest.mark.parametrize("sql,joined,table,column", [
    (LATER, "c", "o", "o.o_cust"),
    # no alias: the table's name is the one out of scope
    ("SELECT COUNT(*) AS n FROM orders AS o0 JOIN customer ON customer.c_id = orders.o_cust "
     "JOIN orders ON orders.o_id = o0.o_id", "customer", "orders", "orders.o_cust"),
    # in an EXISTS body: its own later table, not the outer one of the same name
    ("SELECT COUNT(*) AS n FROM orders o WHERE EXISTS (SELECT 1 FROM orders x JOIN customer y "
     "ON y.c_id = o.o_cust JOIN orders o ON o.o_id = x.o_id)", "y", "o", "o.o_cust"),
])
def test_a_table_joined_later_is_named_out_of_scope(session_of, unit, sql, joined, table,
                                                     column):
    md = tiny.metadata()
    if not unit:
        md = dataclasses.replace(md, privacy_unit=None)
    session = session_of(md)
    with pytest.raises(ProgrammingError) as err:
        session.run(sql, epsilon=1.0)
    text = str(err.value)
    assert f"the ON of the join with {joined} reads {column}, but {table} is not in scope" in text
    assert "it is joined later in the FROM" in text
    assert f"Reorder the joins so that {table} is joined before {joined}" in text
    assert "no equality" not in text
    assert charged(session) == []


def test_the_joins_reordered_run_under_the_unit(session_of):
    session = session_of(tiny.metadata())
    result = session.run(REORDERED, epsilon=1.0)
    assert result.release.privacy_unit == "customer.c_id" and len(result.rows) == 1
