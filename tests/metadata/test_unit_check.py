"""Checking the privacy unit's keys and paths on the data (dpsql/metadata/unit_check.py):
exact counts on a tiny real DuckDB database."""

from __future__ import annotations

import random

import duckdb
import pytest

from dpsql.errors import ProgrammingError
from dpsql.metadata import loads_metadata
from dpsql.metadata.unit_check import (
    KeyCheck,
    PathCheck,
    check_units,
    key_sql,
    orphan_sql,
    reaching_sql,
    refuse_repeated_keys,
    report_lines,
)
from tests.metadata.unit_db import METADATA, make_db
from tests.units import tiny


def _fetch(path):
    con = duckdb.connect(str(path), read_only=True)
    return con, lambda sql: con.execute(sql).fetchall()


def test_exact_counts(tmp_path):
    # lineitem rows of order 13 (NULL customer) reach no unit through orders; order 14's
    # customer 9 has no customer row, but a direct path's value is the unit id: unit 9
    con, fetch = _fetch(make_db(tmp_path, "INSERT INTO lineitem VALUES (13, 1, 1), (14, 1, 1);"))
    try:
        report = check_units(loads_metadata(METADATA), fetch)
    finally:
        con.close()
    assert report.keys == (
        KeyCheck("customer", "c_custkey", values=4, repeated=0, nulls=0),
        KeyCheck("orders", "o_orderkey", values=5, repeated=0, nulls=0),
    )
    assert report.paths == (
        PathCheck("orders", "o_custkey", "customer", "c_custkey", rows=5, nulls=1, orphans=1,
                  no_unit=1),
        PathCheck("lineitem", "l_orderkey", "orders", "o_orderkey", rows=8, nulls=1,
                  orphans=1, no_unit=3),
    )
    assert report.ok
    _, warnings, _ = report_lines(loads_metadata(METADATA), report)
    assert warnings == [
        "orders: 1 of 5 rows belong to no unit (1 with a NULL o_custkey): the same in every "
        "neighbour, so every release counts them in full",
        "orders: 1 of 5 rows have a o_custkey value not in customer.c_custkey: each such id is "
        "a unit of its own (a direct path's value is the unit id), bounded like any other",
        "lineitem: 3 of 8 rows belong to no unit (1 with a NULL l_orderkey, 1 orphans: "
        "l_orderkey not in orders.o_orderkey, 1 through rows of orders of no unit): the same in "
        "every neighbour, so every release counts them in full",
    ]


def test_repeated_keys_and_null_ids_are_reported(tmp_path):
    # a second customer 2 and a NULL id; orders 10 twice: lineitem rows of order 10 would
    # belong to two orders
    extra = ("INSERT INTO customer VALUES (2, 'e', 0), (NULL, 'f', 0);"
             "INSERT INTO orders VALUES (10, 3, 'F');")
    con, fetch = _fetch(make_db(tmp_path, extra))
    try:
        md = loads_metadata(METADATA)
        report = check_units(md, fetch)
    finally:
        con.close()
    assert report.keys == (
        KeyCheck("customer", "c_custkey", values=5, repeated=1, nulls=1),
        KeyCheck("orders", "o_orderkey", values=6, repeated=1, nulls=0),
    )
    # DISTINCT keys: a repeated key does not multiply the referencing rows
    assert report.paths[1] == PathCheck("lineitem", "l_orderkey", "orders", "o_orderkey",
                                        rows=6, nulls=1, orphans=1, no_unit=2)
    assert not report.ok
    lines, warnings, errors = report_lines(md, report)
    assert lines[0] == "unit id customer.c_custkey: NOT UNIQUE (1 repeated values), 5 values, " \
                       "1 NULL"
    assert lines[1] == "key orders.o_orderkey: NOT UNIQUE (1 repeated values), 6 values, 0 NULL"
    assert errors[0].startswith("customer.c_custkey is not unique (1 values repeat): two rows "
                                "of the unit table would be one unit")
    assert errors[1].startswith("orders.o_orderkey is not unique (1 values repeat): a row "
                                "referencing a repeated value would belong to several units")
    assert warnings[0] == ("customer: 1 rows have a NULL c_custkey; they are no unit, and rows "
                           "linked to them belong to no unit")
    assert warnings[1] == ("orders: 1 of 6 rows belong to no unit (1 with a NULL o_custkey): "
                           "the same in every neighbour, so every release counts them in full")
    assert warnings[2].startswith("orders: 1 of 6 rows have a o_custkey value not in "
                                  "customer.c_custkey: each such id is a unit of its own")


def test_a_clean_database_has_no_warnings(tmp_path):
    extra = ("DELETE FROM orders WHERE o_custkey IS NULL OR o_custkey = 9;"
             "DELETE FROM lineitem WHERE l_orderkey IS NULL OR l_orderkey = 99;")
    con, fetch = _fetch(make_db(tmp_path, extra))
    try:
        md = loads_metadata(METADATA)
        lines, warnings, errors = report_lines(md, check_units(md, fetch))
    finally:
        con.close()
    assert warnings == errors == []
    assert lines == [
        "unit id customer.c_custkey: unique, 4 values, 0 NULL",
        "key orders.o_orderkey: unique, 3 values, 0 NULL",
        "path orders.o_custkey -> customer.c_custkey: 3 rows, 0 NULL, 0 orphans, 0 of no unit",
        "path lineitem.l_orderkey -> orders.o_orderkey: 4 rows, 0 NULL, 0 orphans, 0 of no "
        "unit",
    ]


def test_the_queries_quote_names(tmp_path):
    con = duckdb.connect()
    con.execute('CREATE TABLE "a ""b""" ("k ""1""" INTEGER); INSERT INTO "a ""b""" VALUES (1), '
                "(1), (NULL), (2)")
    assert con.execute(key_sql('"a ""b"""', 'k "1"')).fetchall() == [(3, 1, 1)]
    assert con.execute(orphan_sql('"a ""b"""', 'k "1"', '"a ""b"""', 'k "1"')).fetchall() == \
        [(4, 1, 0)]


def test_reaching_follows_the_whole_path(tmp_path):
    # customer 4 has no orders; customer 2's order 12 has one lineitem; a NULL customer id
    # reaches nothing
    con, fetch = _fetch(make_db(tmp_path, "INSERT INTO customer VALUES (NULL, 'n', 0);"))
    md = loads_metadata(METADATA)
    try:
        assert sorted(v for (v,) in fetch(reaching_sql(md, "customer", "c_name"))) == \
            ["a", "b", "c", "d"]
        # order 14's customer 9 has no row: still unit 9 (a direct path's value is the id)
        assert sorted(v for (v,) in fetch(reaching_sql(md, "orders", "o_orderkey"))) == \
            [10, 11, 12, 14]
        assert sorted(v for (v,) in fetch(reaching_sql(md, "lineitem", "l_orderkey"))) == \
            [10, 10, 11, 12]
    finally:
        con.close()


def test_the_servers_key_check_runs_on_every_backend(make_backend, backend_name, tmp_path):
    # dpsql serve compiles the key checks for its backend (Spark reads DuckDB's SQL transpiled);
    # clean data on DuckDB only (tests/server/test_app.py too), a JVM read costing ~1.5 s
    rows = tiny.random_database(random.Random(3))
    cases = [("twice", [*rows["customer"], (rows["customer"][0][0], 1)], "customer.c_id")]
    if backend_name == "duckdb":
        cases.append(("clean", rows["customer"], None))
    for name, customers, refused in cases:
        path = tiny.write_file(tmp_path / f"{name}.duckdb", {**rows, "customer": customers})
        backend = make_backend(path, tiny.metadata())
        try:
            def fetch(sql: str, backend=backend) -> list[tuple]:
                return backend.execute(backend.compile(sql))[0]

            if refused is None:
                refuse_repeated_keys(tiny.metadata(), fetch)
            else:
                with pytest.raises(ProgrammingError, match=f"id {refused} is not unique"):
                    refuse_repeated_keys(tiny.metadata(), fetch)
        finally:
            backend.close()
